use proptest::prelude::*;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::super::*;
use super::{mutated, text};

/// Whether no object of a document repeats a key or holds more than `MOST_MEMBERS`
/// members (what a `Doc` reads), seen through serde, which passes every key.
struct Plain(bool);

impl<'de> Deserialize<'de> for Plain {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PlainVisitor;
        impl<'de> Visitor<'de> for PlainVisitor {
            type Value = Plain;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_str<E>(self, _: &str) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_unit<E>(self) -> Result<Plain, E> {
                Ok(Plain(true))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Plain, A::Error> {
                let mut plain = true;
                while let Some(Plain(item)) = seq.next_element()? {
                    plain &= item;
                }
                Ok(Plain(plain))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Plain, A::Error> {
                let mut keys: Vec<String> = Vec::new();
                let mut plain = true;
                while let Some(key) = map.next_key::<String>()? {
                    plain &= !keys.contains(&key);
                    keys.push(key);
                    let Plain(value) = map.next_value()?;
                    plain &= value;
                }
                Ok(Plain(plain && keys.len() <= MOST_MEMBERS))
            }
        }
        deserializer.deserialize_any(PlainVisitor)
    }
}

/// Whether `doc` is `json`, numbers compared bit for bit (through `Debug`).
fn same(doc: &Doc<'_>, json: &Json<'_>) -> bool {
    match (doc, json) {
        (Doc::Null, Json::Null) => true,
        (Doc::Bool(a), Json::Bool(b)) => a == b,
        (Doc::Number(a), Json::Number(b)) => format!("{a:?}") == format!("{b:?}"),
        (Doc::String(a), Json::String(b)) => *a == b.as_ref(),
        (Doc::Array(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        (Doc::Object(a), Json::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|((ka, va), (kb, vb))| *ka == kb && same(va, vb))
        }
        _ => false,
    }
}

/// Where a `Doc` is read, it is the one-pass reader's document of the same bytes (and
/// so serde_json's); it is read exactly where that reader reads and no object repeats a
/// key or is large. Returns whether it was read.
fn read_as_json_reads(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let arena = bumpalo::Bump::new();
    let doc = Doc::read(bytes, &arena);
    let own = read::document(bytes);
    let plain = serde_json::from_slice::<Plain>(bytes).is_ok_and(|Plain(plain)| plain);
    match (&doc, &own) {
        (Some(doc), Some(own)) => prop_assert!(same(doc, own), "{doc:?} read, {own:?} expected"),
        (Some(doc), None) => prop_assert!(false, "read {doc:?} where the reader gives up"),
        (None, Some(_)) => prop_assert!(!plain, "gave up on {:?}", String::from_utf8_lossy(bytes)),
        (None, None) => {}
    }
    if let Some(doc) = &doc {
        prop_assert!(plain);
        let value: Value = serde_json::from_slice(bytes).unwrap();
        prop_assert_eq!(doc.to_value(), value);
    }
    Ok(doc.is_some())
}

#[test]
fn a_doc_reads_documents_as_the_reader_does() {
    let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
    let (shallow, too_deep) = (deep(100), deep(101));
    for text in [
        "null",
        " true ",
        "-0.0",
        "18446744073709551616",
        r#""\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00 é""#,
        r#"{"b": 1, "a": {"y": [null, false, "x"], "x": {}}, "c": []}"#,
        r#"{"esc\"aped": "line\nbreak", "esc\u0022aped2": 1}"#,
        "[[], {}, [1, [2, [3]]]]",
        shallow.as_str(),
    ] {
        assert!(
            read_as_json_reads(text.as_bytes()).unwrap(),
            "gave up on {text}"
        );
    }
    for text in [
        "",
        "[1,]",
        "\"\\ud800\"",
        "1e400",
        too_deep.as_str(),
        r#"{"a": 1, "b": 2, "a": 3}"#,
        r#"{"k": {"a": 1, "a": 1}}"#,
        r#"{"esc\"aped": 1, "esc\u0022aped": 2}"#,
    ] {
        assert!(!read_as_json_reads(text.as_bytes()).unwrap(), "read {text}");
    }
}

#[test]
fn a_doc_holds_objects_up_to_its_bound() {
    let object = |n: usize| {
        let members: Vec<String> = (0..n).map(|i| format!("\"q{i}\": {i}")).collect();
        format!("{{{}}}", members.join(", "))
    };
    let arena = bumpalo::Bump::new();
    let most = object(MOST_MEMBERS);
    let doc = Doc::read(most.as_bytes(), &arena).expect("an object at the bound is read");
    for i in 0..MOST_MEMBERS {
        assert_eq!(
            doc.member(&format!("q{i}")).and_then(Node::unsigned),
            Some(i as u64)
        );
    }
    assert_eq!(doc.object_len(), Some(MOST_MEMBERS));
    assert_eq!(doc.member("q99"), None);
    let over = object(MOST_MEMBERS + 1);
    assert_eq!(Doc::read(over.as_bytes(), &arena), None);
    assert!(read_as_json_reads(over.as_bytes()).is_ok());
}

/// A repeated key is found wherever it stands, among keys that share its length and
/// last byte (compared in full) and among keys that share neither.
#[test]
fn a_repeated_key_is_found_among_any_others() {
    let arena = bumpalo::Bump::new();
    let object = |keys: &[String]| {
        let members: Vec<String> = keys.iter().map(|key| format!("\"{key}\": 0")).collect();
        format!("{{{}}}", members.join(","))
    };
    let alike: Vec<String> = (b'a'..=b'z').map(|c| format!("{}key", c as char)).collect();
    let unlike: Vec<String> = (1..=MOST_MEMBERS - 1).map(|n| "k".repeat(n)).collect();
    for keys in [alike, unlike] {
        assert!(Doc::read(object(&keys).as_bytes(), &arena).is_some());
        for repeated in 0..keys.len() {
            let mut with = keys.clone();
            with.insert(repeated + 1, keys[repeated].clone());
            assert_eq!(
                Doc::read(object(&with).as_bytes(), &arena),
                None,
                "{with:?}"
            );
            let mut last = keys.clone();
            last.push(keys[repeated].clone());
            assert_eq!(
                Doc::read(object(&last).as_bytes(), &arena),
                None,
                "{last:?}"
            );
        }
    }
}

#[test]
fn nodes_read_the_same_from_a_doc_and_a_json() {
    let text =
        br#"{"s": "x\ty", "n": -2, "u": 7, "f": 0.25, "z": null, "o": {"k": true}, "a": [1]}"#;
    let arena = bumpalo::Bump::new();
    let doc = Doc::read(text, &arena).unwrap();
    let json = Json::parse(text).unwrap();
    for key in ["s", "n", "u", "f", "z", "o", "a", "missing"] {
        let (d, j) = (doc.member(key), json.member(key));
        assert_eq!(d.is_some(), j.is_some(), "{key}");
        let (Some(d), Some(j)) = (d, j) else { continue };
        assert_eq!(d.text(), j.text(), "{key}");
        assert_eq!(
            d.number().map(f64::to_bits),
            j.number().map(f64::to_bits),
            "{key}"
        );
        assert_eq!(d.unsigned(), j.unsigned(), "{key}");
        assert_eq!(d.is_null(), j.is_null(), "{key}");
        assert_eq!(d.object_len(), j.object_len(), "{key}");
        assert_eq!(d.member("k").is_some(), j.member("k").is_some(), "{key}");
    }
    // Looked for first at any position, in or past the object, a key finds what it
    // finds alone: the same member, or none.
    for key in ["s", "n", "u", "f", "z", "o", "a", "missing", ""] {
        for at in 0..9 {
            let near = doc.member_near(key, at).map(|d| d as *const Doc<'_>);
            assert_eq!(
                near,
                doc.member(key).map(|d| d as *const Doc<'_>),
                "{key} {at}"
            );
            assert_eq!(
                json.member_near(key, at).is_some(),
                near.is_some(),
                "{key} {at}"
            );
        }
    }
    assert_eq!(Doc::Null.member_near("s", 0).map(|_| ()), None);
    assert_eq!(doc.text(), None);
    assert_eq!(doc.number(), None);
}

#[test]
fn arenas_nest_and_are_reset() {
    let outer = with_arena(|arena| {
        let doc = Doc::read(br#"{"a": "b\nc"}"#, arena).unwrap();
        // A nested call while the thread's arena is in use gets one of its own.
        let inner = with_arena(|arena| Doc::read(b"[1, 2]", arena).map(|d| d.to_value()));
        assert_eq!(inner, Some(serde_json::json!([1, 2])));
        doc.to_value()
    });
    assert_eq!(outer, serde_json::json!({"a": "b\nc"}));
    // The thread's arena is free again, and reset.
    let held = with_arena(|arena| {
        let before = arena.allocated_bytes();
        Doc::read(b"{\"x\": [true]}", arena).unwrap();
        (before, arena.allocated_bytes())
    });
    assert!(held.0 <= held.1);
}

proptest! {
    #[test]
    fn a_doc_reads_any_document_as_the_reader_does(text in text()) {
        read_as_json_reads(text.as_bytes())?;
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(&text).unwrap()).unwrap();
        // Written by serde_json from a `Value`: no key repeats.
        let large = serde_json::from_str::<Value>(&text).unwrap().as_object().is_some_and(|o| o.len() > MOST_MEMBERS);
        prop_assert!(read_as_json_reads(pretty.as_bytes())? || large);
    }

    #[test]
    fn a_doc_never_reads_what_serde_refuses(bytes in mutated()) {
        read_as_json_reads(&bytes)?;
    }

    #[test]
    fn a_doc_never_reads_what_serde_refuses_in_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        read_as_json_reads(&bytes)?;
    }
}
