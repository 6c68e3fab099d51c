//! Connection limits: the public connection cap (the admin listener keeps
//! answering), header, idle and body deadlines, early 413, drain delay.
//! Waits that must end are bounded generously; nothing asserts a duration.

use std::net::SocketAddr;
use std::time::Duration;

use releasegate_proxy::server::Application;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::helpers::{CLIENT_KEY, PATIENCE, Provider, TestConfig, request, spawn_upstream};

/// The proxy running in this process.
struct Proxy {
    public: SocketAddr,
    admin: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

impl Proxy {
    async fn start(server_extra: &str, base_url: Option<&str>) -> Proxy {
        let provider = match base_url {
            Some(url) => Provider::Url(url.to_string()),
            None => Provider::Simulated,
        };
        let text = TestConfig {
            server: server_extra.into(),
            provider,
            ..TestConfig::single()
        }
        .toml("");
        let config = releasegate_proxy::load::from_toml(&text).unwrap();
        let app = Application::build(config).await.unwrap();
        let public = SocketAddr::from(([127, 0, 0, 1], app.port()));
        let admin = format!("http://127.0.0.1:{}", app.admin_port());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        Proxy {
            public,
            admin,
            client: reqwest::Client::new(),
            stop: Some(stop),
        }
    }

    async fn admin_get(&self, path: &str) -> reqwest::Response {
        tokio::time::timeout(
            PATIENCE,
            self.client.get(format!("{}{path}", self.admin)).send(),
        )
        .await
        .expect("the admin listener did not answer")
        .unwrap()
    }

    /// How many connections of `listener` the proxy closed for `reason`.
    async fn closed(&self, listener: &str, reason: &str) -> u64 {
        self.metric(&format!(
            "releasegate_connections_closed_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
        ))
        .await
    }

    /// The value of one metric series (0 when absent).
    async fn metric(&self, series: &str) -> u64 {
        let text = self.admin_get("/metrics").await.text().await.unwrap();
        let series = format!("{series} ");
        text.lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// A request head for `path`, authenticated, with `extra` header lines.
pub(crate) fn head(method: &str, path: &str, extra: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer {CLIENT_KEY}\r\n{extra}\r\n"
    )
}

/// Reads one response: its status and body. `None` when the connection ends
/// (or is reset) before a complete response.
pub(crate) async fn read_response<R: AsyncRead + Unpin>(stream: &mut R) -> Option<(u16, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    Some((status, buffer[header_end..header_end + length].to_vec()))
}

/// Sends a complete `GET /nope` and requires the 404 the public router gives it.
pub(crate) async fn served(stream: &mut TcpStream) -> bool {
    if stream
        .write_all(head("GET", "/nope", "").as_bytes())
        .await
        .is_err()
    {
        return false;
    }
    matches!(read_response(stream).await, Some((404, _)))
}

/// Waits until the server closes `stream` (end of stream or reset); false if
/// it is still open after `PATIENCE`. Bytes the server sends are skipped.
pub(crate) async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Writes `bytes` one at a time, `every` apart, until they run out or the
/// peer goes away.
fn trickle(mut writer: tokio::net::tcp::OwnedWriteHalf, bytes: Vec<u8>, every: Duration) {
    tokio::spawn(async move {
        for byte in bytes {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
}

#[tokio::test]
async fn a_full_public_listener_closes_new_connections_while_admin_answers() {
    let proxy = Proxy::start(
        "max_connections = 8\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 60000",
        None,
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(proxy.public).await.unwrap();
        assert!(
            served(&mut stream).await,
            "a connection below the cap is served"
        );
        held.push(stream);
    }
    // The ninth is closed without an answer.
    let mut extra = TcpStream::connect(proxy.public).await.unwrap();
    let answered = tokio::time::timeout(PATIENCE, served(&mut extra))
        .await
        .expect("a connection over the cap must be closed, not left waiting");
    assert!(!answered, "a connection over the cap got an answer");
    // The admin listener has its own budget.
    assert_eq!(proxy.admin_get("/healthz").await.status(), 200);
    assert_eq!(proxy.admin_get("/readyz").await.status(), 200);
    assert!(proxy.closed("public", "over_capacity").await >= 1);
    assert_eq!(
        proxy
            .metric("releasegate_open_connections{listener=\"public\"}")
            .await,
        8
    );
    // A freed slot is usable again.
    drop(held.pop());
    let freed = tokio::time::timeout(PATIENCE, async {
        loop {
            let mut stream = TcpStream::connect(proxy.public).await.unwrap();
            if served(&mut stream).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(freed.is_ok(), "a freed slot was never reused");
    drop(proxy.stop);
}

#[tokio::test]
async fn slow_request_heads_are_closed_after_the_header_timeout() {
    let proxy = Proxy::start(
        "header_read_timeout_ms = 300\nidle_timeout_ms = 60000",
        None,
    )
    .await;
    // Trickling bytes does not extend the deadline.
    let stream = TcpStream::connect(proxy.public).await.unwrap();
    let (mut reader, writer) = stream.into_split();
    let mut endless = b"POST /v1/systemone HTTP/1.1\r\nhost: proxy\r\nx-padding: ".to_vec();
    endless.resize(4096, b'a');
    trickle(writer, endless, Duration::from_millis(20));
    let ended = tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0u8; 256];
        while !matches!(reader.read(&mut chunk).await, Ok(0) | Err(_)) {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "a trickled request head kept its connection open"
    );
    // A connection that never sends a byte is bounded by the same deadline.
    let mut silent = TcpStream::connect(proxy.public).await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection stayed open"
    );
    assert!(proxy.closed("public", "header_timeout").await >= 2);
    assert_eq!(proxy.closed("public", "idle_timeout").await, 0);
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    let proxy = Proxy::start(
        "header_read_timeout_ms = 60000\nidle_timeout_ms = 300",
        None,
    )
    .await;
    let mut stream = TcpStream::connect(proxy.public).await.unwrap();
    assert!(served(&mut stream).await);
    assert!(
        closed_by_server(&mut stream).await,
        "an idle keep-alive connection stayed open"
    );
    assert!(proxy.closed("public", "idle_timeout").await >= 1);
    // Admin connections are bounded too.
    let mut admin = TcpStream::connect(proxy.admin.trim_start_matches("http://"))
        .await
        .unwrap();
    admin
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: admin\r\n\r\n")
        .await
        .unwrap();
    assert!(matches!(read_response(&mut admin).await, Some((200, _))));
    assert!(closed_by_server(&mut admin).await);
}

#[tokio::test]
async fn a_request_in_progress_outlives_the_header_and_idle_timeouts() {
    let (upstream, base_url) = spawn_upstream().await;
    upstream.close();
    let proxy = Proxy::start(
        "header_read_timeout_ms = 100\nidle_timeout_ms = 100",
        Some(&base_url),
    )
    .await;
    let url = format!("http://{}/v1/systemone", proxy.public);
    let call = tokio::spawn(
        proxy
            .client
            .post(url)
            .bearer_auth(CLIENT_KEY)
            .json(&request())
            .send(),
    );
    upstream.arrived().await;
    // Well past both deadlines while the request is in progress.
    tokio::time::sleep(Duration::from_millis(600)).await;
    upstream.release_one();
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["answers"]["cause"]["choice"], "B");
}

#[tokio::test]
async fn a_slow_body_is_cut_with_408_after_the_body_deadline() {
    let proxy = Proxy::start("body_read_timeout_ms = 300", None).await;
    let stream = TcpStream::connect(proxy.public).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = head(
        "POST",
        "/v1/systemone",
        "content-type: application/json\r\ncontent-length: 5000\r\n",
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    // Steady progress does not extend a total deadline.
    trickle(writer, vec![b' '; 5000], Duration::from_millis(20));
    let (status, body) = tokio::time::timeout(PATIENCE, read_response(&mut reader))
        .await
        .expect("a slow body was never cut")
        .expect("the connection ended without an answer");
    assert_eq!(status, 408);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["detail"]["error_type"], "request_timeout");
    let message = body["detail"]["message"].as_str().unwrap();
    assert!(message.contains("300 ms"), "{message}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_gets_413_before_the_body() {
    let proxy = Proxy::start("body_read_timeout_ms = 60000", None).await;
    for (length, expect) in [
        ("65537", ""),
        ("1000000000000", ""),
        ("70000", "expect: 100-continue\r\n"),
    ] {
        let mut stream = TcpStream::connect(proxy.public).await.unwrap();
        let extra =
            format!("content-type: application/json\r\ncontent-length: {length}\r\n{expect}");
        stream
            .write_all(head("POST", "/v1/systemone", &extra).as_bytes())
            .await
            .unwrap();
        let (status, body) = tokio::time::timeout(PATIENCE, read_response(&mut stream))
            .await
            .expect("no answer without the body")
            .expect("the connection ended without an answer");
        assert_eq!(status, 413, "content-length {length}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["detail"]["error_type"], "request_too_large");
    }
    // At the limit the body is read as usual.
    let mut stream = TcpStream::connect(proxy.public).await.unwrap();
    let extra = "content-type: application/json\r\ncontent-length: 65536\r\n";
    let mut bytes = head("POST", "/v1/systemone", extra).into_bytes();
    bytes.extend(std::iter::repeat_n(b' ', 65536));
    stream.write_all(&bytes).await.unwrap();
    let (status, _) = tokio::time::timeout(PATIENCE, read_response(&mut stream))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status, 422,
        "an empty JSON document (json_invalid), not a size error"
    );
}

#[tokio::test]
async fn readyz_turns_503_during_the_drain_delay_while_the_public_port_still_serves() {
    let proxy = Proxy::start("drain_delay_ms = 600000", None).await;
    assert_eq!(proxy.admin_get("/readyz").await.status(), 200);
    let mut proxy = proxy;
    let _ = proxy.stop.take().unwrap().send(());
    let turned = tokio::time::timeout(PATIENCE, async {
        while proxy.admin_get("/readyz").await.status() != 503 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(turned.is_ok(), "/readyz never turned 503");
    let mut stream = TcpStream::connect(proxy.public).await.unwrap();
    assert!(
        served(&mut stream).await,
        "the public port stopped during the drain delay"
    );
}
