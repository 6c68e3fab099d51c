use super::*;
use crate::config::Config;
use crate::contract::Contract;
use crate::rng::Rng;
use crate::wire::{Asked, Json, RequestError, check_bytes, check_sent};

fn contract() -> Contract {
    let text = "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n\
        [contracts.c.questions.q]\nclasses = [\"B\", \"A\", \"C\"]\nview = \"full_native\"\n\
        instructions = \"Which team?\"\ndescriptions = { A = \"alpha\" }\n\
        [contracts.c.questions.s]\nclasses = [\"2\", \"0\", \"1\"]\nview = \"full_native\"\n\
        descriptions = { \"0\" = \"low\", \"2\" = [\"high\", 2] }\n\
        [contracts.c.questions.free]\nclasses = [\"x\", \"y\"]\nview = \"choice\"\ncaller_text = true\n";
    Contract::clone(&Config::from_toml(text).unwrap().contracts["c"])
}

/// What the proxy read and checked before question sets were kept: the request read
/// whole (`Json::parse_skimming`) and checked (`check_sent`).
fn read_whole(bytes: &[u8], contract: &Contract) -> Result<Asked, String> {
    let (body, state) = Json::parse_skimming(bytes, "state").map_err(|e| format!("json {e}"))?;
    check_sent(&body, state, contract).map_err(|e| format!("{e:?}"))
}

fn summary(asked: &Result<Asked, RequestError>) -> Result<String, String> {
    match asked {
        Ok(asked) => Ok(summary_of(asked)),
        Err(RequestError::Schema(issues)) if issues.iter().any(|i| i.kind == "json_invalid") => {
            Err("json".into())
        }
        Err(error) => Err(format!("{error:?}")),
    }
}

fn summary_of(asked: &Asked) -> String {
    format!(
        "{} {:?} {}",
        asked.model,
        asked.questions,
        String::from_utf8_lossy(&asked.upstream_bytes())
    )
}

/// `questions` values: the contract's, other spellings of them, the caller's own text,
/// and ones refused (schema, contract, unknown question).
const QUESTIONS: [&str; 10] = [
    r#"{"q":{"type":"choice","criteria":{"A":null,"B":null,"C":null}}}"#,
    r#"{"q":{"type":"choice","criteria":{"C":null,"A":null,"B":null}},"s":{"type":"score","criteria":["low","1",["high",2]]}}"#,
    r#"{ "q" : { "type" : "choice", "criteria" : { "A" : "alpha", "B" : null, "C" : null }, "instructions": "Which team?" } }"#,
    r#"{"free":{"type":"choice","criteria":{"x":"mine","y":null}}}"#,
    r#"{"free":{"type":"choice","criteria":{"x":"yours","y":null}}}"#,
    r#"{"q":{"type":"choice","criteria":{"A":"other","B":null,"C":null}}}"#,
    r#"{"q":{"type":3}}"#,
    r#"{"z":{"type":"noul"}}"#,
    r#"{}"#,
    r#"{"q":{"type":"choice","criteria":{"A":null,"B":null,"C":null}},"q":{"type":"choice","criteria":{"A":null,"B":null,"C":null}}}"#,
];

/// A request around a `questions` value: the model, state, extra members and order vary.
fn request(rng: &mut Rng, questions: &str) -> String {
    let model = [r#""m""#, r#""jev-1""#, r#""""#, "5"][rng.below(4)];
    let state = [r#""s""#, r#"{"a":[1,2.50,"x\n"]}"#, "null"][rng.below(3)];
    let mut members = vec![
        format!(r#""model":{model}"#),
        format!(r#""state":{state}"#),
        format!(r#""questions":{questions}"#),
    ];
    if rng.below(3) == 0 {
        members.push(r#""extra":{"questions":{"q":1}}"#.into());
    }
    if rng.below(8) == 0 {
        members.push(r#""questions":{"q":{"type":"noul"}}"#.into());
    }
    if rng.below(10) == 0 {
        members.remove(rng.below(2));
    }
    for i in (1..members.len()).rev() {
        members.swap(i, rng.below(i + 1));
    }
    let gap = [",", " , ", ",\n"][rng.below(3)];
    let mut text = format!("{{{}}}", members.join(gap));
    if rng.below(12) == 0 {
        // A document cut short, or with something after it.
        text = match rng.below(2) {
            0 => text[..text.len() / 2].to_string(),
            _ => format!("{text} x"),
        };
    }
    text
}

#[test]
fn a_request_checked_against_kept_questions_is_checked_as_read_whole() {
    for seed in 0..4 {
        let contract = contract();
        let mut rng = Rng::new(seed);
        for _ in 0..400 {
            let questions = QUESTIONS[rng.below(QUESTIONS.len())];
            let text = request(&mut rng, questions);
            let room = [Some("a"), Some("b"), None][rng.below(3)];
            let kept = summary(&check_bytes(text.as_bytes(), &contract, room));
            let whole = read_whole(text.as_bytes(), &contract)
                .map(|asked| summary_of(&asked))
                .map_err(|error| {
                    if error.starts_with("json") {
                        "json".into()
                    } else {
                        error
                    }
                });
            assert_eq!(kept, whole, "{text}");
        }
        // Question sets were kept (and so requests were checked against them); requests
        // without a room keep nothing.
        for room in ["a", "b"] {
            let sets = contract.known_questions.sets(room);
            assert!(
                !sets.is_empty() && sets.len() <= ROOM_SETS,
                "{}",
                sets.len()
            );
        }
        assert!(contract.known_questions.sets("").is_empty());
    }
}

#[test]
fn only_passed_sets_are_kept_per_room_the_oldest_replaced_first() {
    let contract = contract();
    let body = |questions: &str| format!(r#"{{"model":"m","state":"s","questions":{questions}}}"#);
    // Refused: nothing kept.
    assert!(check_bytes(body(QUESTIONS[6]).as_bytes(), &contract, Some("a")).is_err());
    assert!(contract.known_questions.sets("a").is_empty());
    // Passed: kept for its room only, once.
    for _ in 0..2 {
        check_bytes(body(QUESTIONS[0]).as_bytes(), &contract, Some("a")).unwrap();
    }
    let sets = contract.known_questions.sets("a");
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].bytes(), QUESTIONS[0].as_bytes());
    assert!(contract.known_questions.sets("b").is_empty());
    // A passed set whose model is refused is not kept either.
    let refused = r#"{"model":"","state":"s","questions":{"free":{"type":"choice","criteria":{"x":null,"y":null}}}}"#;
    assert!(check_bytes(refused.as_bytes(), &contract, Some("a")).is_err());
    assert_eq!(contract.known_questions.sets("a").len(), 1);
    // A full room replaces its oldest set.
    let texts: Vec<String> = (0..ROOM_SETS + 1)
        .map(|i| {
            format!(r#"{{"free":{{"type":"choice","criteria":{{"x":"text {i}","y":null}}}}}}"#)
        })
        .collect();
    for questions in &texts {
        check_bytes(body(questions).as_bytes(), &contract, Some("a")).unwrap();
    }
    let kept: Vec<Vec<u8>> = contract
        .known_questions
        .sets("a")
        .iter()
        .map(|set| set.bytes().to_vec())
        .collect();
    assert_eq!(kept.len(), ROOM_SETS);
    assert!(!kept.contains(&QUESTIONS[0].as_bytes().to_vec()));
    for questions in &texts[1..] {
        assert!(kept.contains(&questions.as_bytes().to_vec()), "{questions}");
    }
    // A value over the size kept is checked, not kept.
    let long = format!(
        r#"{{"free":{{"type":"choice","criteria":{{"x":"{}","y":null}}}}}}"#,
        "w".repeat(MAX_KEPT_BYTES)
    );
    check_bytes(body(&long).as_bytes(), &contract, Some("c")).unwrap();
    assert!(contract.known_questions.sets("c").is_empty());
    // A derived contract keeps nothing of its origin's.
    assert!(
        Contract::clone(&contract)
            .known_questions
            .sets("a")
            .is_empty()
    );
}
