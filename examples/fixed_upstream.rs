//! A minimal local System One upstream for load tests: answers every request
//! with a fixed, valid native answer for the load script's request.
//!
//! `cargo run --release --example fixed_upstream -- 127.0.0.1:18081`

use axum::Router;
use axum::routing::{get, post};

const ANSWER: &str = r#"{"model":"jev-1.13.0","answers":{"coarse_cause":{"type":"choice","choice":"DELAY","confidence":0.78,"probabilities":{"ADDRESS":0.04,"DELAY":0.85,"DAMAGE":0.06,"DELIVERY_RECORD":0.05}}},"usage":{"input_tokens":412,"output_tokens":1}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".to_string());
    let app = Router::new()
        .route(
            "/v1/systemone",
            post(|_body: axum::body::Bytes| async { ([("content-type", "application/json")], ANSWER) }),
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
    eprintln!("fixed upstream on {addr}");
    axum::serve(listener, app).await
}
