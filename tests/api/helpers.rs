//! Test harness: a scriptable local System One upstream and a spawned proxy.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use releasegate_core::config::Config;
use releasegate_proxy::server::Application;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub(crate) const CLIENT_KEY: &str = "client-key-one";
pub(crate) const MULTI_KEY: &str = "client-key-two";
pub(crate) const PROVIDER_KEY: &str = "provider-secret-key";
pub(crate) const PROVIDER_KEY_ENV: &str = "RELEASEGATE_TEST_PROVIDER_KEY";

/// What the upstream answers next.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    pub status: u16,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
    pub delay: Duration,
}

/// A request the upstream received.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Bound on every wait that must end.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// The local System One upstream: answers what the test scripts (JSON or anything else, any
/// status, headers and delay), records every request it receives (JSON or multipart, headers
/// and raw body), and can hold requests at a gate until the test lets them through.
#[derive(Clone, Default)]
pub(crate) struct Upstream {
    script: Arc<Mutex<Option<Script>>>,
    /// One-shot answers served (in order) before `script`.
    queued: Arc<Mutex<std::collections::VecDeque<Script>>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<Gate>,
}

/// Requests wait here while the gate is closed; each arrival is announced.
struct Gate {
    closed: std::sync::atomic::AtomicBool,
    permits: tokio::sync::Semaphore,
    tell: tokio::sync::mpsc::UnboundedSender<()>,
    arrivals: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>,
}

impl Default for Gate {
    fn default() -> Gate {
        let (tell, arrivals) = tokio::sync::mpsc::unbounded_channel();
        Gate {
            closed: std::sync::atomic::AtomicBool::new(false),
            permits: tokio::sync::Semaphore::new(0),
            tell,
            arrivals: tokio::sync::Mutex::new(arrivals),
        }
    }
}

impl Upstream {
    /// From now on every request waits until `release_one` or `open` lets it through.
    pub(crate) fn close(&self) {
        self.gate
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets every request through from now on (the waiting ones too).
    pub(crate) fn open(&self) {
        self.gate
            .closed
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.gate
            .permits
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    /// Lets one waiting (or the next) request through a closed gate.
    pub(crate) fn release_one(&self) {
        self.gate.permits.add_permits(1);
    }

    /// Waits (bounded) until one more request has reached the upstream.
    pub(crate) async fn arrived(&self) {
        let mut arrivals = self.gate.arrivals.lock().await;
        tokio::time::timeout(PATIENCE, arrivals.recv())
            .await
            .expect("the request never reached the upstream")
            .unwrap();
    }

    pub(crate) fn answer(&self, body: Value) {
        self.script(200, serde_json::to_vec(&body).unwrap(), &[], Duration::ZERO);
    }

    pub(crate) fn script(
        &self,
        status: u16,
        body: Vec<u8>,
        headers: &[(&str, &str)],
        delay: Duration,
    ) {
        *self.script.lock().unwrap() = Some(Script {
            status,
            body,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            delay,
        });
    }

    pub(crate) fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("upstream saw no request")
    }
}

async fn upstream_handler(
    State(upstream): State<Upstream>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    upstream.seen.lock().unwrap().push(Seen {
        headers,
        body: body.clone(),
    });
    let _ = upstream.gate.tell.send(());
    if upstream
        .gate
        .closed
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        upstream.gate.permits.acquire().await.unwrap().forget();
    }
    let queued = upstream.queued.lock().unwrap().pop_front();
    let script = queued
        .or_else(|| upstream.script.lock().unwrap().clone())
        .unwrap_or(Script {
            status: 200,
            body: serde_json::to_vec(&native_answer()).unwrap(),
            headers: vec![],
            delay: Duration::ZERO,
        });
    tokio::time::sleep(script.delay).await;
    let body = answers_to_asked(&body, script.body);
    let mut response = (StatusCode::from_u16(script.status).unwrap(), body).into_response();
    for (name, value) in script.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    response
}

/// A scripted answer `body` cut to the questions the request asked, as a provider answers:
/// a JSON answer's `answers` keep only the asked ids (the request read from a JSON body or
/// from a multipart body's `request` part). Anything else goes out as scripted.
fn answers_to_asked(request: &[u8], body: Vec<u8>) -> Vec<u8> {
    let asked = request
        .windows(2)
        .position(|w| w == b"{\"")
        .and_then(|start| {
            serde_json::Deserializer::from_slice(&request[start..])
                .into_iter::<Value>()
                .next()?
                .ok()
        });
    let Some(Value::Object(questions)) =
        asked.and_then(|mut r| r.get_mut("questions").map(Value::take))
    else {
        return body;
    };
    let Ok(mut answer) = serde_json::from_slice::<Value>(&body) else {
        return body;
    };
    let Some(answers) = answer.get_mut("answers").and_then(Value::as_object_mut) else {
        return body;
    };
    answers.retain(|id, _| questions.contains_key(id));
    serde_json::to_vec(&answer).unwrap()
}

/// A native answer to `request()` with a secret marker in fields no view releases.
pub(crate) fn native_answer() -> Value {
    json!({
        "model": "jev-1.13.0",
        "id": "UPSTREAM-SECRET-ID",
        "answers": {
            "cause": {"type": "choice", "choice": "B", "confidence": 0.61, "rationale": "UPSTREAM-SECRET",
                      "probabilities": {"D": 0.1, "C": 0.05, "B": 0.7, "A": 0.15}},
            "level": {"type": "score", "score": 1.05, "confidence": 0.92, "legend": {"0": "UPSTREAM-SECRET"},
                      "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}},
            "urgent": {"type": "noul", "noul": 0.8}
        },
        "usage": {"input_tokens": 392, "output_tokens": 1, "cost": "UPSTREAM-SECRET"}
    })
}

/// A request with one question of each type.
pub(crate) fn request() -> Value {
    json!({
        "model": "jev-latest",
        "state": {"ticket": "late parcel"},
        "questions": {
            "cause": {"type": "choice", "instructions": "Why?", "criteria": {"A": null, "B": "b", "C": null, "D": null}},
            "level": {"type": "score", "criteria": ["low", "mid", "high"]},
            "urgent": {"type": "noul", "instructions": "Urgent?"}
        }
    })
}

pub(crate) struct TestApp {
    pub address: String,
    pub admin: String,
    pub client: reqwest::Client,
    pub upstream: Upstream,
    /// The running proxy's state (reloads, the configuration in force).
    pub state: releasegate_proxy::server::AppState,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

/// The text `request()` sends, pinned on each question of `questions()`.
pub(crate) const CAUSE_TEXT: &str = "instructions = \"Why?\"\ndescriptions = { B = \"b\" }\n";
pub(crate) const LEVEL_TEXT: &str =
    "descriptions = { \"0\" = \"low\", \"1\" = \"mid\", \"2\" = \"high\" }\n";
pub(crate) const URGENT_TEXT: &str = "instructions = \"Urgent?\"\n";

/// Contract questions for the three question types under one view, each pinning the text
/// `request()` sends.
pub(crate) fn questions(contract: &str, view: &str, extra: &str) -> String {
    format!(
        "[contracts.{contract}.questions.cause]\nclasses = [\"A\", \"B\", \"C\", \"D\"]\nview = \"{view}\"\n{CAUSE_TEXT}{extra}\n\
         [contracts.{contract}.questions.level]\nclasses = [\"0\", \"1\", \"2\"]\nview = \"{view}\"\n{LEVEL_TEXT}\
         [contracts.{contract}.questions.urgent]\nclasses = [\"false\", \"true\"]\nview = \"{view}\"\n{URGENT_TEXT}"
    )
}

/// Where a test configuration's provider `up` points.
#[derive(Clone, Debug)]
pub(crate) enum Provider {
    /// The scriptable upstream `TestConfig::spawn` starts.
    Local,
    /// A System One server at this base URL.
    Url(String),
    /// The in-process simulator.
    Simulated,
}

/// A `[[recipients]]` entry of a `TestConfig`.
#[derive(Clone, Debug)]
pub(crate) struct Recipient {
    pub name: &'static str,
    /// The key it presents (the configuration holds its SHA-256).
    pub key: &'static str,
    pub contracts: Vec<&'static str>,
    /// Further lines (`rate_limit`, `policy`).
    pub lines: String,
}

/// A recipient with no further lines.
pub(crate) fn recipient(
    name: &'static str,
    key: &'static str,
    contracts: &[&'static str],
) -> Recipient {
    Recipient {
        name,
        key,
        contracts: contracts.to_vec(),
        lines: String::new(),
    }
}

/// A contract of `TestConfig::contracts`, on the provider `up`.
#[derive(Clone, Debug)]
pub(crate) struct Contract {
    pub name: String,
    /// Lines on `[contracts.NAME]` besides its provider (`usage`, `policy`, `capture`, ...).
    pub lines: String,
    pub questions: Vec<Question>,
}

/// A contract with its lines and questions.
pub(crate) fn contract(name: &str, lines: &str, questions: Vec<Question>) -> Contract {
    Contract {
        name: name.into(),
        lines: lines.into(),
        questions,
    }
}

/// A question of a `Contract`.
#[derive(Clone, Debug)]
pub(crate) struct Question {
    pub id: String,
    /// Its `classes` (none: no `classes` line, as for a box question).
    pub classes: Vec<String>,
    pub view: String,
    /// Further lines (`type`, texts, mechanism, coarsening, ...); they may open sub-tables of
    /// the question (`[contracts.NAME.questions.ID.workflows]`).
    pub lines: String,
}

/// A question with its classes, view and further lines.
pub(crate) fn question(id: &str, classes: &[&str], view: &str, lines: &str) -> Question {
    Question {
        id: id.into(),
        classes: classes.iter().map(|c| c.to_string()).collect(),
        view: view.into(),
        lines: lines.into(),
    }
}

/// The one builder of test configurations, by named settings. `TestConfig::default()` is
/// the in-process API tests' (two recipients, contracts `main` and `other`, a provider key);
/// `TestConfig::single()` one recipient on `main`, without a provider key, for the binary;
/// `TestConfig::bare()` nothing but the listeners and a simulated provider, for tests that
/// bring their own contracts.
#[derive(Clone, Debug)]
pub(crate) struct TestConfig {
    /// `[server]` lines besides the listeners (127.0.0.1:0) and the body cap.
    pub server: String,
    /// `server.max_body_bytes` (`None`: the proxy's default).
    pub max_body_bytes: Option<u64>,
    /// Further top-level tables (`[tracing]`, `[decision_log]`, `[rate_limit_store]`), after
    /// `[server]`.
    pub tables: String,
    pub provider: Provider,
    /// `[providers.up]` lines besides its kind, URL and key.
    pub provider_extra: String,
    /// Whether the provider has a key (`PROVIDER_KEY`, from `PROVIDER_KEY_ENV`).
    pub provider_key: bool,
    pub recipients: Vec<Recipient>,
    /// Whether there is a contract `main` (the three questions of `questions()`).
    pub main: bool,
    /// The view of `main`'s three questions (`questions()`).
    pub view: String,
    /// Extra lines on `main`'s `cause` question (a mechanism, a coarsening, ...).
    pub cause: String,
    /// Extra lines on `[contracts.main]`; they may open tables of their own.
    pub contract: String,
    /// The contract `other` (`usage = "drop"`, every question `choice`).
    pub other: bool,
    /// Contracts of the test's own, after `main` and `other`.
    pub contracts: Vec<Contract>,
}

impl Default for TestConfig {
    fn default() -> TestConfig {
        TestConfig {
            // One event loop: tests that capture logs do so on their own thread.
            server: "shutdown_grace_ms = 500\nworker_threads = 1".into(),
            max_body_bytes: Some(65536),
            tables: String::new(),
            provider: Provider::Local,
            provider_extra: "timeout_ms = 2000".into(),
            provider_key: true,
            recipients: vec![
                recipient("one", CLIENT_KEY, &["main"]),
                recipient("two", MULTI_KEY, &["main", "other"]),
            ],
            main: true,
            view: "full_native".into(),
            cause: String::new(),
            contract: String::new(),
            other: true,
            contracts: Vec::new(),
        }
    }
}

impl TestConfig {
    /// One recipient (`CLIENT_KEY`) on `main` (`full_native`), no provider key, a long
    /// provider timeout: what the binary and the connection tests run.
    pub(crate) fn single() -> TestConfig {
        TestConfig {
            server: String::new(),
            provider_extra: "timeout_ms = 30000".into(),
            provider_key: false,
            recipients: vec![recipient("one", CLIENT_KEY, &["main"])],
            other: false,
            ..TestConfig::default()
        }
    }

    /// The listeners and a simulated provider `up`, no body cap, no recipient and no
    /// contract: the frame of a test that states its own contracts.
    pub(crate) fn bare() -> TestConfig {
        TestConfig {
            server: String::new(),
            max_body_bytes: None,
            provider: Provider::Simulated,
            provider_extra: String::new(),
            provider_key: false,
            recipients: Vec::new(),
            main: false,
            other: false,
            ..TestConfig::default()
        }
    }

    /// The configuration's TOML; `local` is the base URL of `Provider::Local`.
    pub(crate) fn toml(&self, local: &str) -> String {
        let provider = match &self.provider {
            Provider::Local => format!("kind = \"systemone\"\nbase_url = \"{local}\""),
            Provider::Url(url) => format!("kind = \"systemone\"\nbase_url = \"{url}\""),
            Provider::Simulated => "kind = \"simulated\"".into(),
        };
        let provider_extra = match self.provider {
            Provider::Simulated => String::new(),
            _ if self.provider_key => format!(
                "api_key_env = \"{PROVIDER_KEY_ENV}\"\n{}",
                self.provider_extra
            ),
            _ => self.provider_extra.clone(),
        };
        let cap = self
            .max_body_bytes
            .map(|bytes| format!("max_body_bytes = {bytes}\n"))
            .unwrap_or_default();
        let mut text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{cap}{}\n{}\n\
             [providers.up]\n{provider}\n{provider_extra}\n",
            self.server, self.tables
        );
        for recipient in &self.recipients {
            text.push_str(&format!(
                "[[recipients]]\nname = \"{}\"\nkey_sha256 = \"{}\"\ncontracts = {:?}\n{}\n",
                recipient.name,
                releasegate_proxy::auth::hash_key(recipient.key),
                recipient.contracts,
                recipient.lines
            ));
        }
        if self.main {
            text.push_str(&format!(
                "[contracts.main]\nprovider = \"up\"\n{}\n{}",
                self.contract,
                questions("main", &self.view, &self.cause)
            ));
        }
        if self.other {
            text.push_str(&format!(
                "[contracts.other]\nprovider = \"up\"\nusage = \"drop\"\n{}",
                questions("other", "choice", "")
            ));
        }
        for contract in &self.contracts {
            text.push_str(&format!(
                "[contracts.{}]\nprovider = \"up\"\n{}\n",
                contract.name, contract.lines
            ));
            for question in &contract.questions {
                text.push_str(&format!(
                    "[contracts.{}.questions.{}]\n",
                    contract.name, question.id
                ));
                if !question.classes.is_empty() {
                    text.push_str(&format!("classes = {:?}\n", question.classes));
                }
                text.push_str(&format!(
                    "view = \"{}\"\n{}\n",
                    question.view, question.lines
                ));
            }
        }
        text
    }

    /// The configuration, loaded as the proxy loads it (`PROVIDER_KEY` in `PROVIDER_KEY_ENV`);
    /// `local` is the base URL of `Provider::Local`.
    pub(crate) fn load(&self, local: &str) -> Config {
        let env = |name: &str| (name == PROVIDER_KEY_ENV).then(|| PROVIDER_KEY.to_string());
        releasegate_proxy::load::from_toml_with_env(&self.toml(local), &env).unwrap()
    }

    /// Starts the scriptable upstream and the proxy on this configuration, in-process.
    pub(crate) async fn spawn(self) -> TestApp {
        let upstream = Upstream::default();
        let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_port = upstream_listener.local_addr().unwrap().port();
        let upstream_app = Router::new()
            .route("/v1/systemone", post(upstream_handler))
            .route(
                "/v1/models",
                get(|| async {
                    axum::Json(json!({"models": [
                        {"name": "jev-latest", "description": "d", "release_date": "2026-09-15", "secret": "UPSTREAM-SECRET"},
                        {"name": "jev-1.13.0", "description": "d", "release_date": "2026-09-01"}]}))
                }),
            )
            .with_state(upstream.clone());
        tokio::spawn(async move {
            let _ = axum::serve(upstream_listener, upstream_app).await;
        });
        let config = self.load(&format!("http://127.0.0.1:{upstream_port}"));
        start(config, upstream).await
    }
}

/// The proxy with `main` under `view` (+ `extra` on `cause`), the rest as `TestConfig::default()`.
pub(crate) async fn spawn(view: &str, extra: &str) -> TestApp {
    TestConfig {
        view: view.into(),
        cause: extra.into(),
        ..TestConfig::default()
    }
    .spawn()
    .await
}

impl TestApp {
    pub(crate) async fn post(&self, body: &Value) -> reqwest::Response {
        self.post_raw(
            serde_json::to_vec(body).unwrap(),
            &[("authorization", &format!("Bearer {CLIENT_KEY}"))],
        )
        .await
    }

    pub(crate) async fn post_raw(
        &self,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/v1/systemone", self.address))
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
        }
    }
}

/// Reads an error response: status, error_type, message.
pub(crate) async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let detail = &body["detail"];
    (
        status,
        detail["error_type"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        detail["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// Request headers as name/value pairs.
pub(crate) type Headers<'a> = Vec<(&'a str, &'a str)>;

impl Upstream {
    /// Answers the next request (only) with `status`, `body` and `headers`.
    pub(crate) fn once(&self, status: u16, body: Vec<u8>, headers: &[(&str, &str)]) {
        self.queued.lock().unwrap().push_back(Script {
            status,
            body,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            delay: Duration::ZERO,
        });
    }
}

/// Spawns the scriptable upstream alone; returns it and its base URL.
pub(crate) async fn spawn_upstream() -> (Upstream, String) {
    let upstream = Upstream::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/v1/systemone", post(upstream_handler))
        .with_state(upstream.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (upstream, format!("http://127.0.0.1:{port}"))
}

/// Starts the proxy on a validated configuration (listeners should be `127.0.0.1:0`).
pub(crate) async fn start(config: Config, upstream: Upstream) -> TestApp {
    let app = Application::build(config).await.unwrap();
    let address = format!("http://127.0.0.1:{}", app.port());
    let admin = format!("http://127.0.0.1:{}", app.admin_port());
    let state = app.state().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let _ = app
            .run_until_stopped(async move {
                let _ = stopped.await;
            })
            .await;
    });
    TestApp {
        address,
        admin,
        client: reqwest::Client::new(),
        upstream,
        state,
        stop: Some(stop),
        handle: Some(handle),
    }
}

/// A scratch directory for one test, removed when dropped; derefs to its path.
pub(crate) struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// A fresh, uniquely named scratch directory (`releasegate-{name}-...` under the system's
/// temporary directory).
pub(crate) fn scratch(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("releasegate-{name}-"))
            .tempdir()
            .expect("a scratch directory"),
    )
}
