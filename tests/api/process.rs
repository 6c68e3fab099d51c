//! The real binary under signals and limits: SIGHUP reloads the configuration,
//! SIGTERM drains (with `/readyz` at 503 and the admin port up until the end),
//! and a full public listener leaves file descriptors for the admin port.

use std::net::SocketAddr;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpStream;

use super::binary::{BIN, Served, client, serve_command};
use super::connections::served;
use super::helpers::{CLIENT_KEY, PATIENCE, request, spawn_upstream};
use super::helpers::{Provider, TestConfig, recipient};

/// A key the configuration binds only after a reload.
const ADDED_KEY: &str = "client-key-added-by-sighup";

/// `releasegate serve` on a configuration of its own, its log collected.
struct Serving {
    process: Served,
    public: SocketAddr,
    admin: String,
    logs: Arc<Mutex<Vec<String>>>,
    dir: super::helpers::Scratch,
}

impl Serving {
    /// Starts the binary (through `sh` with `ulimit -n` when `open_files` is
    /// set) and waits for its "serving" line with the bound addresses.
    fn start(name: &str, config: &str, open_files: Option<u32>) -> Serving {
        let dir = super::helpers::scratch(&format!("process-{name}"));
        let path = dir.join("releasegate.toml");
        std::fs::write(&path, config).unwrap();
        let command = match open_files {
            None => serve_command(&path),
            Some(limit) => {
                let mut command = Command::new("sh");
                command
                    .arg("-c")
                    .arg(format!(
                        "ulimit -n {limit} && exec \"$0\" serve --log-json --config \"$1\""
                    ))
                    .arg(BIN)
                    .arg(&path);
                command
            }
        };
        let process = Served::start(command);
        Serving {
            public: process.public.parse().unwrap(),
            admin: format!("http://{}", process.admin),
            logs: process.logs.clone(),
            process,
            dir,
        }
    }

    fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    fn running(&mut self) -> bool {
        self.process.running()
    }

    async fn exited(&mut self) -> ExitStatus {
        self.process.exited().await
    }

    async fn logged(&self, needle: &str) -> bool {
        self.process.logged(needle, PATIENCE).await
    }

    async fn decide(&self, client: &reqwest::Client) -> reqwest::Response {
        tokio::time::timeout(
            PATIENCE,
            client
                .post(format!("http://{}/v1/systemone", self.public))
                .bearer_auth(CLIENT_KEY)
                .json(&request())
                .send(),
        )
        .await
        .expect("no answer")
        .unwrap()
    }

    async fn decide_as(&self, client: &reqwest::Client, key: &str) -> u16 {
        tokio::time::timeout(
            PATIENCE,
            client
                .post(format!("http://{}/v1/systemone", self.public))
                .bearer_auth(key)
                .json(&request())
                .send(),
        )
        .await
        .expect("no answer")
        .unwrap()
        .status()
        .as_u16()
    }

    async fn admin_status(&self, client: &reqwest::Client, path: &str) -> u16 {
        tokio::time::timeout(PATIENCE, client.get(format!("{}{path}", self.admin)).send())
            .await
            .expect("the admin listener did not answer")
            .expect("the admin listener is gone")
            .status()
            .as_u16()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_configuration_and_refuses_a_broken_one() {
    let (_upstream, base_url) = spawn_upstream().await;
    let config = TestConfig {
        server: "shutdown_grace_ms = 5000".into(),
        provider: Provider::Url(String::from(&base_url)),
        ..TestConfig::single()
    };
    let mut proxy = Serving::start("hup", &config.toml(""), None);
    let client = client();
    assert_eq!(proxy.decide(&client).await.status(), 200);
    assert_eq!(proxy.decide_as(&client, ADDED_KEY).await, 401);

    // A recipient added to the file works once SIGHUP reloaded it.
    let mut added = config.clone();
    added
        .recipients
        .push(recipient("added", ADDED_KEY, &["main"]));
    std::fs::write(proxy.dir.join("releasegate.toml"), added.toml("")).unwrap();
    proxy.signal("HUP");
    assert!(
        proxy.logged("configuration reloaded").await,
        "SIGHUP did not reload: {:?}",
        proxy.logs.lock().unwrap()
    );
    assert_eq!(proxy.decide_as(&client, ADDED_KEY).await, 200);

    // A broken file is refused whole, logged with its key; the process keeps serving.
    let mut broken = added.clone();
    for recipient in &mut broken.recipients {
        recipient.contracts = vec!["nope"];
    }
    std::fs::write(proxy.dir.join("releasegate.toml"), broken.toml("")).unwrap();
    proxy.signal("HUP");
    assert!(
        proxy.logged("configuration reload refused").await,
        "{:?}",
        proxy.logs.lock().unwrap()
    );
    assert!(
        proxy
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("recipients[0].contracts")),
        "the refusal names the key"
    );
    assert!(proxy.running(), "SIGHUP ended the process");
    assert_eq!(proxy.decide(&client).await.status(), 200);
    assert_eq!(proxy.decide_as(&client, ADDED_KEY).await, 200);
    assert_eq!(proxy.admin_status(&client, "/readyz").await, 200);
    proxy.signal("TERM");
    assert_eq!(proxy.exited().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_log_line_of_a_request_carries_its_ids() {
    let (_upstream, base_url) = spawn_upstream().await;
    let mut proxy = Serving::start(
        "span",
        &TestConfig {
            provider: Provider::Url(String::from(&base_url)),
            ..TestConfig::single()
        }
        .toml(""),
        None,
    );
    let client = client();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let response = client
        .post(format!("http://{}/v1/systemone", proxy.public))
        .bearer_auth(CLIENT_KEY)
        .header("traceparent", caller)
        .json(&request())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(proxy.decide_as(&client, "unknown-key").await, 401);
    assert!(proxy.logged("request failed").await);
    proxy.signal("TERM");
    assert_eq!(proxy.exited().await.code(), Some(0));

    let lines: Vec<Value> = proxy
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    // The access line carries the ids as its own fields.
    let served = lines
        .iter()
        .find(|line| {
            line["fields"]["message"] == "request" && line["fields"]["request_id"] == request_id
        })
        .expect("the request's access line");
    let fields = &served["fields"];
    assert_eq!(fields["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(fields["recipient"], "one");
    assert_eq!(fields["contract"], "main");
    // The other lines of a request are written in its span.
    // Refused before a recipient is known: the span has the ids only.
    let failed = lines
        .iter()
        .find(|line| line["fields"]["message"] == "request failed")
        .expect("the refusal's log line");
    assert!(failed["span"]["request_id"].is_string());
    assert_eq!(failed["span"]["trace_id"].as_str().unwrap().len(), 32);
    assert!(failed["span"].get("recipient").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_in_flight_requests_while_readyz_answers_503() {
    let (upstream, base_url) = spawn_upstream().await;
    upstream.close();
    let mut proxy = Serving::start(
        "term",
        &TestConfig {
            server: "shutdown_grace_ms = 30000\ndrain_delay_ms = 0".into(),
            provider: Provider::Url(String::from(&base_url)),
            ..TestConfig::single()
        }
        .toml(""),
        None,
    );
    let client = client();
    assert_eq!(proxy.admin_status(&client, "/readyz").await, 200);
    let in_flight = {
        let request = client
            .post(format!("http://{}/v1/systemone", proxy.public))
            .bearer_auth(CLIENT_KEY)
            .json(&request())
            .send();
        tokio::spawn(request)
    };
    upstream.arrived().await;
    proxy.signal("TERM");
    // Not ready, yet the admin port answers while the request is in flight.
    let turned = tokio::time::timeout(PATIENCE, async {
        while proxy.admin_status(&client, "/readyz").await != 503 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(turned.is_ok(), "/readyz never turned 503");
    assert_eq!(proxy.admin_status(&client, "/healthz").await, 200);
    // New public connections are no longer served.
    let stopped = tokio::time::timeout(PATIENCE, async {
        loop {
            match TcpStream::connect(proxy.public).await {
                Err(_) => return,
                Ok(mut stream) => {
                    if !served(&mut stream).await {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        stopped.is_ok(),
        "the public port kept serving new connections"
    );
    assert!(proxy.running(), "the proxy exited with a request in flight");
    assert_eq!(proxy.admin_status(&client, "/readyz").await, 503);
    // The in-flight request completes, then the process exits cleanly.
    upstream.release_one();
    let response = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .expect("the in-flight request never completed")
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["answers"]["cause"]["choice"], "B");
    drop(client);
    assert_eq!(proxy.exited().await.code(), Some(0));
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn a_full_public_listener_leaves_file_descriptors_for_the_admin_port() {
    // 128 open files and the default public cap of 10000: the proxy must
    // lower the cap instead of running out of descriptors for everything.
    let mut proxy = Serving::start(
        "fds",
        &TestConfig {
            server:
                "admin_max_connections = 8\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 60000"
                    .into(),
            provider: Provider::Simulated,
            ..TestConfig::single()
        }
        .toml(""),
        Some(128),
    );
    let mut held = Vec::new();
    let mut refused = false;
    for _ in 0..300 {
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(proxy.public)).await
        else {
            refused = true;
            break;
        };
        match tokio::time::timeout(Duration::from_secs(2), served(&mut stream)).await {
            Ok(true) => held.push(stream),
            _ => {
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "300 connections fit in 128 file descriptors?");
    assert!(!held.is_empty());
    let client = client();
    assert_eq!(proxy.admin_status(&client, "/healthz").await, 200);
    let metrics = tokio::time::timeout(
        PATIENCE,
        client.get(format!("{}/metrics", proxy.admin)).send(),
    )
    .await
    .unwrap()
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        metrics.contains(
            "releasegate_connections_closed_total{listener=\"public\",reason=\"over_capacity\"} "
        ) && !metrics.contains(
            "releasegate_connections_closed_total{listener=\"public\",reason=\"over_capacity\"} 0\n"
        ),
        "the public listener ran out of descriptors instead of hitting its cap"
    );
    assert!(proxy.logged("lowered to fit the open-file limit").await);
    drop(held);
    drop(client);
    proxy.signal("TERM");
    assert_eq!(proxy.exited().await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn access_lines_are_written_in_batches_and_all_of_them_by_exit() {
    let (_upstream, base_url) = spawn_upstream().await;
    let mut proxy = Serving::start(
        "access",
        &TestConfig {
            server: "worker_threads = 2".into(),
            provider: Provider::Url(String::from(&base_url)),
            ..TestConfig::single()
        }
        .toml(""),
        None,
    );
    let client = client();
    let access_lines = |proxy: &Serving| {
        proxy
            .logs
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains("\"target\":\"releasegate::access\""))
            .count()
    };
    for _ in 0..3 {
        assert_eq!(proxy.decide(&client).await.status(), 200);
    }
    // Nothing else is logged meanwhile: the batch timer writes them.
    let written = tokio::time::timeout(PATIENCE, async {
        while access_lines(&proxy) < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(written.is_ok(), "{:?}", proxy.logs.lock().unwrap());
    for _ in 0..2 {
        assert_eq!(proxy.decide(&client).await.status(), 200);
    }
    proxy.signal("TERM");
    assert_eq!(proxy.exited().await.code(), Some(0));
    // The reader thread may still be draining the pipe.
    let all = tokio::time::timeout(PATIENCE, async {
        while access_lines(&proxy) < 5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(all.is_ok(), "{:?}", proxy.logs.lock().unwrap());
    assert_eq!(access_lines(&proxy), 5);
}

/// Names of the process's threads.
#[cfg(target_os = "linux")]
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn worker_threads_event_loops_serve_together_and_drain() {
    let (_upstream, base_url) = spawn_upstream().await;
    let mut proxy = Serving::start(
        "loops",
        &TestConfig {
            server: "worker_threads = 3".into(),
            provider: Provider::Url(String::from(&base_url)),
            ..TestConfig::single()
        }
        .toml(""),
        None,
    );
    // The calling thread is the first loop; two more run on threads of their own.
    let loops: Vec<String> = thread_names(proxy.process.id())
        .into_iter()
        .filter(|name| name.starts_with("rg-loop-"))
        .collect();
    assert_eq!(loops.len(), 2, "{loops:?}");
    assert!(proxy.logged("\"event_loops\":3").await);
    // Many connections at once (the loops take turns accepting): all answered.
    let answers = (0..24).map(|_| {
        let client = client();
        let url = format!("http://{}/v1/systemone", proxy.public);
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(CLIENT_KEY)
                .json(&request())
                .send()
                .await
                .map(|response| response.status().as_u16())
        })
    });
    for answer in answers.collect::<Vec<_>>() {
        let status = tokio::time::timeout(PATIENCE, answer)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.unwrap(), 200);
    }
    proxy.signal("TERM");
    assert_eq!(proxy.exited().await.code(), Some(0));
}
