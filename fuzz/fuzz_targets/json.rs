//! The JSON reader (`wire::Json::parse`), differential against serde_json on the same bytes.
//!
//! Oracle: both accept or both refuse; when both accept, the reader's document is
//! serde_json's `Value` (numbers by the rules `wire::json` documents: a non-negative
//! integer that fits `u64`, a negative one that fits `i64`, anything else the nearest
//! `f64`, compared through `Json::to_value`); so is the own one-pass reader's, whenever it
//! does not give up, and the serde visitor's (`Json::parse_with_serde`). Every member of an
//! object is found by `Node::member` (small and indexed objects alike). The writer
//! (`wire::json::write`) writes exactly serde_json's bytes, and they read back to the
//! same value. A top-level member's bytes as sent (`Json::parse_with_member`, how `state`
//! goes upstream) read back to that member's value. A request read against known
//! `questions` values (`Json::parse_request`) stands in `{}` for its `questions` only
//! where that value's bytes are exactly a known one, and is otherwise the skimmed reading.
//! The arena reader (`wire::json::Doc`, how the proxy reads a provider's answer) reads
//! nothing serde_json refuses, and what it reads is serde_json's `Value`, every member
//! found by `Node::member`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use releasegate_core::fuzzing::{read_doc, read_own};
use releasegate_core::wire::json::{QuestionsAt, write};
use releasegate_core::wire::{Json, Node};
use serde_json::Value;

fuzz_target!(|bytes: &[u8]| {
    let reference = serde_json::from_slice::<Value>(bytes);
    let read = Json::parse(bytes);
    let (reference, read) = match (reference, read) {
        (Ok(reference), Ok(read)) => (reference, read),
        (Err(_), Err(_)) => {
            assert!(
                read_own(bytes).is_none(),
                "the own reader accepts what serde_json refuses"
            );
            assert!(
                read_doc(bytes).is_none(),
                "the arena reader accepts what serde_json refuses"
            );
            return;
        }
        (reference, read) => {
            panic!("accepted by one only: serde_json {reference:?}, reader {read:?}")
        }
    };
    assert_eq!(read.to_value(), reference, "the reader's document differs");
    if let Some(own) = read_own(bytes) {
        assert_eq!(
            own.to_value(),
            reference,
            "the own reader's document differs"
        );
    }
    if let Some((doc, members)) = read_doc(bytes) {
        assert_eq!(doc, reference, "the arena reader's document differs");
        for (key, member) in members {
            assert_eq!(member.as_ref(), reference.get(&key), "arena member {key:?}");
        }
    }
    let visited = Json::parse_with_serde(bytes).expect("serde_json accepted these bytes");
    assert_eq!(
        visited.to_value(),
        reference,
        "the serde visitor's document differs"
    );

    // Lookups through `Node`, as the release path reads an answer.
    if let (Some(object), Value::Object(map)) = (read.as_object(), &reference) {
        assert_eq!(read.object_len(), Some(map.len()));
        assert_eq!(object.len(), map.len());
        for (key, value) in map {
            let member = read.member(key).expect("a key of the document is found");
            assert_eq!(&member.to_value(), value, "member {key:?}");
        }
    }

    // A top-level member as sent (how `state` goes upstream): the same document, and the
    // member's bytes read back to the member's value, for each key present.
    if let Value::Object(map) = &reference {
        for key in ["state", "model", "questions"] {
            let (document, sent) =
                Json::parse_with_member(bytes, key).expect("the same bytes parse again");
            assert_eq!(document.to_value(), reference);
            if let Some(sent) = sent {
                let value = serde_json::from_slice::<Value>(sent).expect("a member's bytes parse");
                assert_eq!(Some(&value), map.get(key), "member {key:?} as sent");
            }
            // Skimmed (how the proxy reads a request's `state`): the same bytes, and the
            // same document but, where they are given, an empty stand-in of the
            // member's type, or the whole document.
            let (skimmed, skimmed_sent) =
                Json::parse_skimming(bytes, key).expect("the same bytes parse again");
            assert_eq!(skimmed_sent, sent, "member {key:?} skimmed");
            let mut stood_in = reference.clone();
            if sent.is_some()
                && let Some(value) = stood_in.get_mut(key)
            {
                match value {
                    Value::String(s) => s.clear(),
                    Value::Array(items) => items.clear(),
                    Value::Object(members) => members.clear(),
                    _ => {}
                }
            }
            let skimmed = skimmed.to_value();
            assert!(
                skimmed == stood_in || skimmed == reference,
                "member {key:?} skimmed: {skimmed:?}"
            );
        }
    }

    // A request against known `questions` values: with none, the skimmed reading, and
    // where the value was read, its bytes; with known candidates cut from the input at the
    // value's place (shorter, exact, longer), a stand-in exactly for the value's own bytes.
    let (request, state, questions) = Json::parse_request(bytes, &[]).expect("parses again");
    let (skimmed, skimmed_state) = Json::parse_skimming(bytes, "state").expect("parses again");
    assert_eq!(request.to_value(), skimmed.to_value(), "parse_request without known");
    assert_eq!(state, skimmed_state);
    if let Some(QuestionsAt::Read(span)) = questions {
        let own = &bytes[span.clone()];
        let value = serde_json::from_slice::<Value>(own).expect("the value's bytes parse");
        assert_eq!(Some(&value), reference.get("questions"), "questions as read");
        let mut stood_in = request.to_value();
        if let Some(value) = stood_in.get_mut("questions") {
            *value = Value::Object(Default::default());
        }
        for end in [span.start + 1, span.end - 1, span.end, span.end + 1, bytes.len()] {
            let Some(candidate) = bytes.get(span.start..end.max(span.start)) else {
                continue;
            };
            let known = [candidate];
            let (document, known_state, at) =
                Json::parse_request(bytes, &known).expect("parses again");
            assert_eq!(known_state, state, "state with a known candidate");
            if at == Some(QuestionsAt::Known(0)) {
                // The value's own bytes (a candidate may carry the whitespace after them).
                assert_eq!(candidate.trim_ascii_end(), own, "a stand-in for other bytes");
                assert_eq!(document.to_value(), stood_in, "the stood-in document");
            } else {
                // Read as without a candidate, or whole where a candidate that is not a
                // whole value (only the fuzzer makes one) stood at the place and the
                // reading after it failed.
                let document = document.to_value();
                assert!(
                    document == request.to_value() || document == reference,
                    "a document read: {document:?}"
                );
                assert!(candidate != own || !own.starts_with(b"{"), "own bytes not known");
            }
        }
    }

    // The writer: serde_json's bytes, which read back to the same value.
    let written = write::to_vec(&read);
    let expected = serde_json::to_vec(&reference).expect("a Value always writes");
    assert_eq!(
        written,
        expected,
        "the writer differs from serde_json: {:?} vs {:?}",
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&expected)
    );
    let again = Json::parse(&written).expect("what the writer writes reads back");
    assert_eq!(
        again.to_value(),
        reference,
        "the round trip changes the value"
    );
});
