//! A minimal local System One upstream for load tests: answers every request
//! with a fixed, valid native answer for the load script's request shape.
//!
//! ```text
//! cargo run --release --example fixed_upstream -- 127.0.0.1:18081 [QUESTIONS|@BODY_FILE] [DELAY_MS]
//! ```
//!
//! With one question (the default) the answer's id is `coarse_cause`; with N
//! questions the ids are `q0`..`q{N-1}`, each a 4-class choice answer over the
//! delivery labels. `@BODY_FILE` answers every request with that file's bytes
//! instead (the load script's request shapes write their answers). `DELAY_MS`
//! (default 0) sleeps before every answer, to measure the latency a proxy adds
//! in front of a slow provider.

use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

const CHOICE: &str = r#"{"type":"choice","choice":"DELAY","confidence":0.78,"probabilities":{"ADDRESS":0.04,"DELAY":0.85,"DAMAGE":0.06,"DELIVERY_RECORD":0.05}}"#;

/// The question ids the load script asks for `questions` questions.
fn question_ids(questions: usize) -> Vec<String> {
    if questions == 1 {
        vec!["coarse_cause".to_string()]
    } else {
        (0..questions).map(|i| format!("q{i}")).collect()
    }
}

fn answer(questions: usize) -> String {
    let answers: Vec<String> = question_ids(questions)
        .iter()
        .map(|id| format!("\"{id}\":{CHOICE}"))
        .collect();
    format!(
        r#"{{"model":"jev-1.13.0","answers":{{{}}},"usage":{{"input_tokens":412,"output_tokens":{questions}}}}}"#,
        answers.join(",")
    )
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18081".to_string());
    let shape = args.next().unwrap_or_else(|| "1".to_string());
    let delay = Duration::from_millis(args.next().and_then(|n| n.parse().ok()).unwrap_or(0));
    let body = match shape.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)?,
        None => answer(shape.parse().unwrap_or(1).max(1)),
    };
    let body: &'static str = Box::leak(body.into_boxed_str());
    let app = Router::new()
        .route(
            "/v1/systemone",
            post(move |_body: axum::body::Bytes| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                ([("content-type", "application/json")], body)
            }),
        )
        .route(
            "/v1/models",
            get(|| async {
                (
                    [("content-type", "application/json")],
                    r#"{"models":[{"name":"jev-1.13.0","description":"fixed","release_date":"2026-09-01"}]}"#,
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("fixed upstream on {addr}: answer {shape}, {delay:?} delay");
    axum::serve(listener, app).await
}
