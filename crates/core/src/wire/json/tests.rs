use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// `Json` read from `text` means what a `Value` read from it means, key order included.
fn same_as_value(text: &str) {
    let value: Value = serde_json::from_str(text).unwrap();
    let json = Json::parse(text.as_bytes()).unwrap();
    assert_eq!(json.to_value(), value, "{text}");
    let ordered = |v: &Value| serde_json::to_string(v).unwrap();
    assert_eq!(ordered(&json.to_value()), ordered(&value), "{text}");
}

#[test]
fn documents_read_as_values_do() {
    for text in [
        "null",
        "true",
        "[1, -2, 3.5, 1e300, 18446744073709551615, 18446744073709551616, -9223372036854775808]",
        r#"{"b": 1, "a": {"y": [null, false, "x"], "x": {}}, "c": []}"#,
        r#"{"esc\"aped": "line\nbreak \u00e9", "plain": "text"}"#,
        r#"{"a": 1, "b": 2, "a": 3}"#,
        r#"{"k": {"a": 1}, "k": "replaced"}"#,
        "0.1",
        "-0.0",
        "  {}  ",
    ] {
        same_as_value(text);
    }
}

#[test]
fn strings_without_escapes_borrow_from_the_source() {
    let text = br#"{"plain": "text", "esc\n": "a\tb"}"#;
    let json = Json::parse(text).unwrap();
    let object = json.as_object().unwrap();
    let members: Vec<_> = object.members.iter().collect();
    assert!(matches!(members[0].0, Cow::Borrowed("plain")));
    assert!(matches!(members[0].1, Json::String(Cow::Borrowed("text"))));
    assert!(matches!(members[1].0, Cow::Owned(_)));
    assert_eq!(object.get("esc\n").and_then(Node::text), Some("a\tb"));
}

#[test]
fn a_repeated_key_keeps_its_first_place_and_its_last_value() {
    let json = Json::parse(br#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
    let object = json.as_object().unwrap();
    assert_eq!(object.len(), 2);
    let keys: Vec<_> = object.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(object.get("a").and_then(Node::number), Some(3.0));
}

#[test]
fn large_objects_are_indexed_and_mean_the_same() {
    let mut text = String::from("{");
    for i in 0..200 {
        text.push_str(&format!("\"k{}\": {i},", i % 150));
    }
    text.push_str("\"last\": true}");
    same_as_value(&text);
    let json = Json::parse(text.as_bytes()).unwrap();
    let object = json.as_object().unwrap();
    assert!(object.index.is_some());
    assert_eq!(object.len(), 151);
    assert_eq!(object.get("k3").and_then(Node::unsigned), Some(153));
    assert_eq!(object.get("k149").and_then(Node::unsigned), Some(149));
    assert_eq!(object.get("missing"), None);
}

#[test]
fn what_value_refuses_json_refuses() {
    let deep = "[".repeat(200) + &"]".repeat(200);
    for text in [
        "",
        "{",
        "{\"a\" 1}",
        "[1,]",
        "{} x",
        "\"\\ud800\"",
        "NaN",
        "1e",
        "1e400",
        deep.as_str(),
    ] {
        assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
        assert!(Json::parse(text.as_bytes()).is_err(), "{text}");
    }
    assert!(Json::parse(b"\"\xff\"").is_err());
}

#[test]
fn nodes_read_the_same_from_both() {
    let value = json!({"s": "x", "f": 0.5, "u": 7, "i": -7, "n": null, "o": {"a": 1, "b": 2}});
    let bytes = serde_json::to_vec(&value).unwrap();
    let json = Json::parse(&bytes).unwrap();
    for key in ["s", "f", "u", "i", "n", "o", "missing"] {
        let (v, j) = (value.member(key), json.member(key));
        assert_eq!(v.is_some(), j.is_some(), "{key}");
        let (Some(v), Some(j)) = (v, j) else { continue };
        assert_eq!(v.text(), j.text(), "{key}");
        assert_eq!(v.number(), j.number(), "{key}");
        assert_eq!(v.unsigned(), j.unsigned(), "{key}");
        assert_eq!(v.is_null(), j.is_null(), "{key}");
        assert_eq!(v.object_len(), j.object_len(), "{key}");
    }
    assert_eq!(
        json.member("o")
            .and_then(|o| o.member("b"))
            .and_then(Node::number),
        Some(2.0)
    );
    assert_eq!(value.member("s").and_then(|s| s.member("x")), None);
    assert_eq!(json.member("s").and_then(|s| s.member("x")), None);
}

/// JSON text with repeated keys, escapes and every kind of number.
fn text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        "[a-c\"\\\\é\n]{0,4}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec(("[ab\"]{0,2}", inner), 0..24).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::to_string(&k).unwrap()))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// Where the proxy's reader returns a document, it is serde_json's reading of the
/// same bytes (numbers compared bit for bit, through `Debug`); where serde_json
/// refuses the bytes, the reader gives up.
fn read_as_serde_reads(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let own = read::document(bytes);
    let serde = Json::parse_with_serde(bytes);
    match (&own, &serde) {
        (Some(own), Ok(serde)) => prop_assert_eq!(format!("{own:?}"), format!("{serde:?}")),
        (Some(own), Err(error)) => {
            prop_assert!(false, "read {own:?} where serde_json refused: {error}")
        }
        (None, _) => {}
    }
    Ok(own.is_some())
}

#[test]
fn the_reader_reads_what_serde_reads_and_gives_up_on_the_rest() {
    let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
    let (shallow, too_deep) = (deep(100), deep(101));
    let read = [
        "null",
        " true ",
        "false",
        "0",
        "-0",
        "-0.0",
        "0.1",
        "1E5",
        "1e-400",
        "-1.5e+3",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        r#""""#,
        r#""\"\\\/\b\f\n\r\t""#,
        r#""\u00e9\ud83d\ude00 é""#,
        r#"{"a":1,"b":[],"a":{"c":null}}"#,
        "[[], {}, [1, [2, [3]]]]",
        shallow.as_str(),
    ];
    for text in read {
        assert!(
            read_as_serde_reads(text.as_bytes()).unwrap(),
            "gave up on {text}"
        );
    }
    let given_up = [
        "",
        " ",
        "nul",
        "truex",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "1e+",
        "+1",
        "1e400",
        "-1e400",
        "[1,]",
        "[1 2]",
        "{\"a\":}",
        "{\"a\" 1}",
        "{1:2}",
        "{\"a\":1,}",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\\x\"",
        "\"\\u12\"",
        "\"tab\there\"",
        "\"open",
        "[] []",
        too_deep.as_str(),
    ];
    for text in given_up {
        assert!(
            !read_as_serde_reads(text.as_bytes()).unwrap(),
            "read {text:?}"
        );
    }
    for bytes in [
        &b"\"\xff\""[..],
        b"\"\xc3\"",
        b"\"\\n\xe9\"",
        b"\xef\xbb\xbf{}",
    ] {
        assert!(!read_as_serde_reads(bytes).unwrap());
    }
    // Errors are serde_json's, with its position.
    for text in [&b"{\"a\": tru}"[..], b"[1,\n 2,]", b"\"\\ud800\""] {
        let (own, serde) = (
            Json::parse(text).unwrap_err(),
            serde_json::from_slice::<Value>(text).unwrap_err(),
        );
        assert_eq!(own.to_string(), serde.to_string());
    }
}

/// JSON number text of every shape the grammar allows.
fn number_text() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?"
}

/// A document with one change: a byte replaced, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    mutated_from(text())
}

/// A document from `documents` with one change: a byte replaced, inserted or removed.
fn mutated_from(documents: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    let bytes = prop::sample::select(b"{}[]\":,.-+eE0159\\u tnrfals\xc3\xa9\x00\x1f\xff".to_vec());
    (documents, any::<prop::sample::Index>(), bytes, 0..3u8).prop_map(|(text, at, byte, how)| {
        let mut bytes = text.into_bytes();
        let at = at.index(bytes.len() + 1);
        match how {
            0 if at < bytes.len() => bytes[at] = byte,
            1 if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, byte),
        }
        bytes
    })
}

proptest! {
    #[test]
    fn the_reader_reads_any_string_as_serde_does(text in any::<String>(), raw in any::<bool>()) {
        // serde_json escapes only what it must; `raw` also escapes every non-ASCII char.
        let escaped = serde_json::to_string(&text).unwrap();
        let document = if raw {
            escaped
        } else {
            escaped.chars().map(|c| if c.is_ascii() { c.to_string() } else {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04x}")).collect()
            }).collect()
        };
        prop_assert!(read_as_serde_reads(document.as_bytes())?, "gave up on {}", document);
        let read = read::document(document.as_bytes()).unwrap();
        prop_assert_eq!(format!("{read:?}"), format!("{:?}", Json::String(text.into())));
    }

    #[test]
    fn the_reader_reads_any_document_as_serde_does(text in text()) {
        prop_assert!(read_as_serde_reads(text.as_bytes())?, "gave up on {}", text);
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(&text).unwrap()).unwrap();
        prop_assert!(read_as_serde_reads(pretty.as_bytes())?);
    }

    #[test]
    fn the_reader_reads_numbers_as_serde_does(text in number_text()) {
        read_as_serde_reads(text.as_bytes())?;
        let finite = serde_json::from_str::<f64>(&text).is_ok_and(f64::is_finite);
        prop_assert_eq!(read::document(text.as_bytes()).is_some(), finite, "{}", text);
    }

    #[test]
    fn the_reader_reads_floats_as_serde_does(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        for text in [format!("{f}"), format!("{f:e}"), format!("{f:.3}"), format!("{:E}", f)] {
            prop_assert!(read_as_serde_reads(text.as_bytes())?, "gave up on {}", text);
        }
    }

    #[test]
    fn the_reader_never_reads_what_serde_refuses(bytes in mutated()) {
        read_as_serde_reads(&bytes)?;
    }

    #[test]
    fn the_reader_never_reads_what_serde_refuses_in_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        read_as_serde_reads(&bytes)?;
    }

    #[test]
    fn any_document_reads_as_a_value_does(text in text()) {
        let value: Value = serde_json::from_str(&text).unwrap();
        let json = Json::parse(text.as_bytes()).unwrap();
        prop_assert_eq!(serde_json::to_string(&json.to_value()).unwrap(), serde_json::to_string(&value).unwrap());
    }

    #[test]
    fn any_bytes_read_or_fail_as_a_value_does(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let value = serde_json::from_slice::<Value>(&bytes);
        let json = Json::parse(&bytes);
        prop_assert_eq!(value.is_ok(), json.is_ok());
        if let (Ok(value), Ok(json)) = (value, json) {
            prop_assert_eq!(json.to_value(), value);
        }
    }
}

proptest! {
    #[test]
    fn keys_are_the_same_exactly_when_equal(a in "[a-c]{0,3}", b in "[a-c]{0,3}") {
        prop_assert_eq!(super::same_key(&a, &b), a == b);
    }
}

#[test]
fn keys_compare_as_strings_do_at_every_length() {
    // Keys of every length up to past two words that differ in exactly one byte, at each
    // position, or not at all.
    for len in 0..40 {
        let key: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        assert!(same_key(&key, &key.clone()), "{key}");
        for at in 0..len {
            let mut other = key.clone().into_bytes();
            other[at] = b'Z';
            let other = String::from_utf8(other).unwrap();
            assert!(!same_key(&key, &other), "{key} {other}");
            assert!(!same_key(&other, &key), "{other} {key}");
        }
        assert!(!same_key(&key, &format!("{key}a")));
    }
}

proptest! {
    #[test]
    fn any_two_keys_compare_as_strings_do(a in "[ab\u{e9}]{0,20}", b in "[ab\u{e9}]{0,20}") {
        prop_assert_eq!(same_key(&a, &b), a == b);
    }
}

/// A decimal's value, bit for bit, as `Json::parse` reads it.
fn read_float(text: &str) -> u64 {
    match Json::parse(text.as_bytes()).unwrap() {
        Json::Number(Number::Float(x)) => x.to_bits(),
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn decimals_read_as_str_parse_reads_them() {
    for text in [
        "0.85",
        "-0.0",
        "0.0",
        "1.5",
        "0.000000000000001",
        "999999999999999.9",
        "99999999999999.99",
        "123456789012345.6",
        "9007199254740993.0",
        "0.30000000000000004",
        "-12345.678",
    ] {
        let expected: f64 = text.parse().unwrap();
        assert_eq!(read_float(text), expected.to_bits(), "{text}");
    }
}

proptest! {
    #[test]
    fn any_decimal_reads_as_str_parse_reads_it(
        negative in any::<bool>(),
        whole in "(0|[1-9][0-9]{0,12})",
        fraction in "[0-9]{1,18}",
    ) {
        let text = format!("{}{whole}.{fraction}", if negative { "-" } else { "" });
        let expected: f64 = text.parse().unwrap();
        prop_assert_eq!(read_float(&text), expected.to_bits(), "{}", text);
    }
}

#[test]
fn a_top_level_member_is_found_as_sent() {
    let sent = |text: &'static str| {
        let (json, member) = Json::parse_with_member(text.as_bytes(), "state").unwrap();
        assert_eq!(json, Json::parse(text.as_bytes()).unwrap(), "{text}");
        member.map(|bytes| std::str::from_utf8(bytes).unwrap().to_string())
    };
    let digits = "123456789012345678901234567890";
    let text =
        format!(r#"{{"model": "m", "state" :  {{"n": {digits}, "z": -0, "e": 1E2 }} , "q": 1}}"#);
    let text: &'static str = Box::leak(text.into_boxed_str());
    assert_eq!(
        sent(text).as_deref(),
        Some(format!(r#"{{"n": {digits}, "z": -0, "e": 1E2 }}"#).as_str())
    );
    assert_eq!(
        sent(r#"{"state": "a\"b", "x": [1]}"#).as_deref(),
        Some(r#""a\"b""#)
    );
    // Nested members of that name are not the top-level one.
    assert_eq!(sent(r#"{"x": {"state": 1}}"#), None);
    assert_eq!(sent(r#"["state"]"#), None);
    // A repeated key anywhere: the bytes would hold a member the document does not keep.
    assert_eq!(sent(r#"{"state": 1, "state": 2}"#), None);
    assert_eq!(sent(r#"{"state": {"a": 1, "a": 2}}"#), None);
    assert_eq!(sent(r#"{"x": {"a": 1, "a": 2}, "state": 3}"#), None);
    // Left to serde_json (nesting deeper than the reader follows): no bytes, same document.
    let deep = format!(r#"{{"state": {}1{}}}"#, "[".repeat(110), "]".repeat(110));
    let deep: &'static str = Box::leak(deep.into_boxed_str());
    assert_eq!(sent(deep), None);
    assert!(Json::parse_with_member(b"{\"state\": [1,]}", "state").is_err());
}

/// The skimmed member (`Json::parse_skimming`).
mod skim;

/// A document read into an arena (`Doc`).
mod doc;
