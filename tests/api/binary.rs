//! The real `releasegate serve` process, for the tests that need the binary itself (signals,
//! file-descriptor limits, the shipped deployment, the offline loop): started with JSON logs,
//! waited on until it logs the addresses it bound, its log kept, killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// A hang guard only: a healthy start takes well under a second.
const START_GUARD: Duration = Duration::from_secs(120);

/// An HTTP client for talking to the binary (this test process installs no crypto provider
/// of its own otherwise; the proxy's is in the other process).
pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A running `releasegate serve`: its bound addresses (`host:port`) and every line of its log.
pub(crate) struct Served {
    child: Child,
    pub(crate) public: String,
    pub(crate) admin: String,
    pub(crate) logs: Arc<Mutex<Vec<String>>>,
}

/// `releasegate serve --log-json --config <config>`, with both listeners on 127.0.0.1:0.
pub(crate) fn serve_command(config: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--log-json", "--config"])
        .arg(config)
        .envs([
            ("RELEASEGATE_SERVER__LISTEN", "127.0.0.1:0"),
            ("RELEASEGATE_SERVER__ADMIN_LISTEN", "127.0.0.1:0"),
        ]);
    command
}

impl Served {
    /// Spawns `command` (which runs `serve --log-json`, perhaps through a shell) and waits for
    /// its "serving" line. Panics with the log if the process exits or never serves.
    pub(crate) fn start(mut command: Command) -> Served {
        let mut child = command
            .env("RUST_LOG", "releasegate=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    // Kept before it is announced: whoever is told the proxy serves finds the
                    // announcing line among the logs.
                    logs.lock().unwrap().push(line.clone());
                    if let Ok(json) = serde_json::from_str::<Value>(&line) {
                        let fields = &json["fields"];
                        if fields["message"] == "releasegate serving" {
                            let address =
                                |key: &str| fields[key].as_str().unwrap_or("").to_string();
                            let _ = tx.send((address("listen"), address("admin")));
                        }
                    }
                }
            });
        }
        match rx.recv_timeout(START_GUARD) {
            Ok((public, admin)) => Served {
                child,
                public,
                admin,
                logs,
            },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the proxy did not start: {:?}", logs.lock().unwrap());
            }
        }
    }

    /// The value of the first JSON log line whose message is `message`.
    pub(crate) fn logged_json(&self, message: &str) -> Option<Value> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|json| json["fields"]["message"] == message)
    }

    /// Whether a log line contains `needle`, waiting (bounded by `patience`) for it.
    pub(crate) async fn logged(&self, needle: &str, patience: Duration) -> bool {
        tokio::time::timeout(patience, async {
            while !self.logs.lock().unwrap().iter().any(|l| l.contains(needle)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok()
    }

    /// The text of its admin listener's `/metrics`.
    pub(crate) async fn metrics(&self) -> String {
        client()
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    pub(crate) fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits (bounded) for the process to exit.
    pub(crate) async fn exited(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the proxy did not exit: {:?}",
                self.logs.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then a bounded wait for a successful drain.
    pub(crate) async fn stop(mut self) {
        self.signal("TERM");
        let status = self.exited().await;
        assert!(
            status.success(),
            "{status}: {:?}",
            self.logs.lock().unwrap()
        );
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
