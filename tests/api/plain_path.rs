//! The public listener's plain path (plain `POST /v1/systemone` requests read and
//! answered without hyper's connection driver) against hyper's own: the same bytes for
//! the same request, whichever serves it, and every request that is not plain (or a
//! connection after one) still hyper's, with its framing, errors and keep-alive rules.
//!
//! A connection is made hyper's for good by a first request that is not plain
//! (`GET /nope`, answered 404 by the router); a fresh connection starts on the plain path.
//! Waits are bounded; nothing asserts a duration.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::connections::head;
use super::helpers::{CLIENT_KEY, PATIENCE, TestApp, TestConfig, Upstream, request};

/// One response as read off the wire: the head's lines (the request ids' and the date's
/// values masked) and the body.
#[derive(Debug, PartialEq)]
struct Wire {
    lines: Vec<String>,
    body: Vec<u8>,
}

impl Wire {
    fn status(&self) -> u16 {
        self.lines[0].split(' ').nth(1).unwrap().parse().unwrap()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.lines.iter().skip(1).find_map(|line| {
            let (key, value) = line.split_once(": ")?;
            (key == name).then_some(value)
        })
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Reads one response off `stream` (bounded by `PATIENCE`); `None` if the connection ends
/// first. Bytes after it stay in `pending` for the next call.
async fn read_wire(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Wire> {
    tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
        };
        let text = String::from_utf8(pending[..end].to_vec()).unwrap();
        let lines: Vec<String> = text
            .split("\r\n")
            .map(|line| match line.split_once(": ") {
                Some((name @ ("x-request-id" | "x-typesafe-request-id"), _)) => {
                    format!("{name}: (id)")
                }
                Some(("date", value)) => {
                    // An IMF-fixdate, as hyper writes it: `Sat, 05 Dec 2026 05:30:08 GMT`.
                    assert_eq!(value.len(), 29, "date {value:?}");
                    assert!(value.ends_with(" GMT"), "date {value:?}");
                    "date: (now)".to_string()
                }
                _ => line.to_string(),
            })
            .collect();
        let length: usize = lines
            .iter()
            .find_map(|line| line.strip_prefix("content-length: "))
            .map_or(0, |value| value.parse().unwrap());
        let start = end + 4;
        while pending.len() < start + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
        }
        let body = pending[start..start + length].to_vec();
        pending.drain(..start + length);
        Some(Wire { lines, body })
    })
    .await
    .expect("no response in time")
}

/// Whether the server has closed `stream` (end of stream or reset, within `PATIENCE`).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A request head followed by `body`.
fn with_body(head: String, body: &[u8]) -> Vec<u8> {
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// A complete `POST /v1/systemone` with `extra` header lines and `body`.
fn post(extra: &str, body: &[u8]) -> Vec<u8> {
    let extra = format!(
        "content-type: application/json\r\ncontent-length: {}\r\n{extra}",
        body.len()
    );
    with_body(head("POST", "/v1/systemone", &extra), body)
}

/// `bytes` (an HTTP/1.1 request) sent as HTTP/1.0 that keeps its connection, as
/// ApacheBench's `-k` sends it.
fn as_http10_kept(bytes: &[u8]) -> Vec<u8> {
    let line_end = bytes.windows(2).position(|w| w == b"\r\n").unwrap();
    let line = std::str::from_utf8(&bytes[..line_end]).unwrap();
    let line = line
        .strip_suffix(" HTTP/1.1")
        .expect("an HTTP/1.1 request line");
    let mut out = format!("{line} HTTP/1.0\r\nConnection: Keep-Alive").into_bytes();
    out.extend_from_slice(&bytes[line_end..]);
    out
}

/// Sends `bytes` on a new connection and reads the first response.
async fn answer_on_new_connection(app: &TestApp, bytes: &[u8]) -> (TcpStream, Wire) {
    let mut stream = TcpStream::connect(address(app)).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let wire = read_wire(&mut stream, &mut Vec::new()).await.unwrap();
    (stream, wire)
}

fn good_body() -> Vec<u8> {
    serde_json::to_vec(&request()).unwrap()
}

async fn app() -> TestApp {
    TestConfig {
        max_body_bytes: Some(4096),
        ..TestConfig::default()
    }
    .spawn()
    .await
}

fn address(app: &TestApp) -> String {
    app.address.trim_start_matches("http://").to_string()
}

/// A connection that hyper serves: its first request is not plain.
async fn hypers(app: &TestApp) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(address(app)).await.unwrap();
    let mut pending = Vec::new();
    stream
        .write_all(head("GET", "/nope", "").as_bytes())
        .await
        .unwrap();
    let wire = read_wire(&mut stream, &mut pending).await.unwrap();
    assert_eq!(wire.status(), 404);
    (stream, pending)
}

#[tokio::test]
async fn plain_and_hyper_paths_answer_byte_for_byte_alike() {
    let app = app().await;
    let over_cap = vec![b' '; 5000];
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("answered", post("", &good_body())),
        (
            "keep-alive said",
            post("connection: Keep-Alive\r\n", &good_body()),
        ),
        ("x-api-key", {
            let mut bytes = format!(
                "POST /v1/systemone HTTP/1.1\r\nhost: p\r\nx-api-key: {CLIENT_KEY}\r\ncontent-length: {}\r\n\r\n",
                good_body().len()
            )
            .into_bytes();
            bytes.extend_from_slice(&good_body());
            bytes
        }),
        ("not json", post("", b"{\"model\": ")),
        ("empty body", post("", b"")),
        (
            "wrong content type",
            post("content-type: text/csv\r\n", b"a,b"),
        ),
        ("over the cap", post("", &over_cap)),
        ("no key", {
            let body = good_body();
            let mut bytes = format!(
                "POST /v1/systemone HTTP/1.1\r\nhost: p\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            bytes.extend_from_slice(&body);
            bytes
        }),
        (
            "unknown question",
            post(
                "",
                br#"{"model":"m","questions":{"zzz":{"type":"choice","criteria":["A","B"]}}}"#,
            ),
        ),
        ("zstd body", {
            let body = zstd::encode_all(good_body().as_slice(), 3).unwrap();
            post("content-encoding: zstd\r\n", &body)
        }),
        ("zstd bomb", {
            let body = zstd::encode_all(vec![b' '; 1_000_000].as_slice(), 19).unwrap();
            post("content-encoding: zstd\r\n", &body)
        }),
        (
            "unknown encoding",
            post("content-encoding: br\r\n", &good_body()),
        ),
        (
            "not multipart",
            post("content-type: multipart/form-data; boundary=x\r\n", b"--y"),
        ),
        (
            "traced",
            post(
                "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\
                 tracestate: congo=t61rcWkgMzE\r\n",
                &good_body(),
            ),
        ),
        (
            "two traceparents",
            post("traceparent: x\r\ntraceparent: y\r\n", &good_body()),
        ),
        (
            "contract named",
            post("x-release-contract: main\r\n", &good_body()),
        ),
        (
            "contract not the caller's",
            post("x-release-contract: other\r\n", &good_body()),
        ),
        (
            "two authorizations",
            post(
                &format!("authorization: Bearer {CLIENT_KEY}\r\n"),
                &good_body(),
            ),
        ),
        (
            "a different key in X-Api-Key",
            post("x-api-key: another-key\r\n", &good_body()),
        ),
        (
            "the same key in X-Api-Key",
            post(&format!("x-api-key: {CLIENT_KEY}\r\n"), &good_body()),
        ),
        (
            "two contract headers",
            post(
                "x-release-contract: main\r\nx-release-contract: main\r\n",
                &good_body(),
            ),
        ),
        ("two encodings", {
            let body = zstd::encode_all(good_body().as_slice(), 3).unwrap();
            post(
                "content-encoding: zstd\r\ncontent-encoding: identity\r\n",
                &body,
            )
        }),
        ("obs-text and repeated fields", {
            let body = good_body();
            // Latin-1 `é` (obs-text), which both parsers take.
            let mut bytes =
                b"POST /v1/systemone HTTP/1.1\r\nhost: p\r\nx-note: caf\xe9\r\nx-note: two\r\n"
                    .to_vec();
            bytes.extend(
                format!(
                    "authorization: Bearer {CLIENT_KEY}\r\nuser-agent: typesafe-sdk/0.7.5\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            bytes.extend_from_slice(&body);
            bytes
        }),
        (
            "header section over the cap",
            post(
                &format!("x-big: {}\r\n", "a".repeat(33 * 1024)),
                &good_body(),
            ),
        ),
        ("upper-case names", {
            let body = good_body();
            let mut bytes = format!(
                "POST /v1/systemone HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer {CLIENT_KEY}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            bytes.extend_from_slice(&body);
            bytes
        }),
    ];
    // The same requests over HTTP/1.0 that keeps its connection: hyper's `connection`
    // fix-ups and status line, whichever path serves them.
    let http10: Vec<(&str, Vec<u8>)> = [
        ("HTTP/1.0 answered", "answered"),
        ("HTTP/1.0 not json", "not json"),
        ("HTTP/1.0 over the cap", "over the cap"),
        ("HTTP/1.0 no key", "no key"),
        ("HTTP/1.0 zstd body", "zstd body"),
        ("HTTP/1.0 upper-case names", "upper-case names"),
    ]
    .into_iter()
    .map(|(name, of)| {
        let (_, bytes) = cases.iter().find(|(case, _)| *case == of).unwrap();
        (name, as_http10_kept(bytes))
    })
    .collect();
    cases.extend(http10);
    for (name, bytes) in &cases {
        let (mut plain, from_plain) = answer_on_new_connection(&app, bytes).await;
        let mut plain_pending = Vec::new();

        let (mut hyper, mut hyper_pending) = hypers(&app).await;
        hyper.write_all(bytes).await.unwrap();
        let from_hyper = read_wire(&mut hyper, &mut hyper_pending).await.unwrap();

        assert_eq!(from_plain, from_hyper, "{name}");
        // Both keep the connection, or both close it (`connection: close`, alone or with
        // HTTP/1.0's `keep-alive` after it).
        let says_close = from_plain.header("connection").is_some_and(|options| {
            options
                .split(',')
                .any(|option| option.trim().eq_ignore_ascii_case("close"))
        });
        if says_close {
            assert!(
                closed(&mut plain).await,
                "{name}: the plain path kept it open"
            );
            assert!(closed(&mut hyper).await, "{name}: hyper kept it open");
        } else {
            for (stream, pending) in [
                (&mut plain, &mut plain_pending),
                (&mut hyper, &mut hyper_pending),
            ] {
                stream.write_all(&post("", &good_body())).await.unwrap();
                let next = read_wire(stream, pending).await.expect(name);
                assert_eq!(next.status(), 200, "{name}: the next request");
            }
        }
    }
    // Repeated key, contract and encoding headers, and two headers carrying different
    // keys, are refused alike on both paths.
    for name in [
        "two authorizations",
        "a different key in X-Api-Key",
        "two contract headers",
        "two encodings",
    ] {
        let (_, bytes) = cases.iter().find(|(case, _)| *case == name).unwrap();
        let (_, wire) = answer_on_new_connection(&app, bytes).await;
        assert_eq!(wire.status(), 400, "{name}");
        assert_eq!(
            wire.json()["detail"]["error_type"],
            "invalid_request",
            "{name}"
        );
    }
    // The answered case is a release, over HTTP/1.1 and over HTTP/1.0 kept; so is the
    // caller's key sent in both headers.
    let (_, bytes) = cases
        .iter()
        .find(|(case, _)| *case == "the same key in X-Api-Key")
        .unwrap();
    let (_, wire) = answer_on_new_connection(&app, bytes).await;
    assert_eq!(wire.status(), 200);
    let (_, wire) = answer_on_new_connection(&app, &post("", &good_body())).await;
    assert_eq!(wire.status(), 200);
    assert_eq!(wire.json()["answers"]["cause"]["choice"], "B");
    let (_, wire) = answer_on_new_connection(&app, &as_http10_kept(&post("", &good_body()))).await;
    assert_eq!(wire.lines[0], "HTTP/1.0 200 OK");
    assert_eq!(wire.header("connection"), Some("keep-alive"));
    assert_eq!(wire.json()["answers"]["cause"]["choice"], "B");
    app.stop().await;
}

#[tokio::test]
async fn both_paths_agree_on_every_combination_of_version_connection_body_and_key() {
    let app = app().await;
    let versions = ["HTTP/1.1", "HTTP/1.0"];
    let connections: [&[&str]; 8] = [
        &[],
        &["connection: keep-alive"],
        &["Connection: Keep-Alive"],
        &["connection: keep-alive", "connection: KEEP-ALIVE"],
        &["connection: keep-alive, close"],
        &["connection: keep-alive", "connection: close"],
        &["connection: close"],
        &["connection: keep-alive, te"],
    ];
    let over_cap = vec![b' '; 5000];
    let good = good_body();
    let bodies: [&[u8]; 4] = [&good, b"{\"model\": ", b"[]", &over_cap];
    let keys = [
        format!("authorization: Bearer {CLIENT_KEY}"),
        String::new(),
        "authorization: Bearer not-a-key".to_string(),
    ];
    let mut compared = 0;
    for version in versions {
        for connection in connections {
            for body in bodies {
                for key in &keys {
                    let mut head = format!("POST /v1/systemone {version}\r\nhost: proxy\r\n");
                    for line in connection
                        .iter()
                        .copied()
                        .chain(Some(key.as_str()).filter(|k| !k.is_empty()))
                    {
                        head.push_str(line);
                        head.push_str("\r\n");
                    }
                    head.push_str(&format!(
                        "content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    ));
                    let bytes = with_body(head, body);
                    let case = format!("{version} {connection:?} key {key:?} body {}", body.len());

                    let (mut plain, from_plain) = answer_on_new_connection(&app, &bytes).await;
                    let (mut hyper, mut hyper_pending) = hypers(&app).await;
                    hyper.write_all(&bytes).await.unwrap();
                    let from_hyper = read_wire(&mut hyper, &mut hyper_pending).await.unwrap();
                    assert_eq!(from_plain, from_hyper, "{case}");
                    // Whether each kept its connection: a next request is answered on both, or
                    // neither.
                    let mut kept = Vec::new();
                    for (stream, pending) in [
                        (&mut plain, &mut Vec::new()),
                        (&mut hyper, &mut hyper_pending),
                    ] {
                        let _ = stream.write_all(&post("", &good)).await;
                        kept.push(read_wire(stream, pending).await.map(|wire| wire.status()));
                    }
                    assert_eq!(kept[0], kept[1], "{case}: kept alike");
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 2 * 8 * 4 * 3);
    app.stop().await;
}

#[tokio::test]
async fn pipelined_and_split_requests_are_all_answered_in_order() {
    let app = app().await;
    let mut stream = TcpStream::connect(address(&app)).await.unwrap();
    let mut pending = Vec::new();
    // Three requests in one write: two answers and a 422 between them, in order.
    let mut bytes = post("", &good_body());
    bytes.extend(post("", b"[]"));
    bytes.extend(post("", &good_body()));
    stream.write_all(&bytes).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(read_wire(&mut stream, &mut pending).await.unwrap().status());
    }
    assert_eq!(seen, [200, 422, 200]);
    // A head cut in two writes, then a body that comes later: both answered.
    let bytes = post("", &good_body());
    let (first, rest) = bytes.split_at(20);
    stream.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let at = rest.len() - 10;
    stream.write_all(&rest[..at]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.write_all(&rest[at..]).await.unwrap();
    assert_eq!(
        read_wire(&mut stream, &mut pending).await.unwrap().status(),
        200
    );
    // Still served after that (now by hyper): a plain request and another path.
    stream.write_all(&post("", &good_body())).await.unwrap();
    assert_eq!(
        read_wire(&mut stream, &mut pending).await.unwrap().status(),
        200
    );
    stream
        .write_all(head("GET", "/nope", "").as_bytes())
        .await
        .unwrap();
    assert_eq!(
        read_wire(&mut stream, &mut pending).await.unwrap().status(),
        404
    );
    app.stop().await;
}

#[tokio::test]
async fn requests_that_are_not_plain_keep_hypers_framing_and_rules() {
    let app = app().await;
    let body = good_body();
    let sized = |extra: &str| {
        format!(
            "content-type: application/json\r\ncontent-length: {}\r\n{extra}",
            body.len()
        )
    };

    // A chunked body.
    let mut chunked = format!("{:x}\r\n", body.len()).into_bytes();
    chunked.extend(&body);
    chunked.extend(b"\r\n0\r\n\r\n");
    let (_, wire) = answer_on_new_connection(
        &app,
        &with_body(
            head(
                "POST",
                "/v1/systemone",
                "content-type: application/json\r\ntransfer-encoding: chunked\r\n",
            ),
            &chunked,
        ),
    )
    .await;
    assert_eq!(wire.status(), 200);
    assert_eq!(wire.json()["answers"]["cause"]["choice"], "B");

    // `Expect: 100-continue`: hyper's interim answer, then the response.
    let (mut stream, interim) = answer_on_new_connection(
        &app,
        head("POST", "/v1/systemone", &sized("expect: 100-continue\r\n")).as_bytes(),
    )
    .await;
    assert_eq!(interim.status(), 100);
    stream.write_all(&body).await.unwrap();
    assert_eq!(
        read_wire(&mut stream, &mut Vec::new())
            .await
            .unwrap()
            .status(),
        200
    );

    // `Connection: close`: answered, said back, and the connection closed.
    let (mut stream, wire) =
        answer_on_new_connection(&app, &post("connection: close\r\n", &body)).await;
    assert_eq!(wire.status(), 200);
    assert_eq!(wire.header("connection"), Some("close"));
    assert!(closed(&mut stream).await);

    // HTTP/1.0: answered and closed.
    let http10 = format!(
        "POST /v1/systemone HTTP/1.0\r\nauthorization: Bearer {CLIENT_KEY}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let (mut stream, wire) = answer_on_new_connection(&app, &with_body(http10, &body)).await;
    assert!(
        wire.lines[0].starts_with("HTTP/1.0 200"),
        "{:?}",
        wire.lines
    );
    assert!(closed(&mut stream).await);

    // Two differing lengths: hyper's 400, the proxy's JSON error in place of its bare one.
    let lengths = head(
        "POST",
        "/v1/systemone",
        "content-length: 2\r\ncontent-length: 3\r\n",
    );
    let (_, wire) = answer_on_new_connection(&app, &with_body(lengths, b"{}")).await;
    assert_eq!(wire.status(), 400);
    assert!(
        wire.json()["detail"]["error_type"].is_string(),
        "{:?}",
        wire
    );

    // A header name hyper refuses: the same refusal as before.
    let bad_name = head(
        "POST",
        "/v1/systemone",
        "bad header: x\r\ncontent-length: 2\r\n",
    );
    let (_, wire) = answer_on_new_connection(&app, &with_body(bad_name, b"{}")).await;
    assert_eq!(wire.status(), 400);

    // A query string or a trailing slash: the router's answers, as before.
    for path in ["/v1/systemone?x=1", "/v1/systemone/"] {
        let bytes = with_body(head("POST", path, &sized("")), &body);
        let (_, wire) = answer_on_new_connection(&app, &bytes).await;
        let expected = if path.contains('?') { 200 } else { 404 };
        assert_eq!(wire.status(), expected, "{path}");
    }
    app.stop().await;
}

/// A proxy on one event loop with a shutdown grace of `grace_ms`, and its upstream, whose
/// gate is closed: requests wait there until the test releases them.
async fn app_with_a_closed_gate(grace_ms: u64) -> (TestApp, Upstream) {
    let app = TestConfig {
        server: format!("shutdown_grace_ms = {grace_ms}\nworker_threads = 1"),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let upstream = app.upstream.clone();
    upstream.close();
    (app, upstream)
}

#[tokio::test]
async fn a_plain_request_in_flight_at_the_drain_is_answered_with_connection_close() {
    // A long grace: the request waits at the upstream's gate until the test lets it go.
    let (app, upstream) = app_with_a_closed_gate(30_000).await;
    // One request in flight on each path, over HTTP/1.1 and over HTTP/1.0 kept.
    let mut plain = TcpStream::connect(address(&app)).await.unwrap();
    plain.write_all(&post("", &good_body())).await.unwrap();
    upstream.arrived().await;
    let (mut hyper, mut hyper_pending) = hypers(&app).await;
    hyper.write_all(&post("", &good_body())).await.unwrap();
    upstream.arrived().await;
    let http10 = as_http10_kept(&post("", &good_body()));
    let mut plain10 = TcpStream::connect(address(&app)).await.unwrap();
    plain10.write_all(&http10).await.unwrap();
    upstream.arrived().await;
    let (mut hyper10, mut hyper10_pending) = hypers(&app).await;
    hyper10.write_all(&http10).await.unwrap();
    upstream.arrived().await;
    // An idle plain connection: closed by the drain.
    let (mut idle, wire) = answer_on_new_connection(&app, &post("", b"[]")).await;
    assert_eq!(wire.status(), 422);
    let stopping = tokio::spawn(app.stop());
    assert!(
        closed(&mut idle).await,
        "an idle connection outlived the drain"
    );
    for _ in 0..4 {
        upstream.release_one();
    }
    let from_plain = read_wire(&mut plain, &mut Vec::new()).await.unwrap();
    let from_hyper = read_wire(&mut hyper, &mut hyper_pending).await.unwrap();
    assert_eq!(from_plain.status(), 200);
    assert_eq!(from_plain.header("connection"), Some("close"));
    assert_eq!(from_plain, from_hyper);
    // HTTP/1.0: closing is the default, so nothing says it.
    let from_plain10 = read_wire(&mut plain10, &mut Vec::new()).await.unwrap();
    let from_hyper10 = read_wire(&mut hyper10, &mut hyper10_pending).await.unwrap();
    assert_eq!(from_plain10.lines[0], "HTTP/1.0 200 OK");
    assert_eq!(from_plain10.header("connection"), None);
    assert_eq!(from_plain10, from_hyper10);
    for stream in [&mut plain, &mut hyper, &mut plain10, &mut hyper10] {
        assert!(closed(stream).await);
    }
    stopping.await.unwrap();
}

#[tokio::test]
async fn a_plain_request_still_in_flight_when_the_grace_ends_is_dropped() {
    // A short grace, and an upstream that does not answer within it.
    let (app, upstream) = app_with_a_closed_gate(300).await;
    // Two requests served on one connection first: the connection's watches on the
    // stage have already waited through requests and reads when the drain comes.
    let mut plain = TcpStream::connect(address(&app)).await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..2 {
        plain.write_all(&post("", b"[]")).await.unwrap();
        let wire = read_wire(&mut plain, &mut pending).await.unwrap();
        assert_eq!(wire.status(), 422);
    }
    plain.write_all(&post("", &good_body())).await.unwrap();
    upstream.arrived().await;
    app.stop().await;
    // Dropped at the end of the grace: closed, with no response.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, plain.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the connection outlived the grace: {read:?}"
    );
    assert!(rest.is_empty(), "a response after the grace: {rest:?}");
    upstream.release_one();
}
