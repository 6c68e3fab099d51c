//! Offline replay releases exactly what the proxy releases.

use std::io::Cursor;

use releasegate_sim::worlds::{Reader, Writer};
use serde_json::{Value, json};

use crate::helpers::{TestConfig, native_answer, request, spawn};

fn variants() -> Vec<Value> {
    let mut out = vec![native_answer()];
    let mut other = native_answer();
    other["answers"]["cause"] = json!({"type": "choice", "choice": "D", "confidence": 0.2,
        "probabilities": {"A": 0.3, "B": 0.1, "C": 0.2, "D": 0.4}});
    other["answers"]["urgent"]["noul"] = json!(0.1);
    out.push(other);
    let mut invalid = native_answer();
    invalid["answers"]["cause"]["probabilities"]["A"] = json!(0.9);
    out.push(invalid);
    out
}

#[tokio::test]
async fn replay_equals_the_proxys_release_for_the_same_answers() {
    for (view, extra) in [
        ("full_native", ""),
        ("choice_confidence", ""),
        (
            "full_probabilities",
            "coarsen = { A = \"AB\", B = \"AB\" }\nwithhold_labels = [\"C\"]",
        ),
    ] {
        let app = spawn(view, extra).await;
        let lines: Vec<String> = variants()
            .into_iter()
            .enumerate()
            .map(|(i, response)| {
                json!({"world_id": format!("w{i}"), "pair_id": "p", "split": "test", "domain": "d",
                       "request": request(), "response": response})
                .to_string()
            })
            .collect();
        let contract = {
            // The same contract the proxy runs, read back from its configuration.
            let text = TestConfig {
                main: true,
                view: view.into(),
                cause: extra.into(),
                ..TestConfig::bare()
            }
            .toml("");
            let config = releasegate_proxy::load::from_toml(&text).unwrap();
            config.contracts()["main"].clone()
        };
        let mut writer = Writer::new(Vec::new());
        releasegate_lab::replay::replay(
            &contract,
            Reader::new(Cursor::new(lines.join("\n").into_bytes())),
            &mut writer,
            &mut |_| {},
        )
        .unwrap();
        let released = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        for (line, native) in released.lines().zip(variants()) {
            let replayed: Value = serde_json::from_str(line).unwrap();
            app.upstream.answer(native);
            let proxied: Value = app.post(&request()).await.json().await.unwrap();
            assert_eq!(replayed["response"], proxied, "view {view}");
        }
        app.stop().await;
    }
}
