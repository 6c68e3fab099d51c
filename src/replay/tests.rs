use std::io::Cursor;

use serde_json::{Value, json};

use super::*;
use crate::config::Config;

fn contract() -> std::sync::Arc<Contract> {
    let text = "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nusage = \"drop\"\n\
        [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n";
    Config::from_toml(text).unwrap().contracts["c"].clone()
}

fn world(id: &str, question: &str, answer: Value) -> String {
    json!({
        "world_id": id, "pair_id": "p1", "split": "train", "domain": "d",
        "request": {"model": "m", "state": "s", "questions": {question: {"type": "choice", "criteria": {"A": null, "B": null}}}},
        "response": {"model": "m", "answers": {question: answer}, "usage": {"input_tokens": 3, "output_tokens": 1}},
        "labels": {"question": question, "T": "A", "S": "x", "hypotheses": ["x", "y"]},
        "custom_key": {"kept": true}
    })
    .to_string()
}

fn run(input: &str) -> Result<(Summary, Vec<Value>), Error> {
    let reader = Reader::new(Cursor::new(input.as_bytes().to_vec()));
    let mut writer = Writer::new(Vec::new());
    let summary = replay(&contract(), reader, &mut writer, &mut |_| {})?;
    let bytes = writer.into_inner()?;
    let lines = String::from_utf8(bytes).unwrap();
    Ok((
        summary,
        lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    ))
}

#[test]
fn replay_releases_rejects_and_keeps_unknown_keys() {
    let good = json!({"type": "choice", "choice": "B", "confidence": 0.4, "probabilities": {"A": 0.3, "B": 0.7}});
    let bad = json!({"type": "choice", "choice": "B", "confidence": 0.4, "probabilities": {"A": 0.9, "B": 0.7}});
    let input = [
        world("w0", "q", good.clone()),
        String::new(),
        world("w1", "q", bad),
        world("w2", "other", good),
    ]
    .join("\n");
    let (summary, out) = run(&input).unwrap();
    assert_eq!(summary.worlds_read, 3);
    assert_eq!(summary.worlds_written, 3);
    assert_eq!(summary.answers_released["q"]["choice"], 1);
    assert_eq!(summary.rejected_answers.total, 1);
    assert_eq!(summary.rejected_answers.worlds[0].line, 3);
    assert_eq!(summary.rejected_answers.by_reason["probability_sum"], 1);
    assert_eq!(summary.rejected_requests.worlds[0].line, 4);
    assert_eq!(summary.mechanisms["q"].kind, "none");
    assert_eq!(
        out[0]["response"],
        json!({"model": "m", "answers": {"q": {"type": "choice", "choice": "B",
            "probabilities": {"A": 0.0, "B": 1.0}, "confidence": 1.0}}, "usage": {}})
    );
    assert_eq!(out[0]["custom_key"], json!({"kept": true}));
    assert_eq!(out[0]["labels"]["S"], json!("x"));
    assert_eq!(
        out[1]["response"]["detail"]["error_type"],
        json!("invalid_upstream_answer")
    );
    assert_eq!(
        out[2]["response"]["detail"]["error_type"],
        json!("invalid_request")
    );
}

#[test]
fn a_malformed_line_is_an_error_with_its_line_number() {
    let good = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.3, "B": 0.7}});
    let input = format!("{}\n{{broken\n", world("w0", "q", good));
    let error = run(&input).unwrap_err();
    assert!(error.to_string().contains("line 2"), "{error}");
}

#[test]
fn batches_keep_input_order_and_line_numbers() {
    let good = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.3, "B": 0.7}});
    let bad = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.9, "B": 0.7}});
    let n = BATCH + 300;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            world(
                &format!("w{i}"),
                "q",
                if i % 500 == 7 {
                    bad.clone()
                } else {
                    good.clone()
                },
            )
        })
        .collect();
    let (summary, out) = run(&lines.join("\n")).unwrap();
    assert_eq!(summary.worlds_read as usize, n);
    let ids: Vec<&str> = out
        .iter()
        .map(|w| w["world_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect::<Vec<_>>());
    let rejected: Vec<usize> = summary
        .rejected_answers
        .worlds
        .iter()
        .map(|r| r.line)
        .collect();
    let expected_lines: Vec<usize> = (0..n).filter(|i| i % 500 == 7).map(|i| i + 1).collect();
    assert_eq!(rejected, expected_lines);
}
