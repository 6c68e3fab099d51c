//! The access log: one line per request under its own target, and a switch to turn it off.

use serde_json::Value;

use super::binary::{Served, client, serve_command};
use super::helpers::{CLIENT_KEY, Provider, TestConfig, request, scratch};

/// Serves three requests (two answered, one refused) with `server_extra`, through the binary
/// (its one global subscriber, as an operator runs it); returns the JSON log lines.
async fn logged(server_extra: &str) -> Vec<Value> {
    let dir = scratch("access-log");
    let path = dir.join("releasegate.toml");
    let config = TestConfig {
        server: String::from(server_extra),
        provider: Provider::Simulated,
        ..TestConfig::single()
    };
    std::fs::write(&path, config.toml("")).unwrap();
    let proxy = Served::start(serve_command(&path));
    let url = format!("http://{}/v1/systemone", proxy.public);
    let client = client();
    for key in [CLIENT_KEY, CLIENT_KEY, "not-a-key"] {
        let status = client
            .post(&url)
            .bearer_auth(key)
            .json(&request())
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, if key == CLIENT_KEY { 200 } else { 401 });
    }
    let logs = proxy.logs.clone();
    // The drain writes out the batched access lines before the process ends.
    proxy.stop().await;
    let lines = logs.lock().unwrap().clone();
    lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn access_lines(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|line| line["target"] == releasegate_proxy::telemetry::ACCESS_TARGET)
        .collect()
}

#[tokio::test]
async fn every_request_gets_an_access_line_by_default() {
    let lines = logged("").await;
    let access = access_lines(&lines);
    assert_eq!(access.len(), 3, "{lines:?}");
    let statuses: Vec<&Value> = access.iter().map(|l| &l["fields"]["status"]).collect();
    assert_eq!(statuses, [200, 200, 401]);
    for line in &access {
        assert_eq!(line["fields"]["message"], "request");
        assert_eq!(line["fields"]["route"], "systemone");
        assert!(
            line["fields"]["request_id"]
                .as_str()
                .unwrap()
                .starts_with("rg-")
        );
        assert!(line["fields"]["latency_ms"].is_number());
    }
}

#[tokio::test]
async fn access_log_false_drops_only_the_access_lines() {
    let lines = logged("access_log = false").await;
    assert!(access_lines(&lines).is_empty(), "{lines:?}");
    // Everything else is still logged: start-up, the refused request, the drain.
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["fields"]["message"].as_str())
        .collect();
    for expected in ["listeners bound", "request failed", "drained; stopped"] {
        assert!(messages.contains(&expected), "{expected}: {messages:?}");
    }
}
