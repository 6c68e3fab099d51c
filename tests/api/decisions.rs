//! The release decision log through the real proxy: one line per request, and never a
//! byte of request or answer content; `releasegate decisions` summarizes it.

use std::process::Command;

use serde_json::{Value, json};

use super::helpers::{CLIENT_KEY, Recipient, TestConfig, contract, question, recipient};

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// Strings that appear only in requests and answers: none may reach the log.
const CONTENT: [&str; 12] = [
    "STATE-MARKER-qzx",
    "NESTED-MARKER-vwy",
    "INSTRUCTION-MARKER-kjh",
    "CRITERION-MARKER-plm",
    "REQUEST-MODEL-MARKER",
    "provider-model-marker-7",
    // Native probabilities, confidences, scores and nouls, as digits.
    "1234567891",
    "5432109876",
    "0987654321",
    "9012345679",
    "7654321098",
    "UNDECLARED-QUESTION-MARKER",
];

fn native() -> Value {
    json!({
        "model": "provider-model-marker-7",
        "answers": {
            "cause": {"type": "choice", "choice": "B", "confidence": 0.5432109876,
                      "probabilities": {"A": 0.1234567891, "B": 0.5432109876, "C": 0.2222222222, "D": 0.1111100011}},
            "level": {"type": "score", "score": 0.9012345679, "confidence": 0.9012345679,
                      "legend": {"0": "low", "1": "mid", "2": "high"},
                      "probabilities": {"0": 0.0987654321, "1": 0.9012345679, "2": 0.0}},
            "urgent": {"type": "noul", "noul": 0.7654321098}
        },
        "usage": {"input_tokens": 1234567891, "output_tokens": 1}
    })
}

fn request(state: Value) -> Value {
    json!({
        "model": "REQUEST-MODEL-MARKER",
        "state": state,
        "questions": {
            "cause": {"type": "choice", "instructions": "INSTRUCTION-MARKER-kjh",
                      "criteria": {"A": "CRITERION-MARKER-plm", "B": null, "C": null, "D": null}},
            "level": {"type": "score", "criteria": ["low", "mid", "high"]},
            "urgent": {"type": "noul", "instructions": "Urgent?"}
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_decision_log_has_one_line_per_request_and_no_content() {
    let dir = super::helpers::scratch("decisions");
    let path = dir.join("decisions.jsonl");
    // The caller's own text goes upstream (`caller_text`): the log must leave it out too.
    let app = TestConfig {
        tables: format!("[decision_log]\npath = \"{}\"", path.display()),
        cause: "caller_text = true".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    app.upstream.answer(native());
    let auth = format!("Bearer {CLIENT_KEY}");
    let headers = [("authorization", auth.as_str())];
    let mut expected = Vec::new();
    for state in [
        json!("STATE-MARKER-qzx"),
        json!({"ticket": "STATE-MARKER-qzx", "nested": {"deep": ["NESTED-MARKER-vwy", 1234567891]}}),
    ] {
        let response = app
            .post_raw(serde_json::to_vec(&request(state)).unwrap(), &headers)
            .await;
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap();
        // The content did reach the recipient: the log must be what leaves it out.
        assert!(body.contains("5432109876"), "{body}");
        expected.push(200);
    }
    // A question the contract does not declare: 403, and its id is not logged.
    let mut undeclared = request(json!("STATE-MARKER-qzx"));
    undeclared["questions"]["UNDECLARED-QUESTION-MARKER"] =
        json!({"type": "noul", "instructions": "x"});
    let response = app
        .post_raw(serde_json::to_vec(&undeclared).unwrap(), &headers)
        .await;
    assert_eq!(response.status(), 403);
    expected.push(403);
    // A schema error carrying content, an unknown key, and a models listing.
    let response = app
        .post_raw(
            br#"{"model": "REQUEST-MODEL-MARKER", "state": "STATE-MARKER-qzx"}"#.to_vec(),
            &headers,
        )
        .await;
    assert_eq!(response.status(), 422);
    expected.push(422);
    let response = app
        .post_raw(
            serde_json::to_vec(&request(json!("STATE-MARKER-qzx"))).unwrap(),
            &[("authorization", "Bearer STATE-MARKER-qzx")],
        )
        .await;
    assert_eq!(response.status(), 401);
    expected.push(401);
    let response = app
        .client
        .get(format!("{}/v1/models", app.address))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    expected.push(200);
    // Stopping flushes the log.
    app.stop().await;

    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    for marker in CONTENT {
        assert!(!text.contains(marker), "{marker} reached the log:\n{text}");
    }
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let statuses: Vec<u64> = lines
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, expected);
    let first = &lines[0];
    assert_eq!(first["route"], "systemone");
    assert_eq!(first["recipient"], "one");
    assert_eq!(first["contract"], "main");
    assert_eq!(first["provider"], "up");
    assert!(first["request_id"].as_str().unwrap().starts_with("rg-"));
    assert!(first["ts"].as_str().unwrap().ends_with('Z'));
    let answers = first["answers"].as_array().unwrap();
    let ids: Vec<&str> = answers
        .iter()
        .map(|a| a["question"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["cause", "level", "urgent"]);
    for answer in answers {
        let keys: Vec<&str> = answer
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["question", "view", "mechanism", "outcome", "withheld"]
        );
        assert_eq!(answer["outcome"], "applied");
    }
    assert_eq!(lines[2]["answers"], json!([]));
    assert_eq!(lines[4]["recipient"], Value::Null);
    assert_eq!(lines[5]["route"], "models");

    // The summary command reads it back.
    let output = Command::new(BIN)
        .args(["decisions", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success());
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["requests"], 6);
    assert_eq!(summary["recipients"]["one"]["statuses"]["200"], 3);
    assert_eq!(summary["recipients"]["one"]["statuses"]["422"], 1);
    assert_eq!(summary["recipients"]["-"]["statuses"]["401"], 1);
    assert_eq!(summary["contracts"]["main"]["cause"]["answers"], 2);
    assert_eq!(summary["contracts"]["main"]["cause"]["applied"], 2);
    let text = Command::new(BIN)
        .arg("decisions")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.starts_with("6 requests\n"), "{text}");
    assert!(text.contains("main"), "{text}");
}

#[test]
fn check_config_shows_the_new_keys_and_refuses_a_log_in_a_missing_directory() {
    let dir = super::helpers::scratch("check-decisions");
    let config = |log_path: &str| {
        TestConfig {
            server: "watch_config = true".into(),
            tables: format!("[decision_log]\npath = \"{log_path}\"\nmax_files = 2"),
            recipients: vec![Recipient {
                lines: "rate_limit = { requests_per_second = 5, burst = 10 }".into(),
                ..recipient("r", CLIENT_KEY, &["c"])
            }],
            contracts: vec![contract(
                "c",
                "",
                vec![question("q", &["A", "B"], "choice", "")],
            )],
            ..TestConfig::bare()
        }
        .toml("")
    };
    let path = dir.join("ok.toml");
    std::fs::write(&path, config(&dir.join("d.jsonl").display().to_string())).unwrap();
    let output = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let sha = releasegate_core::workflow::sha256_hex(&std::fs::read(&path).unwrap());
    for needle in [
        format!("reload: SIGHUP, and file changes (checked every 1000 ms) · sha256 {sha}"),
        "(rotated at 104857600 bytes, 2 files kept) · queue 4096".to_string(),
        "recipient r: contracts c · rate limit 5/s, burst 10 (per replica)".to_string(),
    ] {
        assert!(stdout.contains(&needle), "{needle}\n{stdout}");
    }
    // check-config does not create the log.
    assert!(!dir.join("d.jsonl").exists());

    let missing = dir.join("missing.toml");
    std::fs::write(&missing, config("/nonexistent-releasegate-dir/d.jsonl")).unwrap();
    let output = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("decision_log.path"), "{stderr}");
}
