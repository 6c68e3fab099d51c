//! `Json::parse_skimming`: a member checked as the reader reads it, and stood in for.

use proptest::prelude::*;

use super::*;

/// What `Json::parse_skimming` must return for `text`: `parse_with_member`'s bytes, and
/// its document, or (where those bytes are given) that document with the member's value
/// replaced by an empty one of its type. The document is whole where the skim left the
/// reading to the whole reader (a key with an escape in the member's value).
fn skimmed_as_expected(text: &[u8]) -> Result<(), TestCaseError> {
    let skimmed = Json::parse_skimming(text, "state");
    let whole = Json::parse_with_member(text, "state");
    match (skimmed, whole) {
        (Ok((skimmed, sent)), Ok((whole, expected_sent))) => {
            prop_assert_eq!(sent, expected_sent);
            let mut stood_in = whole.clone();
            if sent.is_some()
                && let Json::Object(object) = &mut stood_in
            {
                let Some((_, value)) = object.members.iter_mut().find(|(key, _)| key == "state")
                else {
                    return Err(TestCaseError::fail("bytes given for a member not kept"));
                };
                let stand_in = match value {
                    Json::String(_) => Some(Json::String(Cow::Borrowed(""))),
                    Json::Array(_) => Some(Json::Array(Vec::new())),
                    Json::Object(_) => Some(Json::Object(Object::default())),
                    _ => None,
                };
                if let Some(stand_in) = stand_in {
                    *value = stand_in;
                }
            }
            prop_assert!(
                skimmed == stood_in || skimmed == whole,
                "{:?} against {:?}",
                skimmed,
                stood_in
            );
        }
        (Err(skimmed), Err(whole)) => prop_assert_eq!(skimmed.to_string(), whole.to_string()),
        (skimmed, whole) => prop_assert!(false, "{skimmed:?} against {whole:?}"),
    }
    Ok(())
}

#[test]
fn a_skimmed_member_is_checked_and_stands_in_empty() {
    let many = |repeat: bool| {
        let mut keys: Vec<String> = (0..40).map(|i| format!("\"k{i}\": {i}")).collect();
        if repeat {
            keys.push("\"k7\": 0".into());
        }
        format!(r#"{{"state": {{{}}}, "q": 1}}"#, keys.join(", "))
    };
    let texts = [
        r#"{"model": "m", "state": {"a": "x\ny\"z", "b": [1, 2.5, -0, {"c": null}]}, "q": {}}"#
            .to_string(),
        r#"{"state": "plain", "q": 1}"#.into(),
        r#"{"state": "esc\u00e9aped\ud83d\ude00", "q": 1}"#.into(),
        r#"{"state": [], "q": 1}"#.into(),
        r#"{"state": 12, "q": 1}"#.into(),
        r#"{"state": null}"#.into(),
        r#"{"q": {"state": "nested, not skimmed"}}"#.into(),
        r#"{"state": {"a": 1, "a": 2}}"#.into(),
        r#"{"state": {"a\u0062": 1, "ab": 2}}"#.into(),
        r#"{"state": {"x": {"a": 1}, "y": {"a": 2}}}"#.into(),
        r#"{"state": 1, "state": 2}"#.into(),
        r#"{"x": {"a": 1, "a": 2}, "state": [3]}"#.into(),
        many(false),
        many(true),
        format!(r#"{{"state": {}1{}}}"#, "[".repeat(110), "]".repeat(110)),
        format!(r#"{{"state": {}1{}}}"#, "[".repeat(98), "]".repeat(98)),
        r#"{"state": "a\qb"}"#.into(),
        r#"{"state": "lone \ud800"}"#.into(),
        "{\"state\": \"control \u{1} char\"}".into(),
        r#"{"state": [1,]}"#.into(),
        r#"{"state": {"a" 1}}"#.into(),
        r#"{"state": "unterminated}"#.into(),
        r#"{"state": tru}"#.into(),
        // Strings with escapes: past the first escape the skim tests the whole string for
        // control characters at its closing quote, not run by run.
        "{\"state\": \"a\\nb\u{1}c\"}".into(),
        "{\"state\": \"a\\nb\\\"c\u{1f}\"}".into(),
        "{\"state\": {\"k\": \"\\\"\u{0}\\\"\"}}".into(),
        r#"{"state": "a\nb\qc"}"#.into(),
        r#"{"state": "a\nb\"#.into(),
        r#"{"state": "a\nb\"c"#.into(),
        r#"{"state": "ends with an escape\\"}"#.into(),
        r#"{"state": "\u00e9 then \ud83d\ude00 then \ud800"}"#.into(),
        format!(
            r#"{{"state": "{}", "q": 1}}"#,
            "free \\\"text\\\" \\n".repeat(200)
        ),
        format!(
            "{{\"state\": \"{}{}\", \"q\": 1}}",
            "free \\\"text\\\" \\n".repeat(200),
            '\u{1}'
        ),
    ];
    for text in &texts {
        skimmed_as_expected(text.as_bytes()).unwrap();
    }
    // Skimmed where its bytes are given (the cases the proxy meets), not otherwise.
    let sent = |text: &str| {
        Json::parse_skimming(text.as_bytes(), "state")
            .unwrap()
            .1
            .is_some()
    };
    assert!(sent(&texts[0]) && sent(&many(false)));
    assert!(!sent(&many(true)) && !sent(&texts[7]) && !sent(&texts[10]));
    for text in [&texts[0], &many(false)] {
        let (document, _) = Json::parse_skimming(text.as_bytes(), "state").unwrap();
        assert_eq!(
            document.member("state"),
            Some(&Json::Object(Object::default()))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn any_state_skims_as_it_reads(state in text(), other in text(), first in any::<bool>()) {
        let text = if first {
            format!(r#"{{"state":{state},"q":{other}}}"#)
        } else {
            format!(r#"{{"q":{other}, "state" : {state} }}"#)
        };
        skimmed_as_expected(text.as_bytes())?;
    }

    #[test]
    fn any_bytes_skim_or_fail_as_they_read(
        bytes in mutated_from(text().prop_map(|state| format!(r#"{{"state":{state},"q":1}}"#)))
    ) {
        skimmed_as_expected(&bytes)?;
    }
}
