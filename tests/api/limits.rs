//! Every limit of `server::Limits`, driven over loopback sockets at a running proxy: each
//! holds on the plain path, or the plain path hands the connection to hyper, which holds
//! it. The test destructures `Limits` without `..`, so a new limit fails to compile here
//! until it is covered. Waits that must end are bounded generously; nothing asserts a
//! duration.

use std::net::SocketAddr;
use std::time::Duration;

use releasegate_proxy::server::{Application, Limits};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::connections::{closed_by_server, head, read_response, served};
use super::helpers::{PATIENCE, Provider, TestConfig};

/// A proxy running in this process, stopped when dropped.
struct Proxy {
    public: SocketAddr,
    limits: Limits,
    _stop: oneshot::Sender<()>,
}

impl Proxy {
    async fn start(server: &str, max_body_bytes: u64) -> Proxy {
        let text = TestConfig {
            server: server.into(),
            max_body_bytes: Some(max_body_bytes),
            provider: Provider::Simulated,
            ..TestConfig::single()
        }
        .toml("");
        let config = releasegate_proxy::load::from_toml(&text).unwrap();
        let app = Application::build(config).await.unwrap();
        let public = SocketAddr::from(([127, 0, 0, 1], app.port()));
        let limits = app.limits();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        Proxy {
            public,
            limits,
            _stop: stop,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.public).await.unwrap()
    }

    /// Sends `bytes` on a new connection and reads one answer.
    async fn answer(&self, bytes: &[u8]) -> (u16, Value) {
        let mut stream = self.connect().await;
        answer_on(&mut stream, bytes).await
    }
}

/// Sends `bytes` on `stream` and reads one answer: its status and JSON body.
async fn answer_on(stream: &mut TcpStream, bytes: &[u8]) -> (u16, Value) {
    stream.write_all(bytes).await.unwrap();
    let (status, body) = tokio::time::timeout(PATIENCE, read_response(stream))
        .await
        .expect("no answer")
        .expect("the connection ended without an answer");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A plain `POST /v1/systemone` (head and body at once) of `body`, with `extra` header lines.
fn plain_post(body: &[u8], extra: &str) -> Vec<u8> {
    let extra = format!(
        "content-type: application/json\r\ncontent-length: {}\r\n{extra}",
        body.len()
    );
    let mut bytes = head("POST", "/v1/systemone", &extra).into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// `count` header lines `x-fNNN: 1`.
fn fields(count: usize) -> String {
    (0..count).map(|i| format!("x-f{i:03}: 1\r\n")).collect()
}

/// One header line `x-padding: aaa…` of `bytes` bytes in all (name, value and framing).
fn padding(bytes: usize) -> String {
    format!(
        "x-padding: {}\r\n",
        "a".repeat(bytes - "x-padding: \r\n".len())
    )
}

#[tokio::test]
async fn every_limit_holds_on_the_plain_path_or_in_hyper() {
    let proxy = Proxy::start(
        "header_read_timeout_ms = 500\nidle_timeout_ms = 500\nbody_read_timeout_ms = 500",
        1_000_000,
    )
    .await;
    let Limits {
        max_connections,
        header_read_timeout,
        idle_timeout,
        body_read_timeout,
        max_body_bytes,
        max_head_bytes,
        max_header_fields,
        max_header_bytes,
        max_plain_head,
        max_plain_body,
    } = proxy.limits;
    assert_eq!(header_read_timeout, Duration::from_millis(500));
    assert_eq!(idle_timeout, Duration::from_millis(500));
    assert_eq!(body_read_timeout, Duration::from_millis(500));
    assert_eq!(max_body_bytes, 1_000_000);
    assert!(max_connections >= 1);
    // The plain path hands over before hyper's limits bite and never serves a body the
    // handler would refuse on size alone.
    assert!(max_plain_head < max_header_bytes && max_header_bytes < max_head_bytes);
    assert!(max_plain_body < max_body_bytes);

    connection_cap().await;
    header_timeout(&proxy).await;
    idle_timeout_holds(&proxy).await;
    body_timeout(&proxy).await;
    body_cap(&proxy, max_body_bytes).await;
    head_cap(&proxy, max_head_bytes).await;
    field_count_cap(&proxy, max_header_fields).await;
    header_bytes_cap(&proxy, max_header_bytes).await;
    plain_head_hand_off(&proxy, max_plain_head, max_header_bytes).await;
    plain_body_hand_off(&proxy, max_plain_body).await;
}

/// `max_connections`: on a proxy of its own (long timeouts, so held connections stay),
/// the connection over the cap is closed without an answer before either path runs.
async fn connection_cap() {
    let capped = Proxy::start(
        "max_connections = 4\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 60000",
        65536,
    )
    .await;
    assert_eq!(capped.limits.max_connections, 4);
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = capped.connect().await;
        assert!(
            served(&mut stream).await,
            "a connection below the cap is served"
        );
        held.push(stream);
    }
    let mut extra = capped.connect().await;
    let answered = tokio::time::timeout(PATIENCE, served(&mut extra))
        .await
        .expect("a connection over the cap must be closed, not left waiting");
    assert!(!answered, "a connection over the cap got an answer");
}

/// `header_read_timeout`: a silent connection and a head cut short on the plain path,
/// and a head cut short after hyper took the connection, are all closed.
async fn header_timeout(proxy: &Proxy) {
    let mut silent = proxy.connect().await;
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection stayed open"
    );
    let mut plain = proxy.connect().await;
    plain
        .write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: p")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut plain).await,
        "a plain head cut short stayed open"
    );
    let mut hyper = proxy.connect().await;
    assert!(served(&mut hyper).await, "GET /nope goes to hyper");
    hyper
        .write_all(b"GET /nope HTTP/1.1\r\nhost: p")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut hyper).await,
        "a head cut short in hyper stayed open"
    );
}

/// `idle_timeout`: a kept-alive connection is closed after a plain request and after one
/// hyper served.
async fn idle_timeout_holds(proxy: &Proxy) {
    let mut plain = proxy.connect().await;
    let (status, _) = answer_on(&mut plain, &plain_post(b"{}", "")).await;
    assert_eq!(status, 422);
    assert!(
        closed_by_server(&mut plain).await,
        "idle after a plain request"
    );
    let mut hyper = proxy.connect().await;
    assert!(served(&mut hyper).await);
    assert!(
        closed_by_server(&mut hyper).await,
        "idle after a hyper request"
    );
}

/// `body_read_timeout`: a body not all here goes to hyper, whose body reader cuts it
/// with 408.
async fn body_timeout(proxy: &Proxy) {
    let mut stream = proxy.connect().await;
    let extra = "content-type: application/json\r\ncontent-length: 5000\r\n";
    let mut bytes = head("POST", "/v1/systemone", extra).into_bytes();
    bytes.extend_from_slice(b"{\"a\": ");
    let (status, body) = answer_on(&mut stream, &bytes).await;
    assert_eq!(status, 408);
    assert_eq!(body["detail"]["error_type"], "request_timeout");
}

/// `max_body_bytes`: over it, 413, whether the body came whole (read on the plain path
/// only up to `max_plain_body`, then in hyper) or only its declared length did.
async fn body_cap(proxy: &Proxy, max_body_bytes: usize) {
    let whole = plain_post(&vec![b' '; max_body_bytes + 1], "");
    let (status, body) = proxy.answer(&whole).await;
    assert_eq!(status, 413);
    assert_eq!(body["detail"]["error_type"], "request_too_large");
    let declared = format!(
        "content-type: application/json\r\ncontent-length: {}\r\n",
        max_body_bytes + 1
    );
    let (status, _) = proxy
        .answer(head("POST", "/v1/systemone", &declared).as_bytes())
        .await;
    assert_eq!(status, 413);
}

/// `max_head_bytes`: a head beyond hyper's buffer (the plain path hands it over at
/// `max_plain_head`) is refused with the proxy's 431.
async fn head_cap(proxy: &Proxy, max_head_bytes: usize) {
    let (status, body) = proxy
        .answer(&plain_post(b"{}", &padding(max_head_bytes)))
        .await;
    assert_eq!(status, 431);
    assert_eq!(
        body["detail"]["error_type"],
        "request_header_fields_too_large"
    );
}

/// `max_header_fields`: one field too many is not plain (the plain parser has as many
/// slots); hyper refuses it with the proxy's 431. At the limit the request is served.
async fn field_count_cap(proxy: &Proxy, max_header_fields: usize) {
    // The head's own fields: host, authorization, content-type, content-length.
    let own = 4;
    let over = plain_post(b"{}", &fields(max_header_fields + 1 - own));
    let (status, _) = proxy.answer(&over).await;
    assert_eq!(status, 431);
    let at = plain_post(b"{}", &fields(max_header_fields - own));
    let (status, _) = proxy.answer(&at).await;
    assert_eq!(
        status, 422,
        "at the field limit the request reaches the handler"
    );
}

/// `max_header_bytes`: header fields over it (a head past `max_plain_head`, so hyper's)
/// are refused by the middleware with 431.
async fn header_bytes_cap(proxy: &Proxy, max_header_bytes: usize) {
    let (status, body) = proxy
        .answer(&plain_post(b"{}", &padding(max_header_bytes + 1)))
        .await;
    assert_eq!(status, 431);
    assert_eq!(
        body["detail"]["error_type"],
        "request_header_fields_too_large"
    );
}

/// `max_plain_head`: a complete head longer than the plain path reads goes to hyper and
/// is answered as a short one is.
async fn plain_head_hand_off(proxy: &Proxy, max_plain_head: usize, max_header_bytes: usize) {
    let size = (max_plain_head + max_header_bytes) / 2;
    let (status, body) = proxy.answer(&plain_post(b"{}", &padding(size))).await;
    let (short_status, short_body) = proxy.answer(&plain_post(b"{}", "")).await;
    assert_eq!(
        (status, &body["detail"]["error_type"]),
        (short_status, &short_body["detail"]["error_type"])
    );
}

/// `max_plain_body`: a body over it goes to hyper and is read as usual (an empty JSON
/// document: 422, not a size error).
async fn plain_body_hand_off(proxy: &Proxy, max_plain_body: usize) {
    let (status, _) = proxy
        .answer(&plain_post(&vec![b' '; max_plain_body + 1], ""))
        .await;
    assert_eq!(status, 422);
}
