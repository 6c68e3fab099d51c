//! The access log: one line per request under its own target, and a switch to turn it off.

use std::io::Write;
use std::sync::{Arc, Mutex};

use releasegate_proxy::server::Application;
use serde_json::Value;
use tokio::sync::oneshot;

use super::connections::config_text;
use super::helpers::{CLIENT_KEY, request};

/// Everything logged on this thread (`#[tokio::test]` runs the proxy's tasks on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// Serves three requests (two answered, one refused) with `server_extra`; returns the JSON log lines.
async fn logged(server_extra: &str) -> Vec<Value> {
    let logs = Logs::default();
    let filter = tracing_subscriber::EnvFilter::new("releasegate=info");
    let _guard = tracing::subscriber::set_default(releasegate_proxy::telemetry::subscriber(
        true,
        filter,
        logs.clone(),
    ));
    // Other tests reach the same call sites on threads without a subscriber meanwhile: recompute
    // their cached interest with this one installed (see `hardening::settle_interest`).
    tracing::callsite::rebuild_interest_cache();
    let config = releasegate_proxy::load::from_toml(&config_text(server_extra, None)).unwrap();
    let app = Application::build(config).await.unwrap();
    let url = format!("http://127.0.0.1:{}/v1/systemone", app.port());
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
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
    let _ = stop.send(());
    let _ = running.await;
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    text.lines()
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
    // One event loop: the log is captured on this thread.
    let lines = logged("worker_threads = 1").await;
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
    let lines = logged("worker_threads = 1\naccess_log = false").await;
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
