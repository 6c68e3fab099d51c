//! Wire conformance with the official clients: request id headers on every
//! response, JSON bodies for every proxy status, retry hints, and contract
//! selection by path prefix.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::TestConfig;
use crate::helpers::{CLIENT_KEY, Headers, MULTI_KEY, native_answer, request, spawn};

/// The proxy's request id of a response: both headers present and equal.
fn request_id(response: &reqwest::Response) -> String {
    let headers = response.headers();
    let ours = headers
        .get("x-request-id")
        .unwrap_or_else(|| panic!("no x-request-id on {}", response.status()))
        .to_str()
        .unwrap()
        .to_string();
    let sdk = headers
        .get("x-typesafe-request-id")
        .unwrap_or_else(|| panic!("no x-typesafe-request-id on {}", response.status()))
        .to_str()
        .unwrap();
    assert_eq!(ours, sdk, "both request id headers carry the same id");
    assert!(ours.starts_with("rg-"), "{ours}");
    ours
}

#[tokio::test]
async fn every_response_carries_the_proxys_own_request_id() {
    let app = spawn("choice", "").await;
    app.upstream.script(
        200,
        serde_json::to_vec(&native_answer()).unwrap(),
        &[
            ("x-typesafe-request-id", "UPSTREAM-ID"),
            ("x-request-id", "UPSTREAM-ID"),
        ],
        Duration::ZERO,
    );
    let bearer = format!("Bearer {CLIENT_KEY}");
    let good = serde_json::to_vec(&request()).unwrap();
    let mut uncovered = request();
    uncovered["questions"]["nope"] = json!({"type": "noul"});
    let uncovered = serde_json::to_vec(&uncovered).unwrap();
    let huge_header = "h".repeat(40 * 1024);
    let system_one = format!("{}/v1/systemone", app.address);
    let models = format!("{}/v1/models", app.address);
    let under =
        |contract: &str, route: &str| format!("{}/contracts/{contract}/v1/{route}", app.address);
    #[rustfmt::skip]
    let cases: Vec<(Method, String, Headers, Vec<u8>, u16)> = vec![
        (Method::POST, system_one.clone(), vec![("authorization", &bearer)], good.clone(), 200),
        (Method::GET, models.clone(), vec![("authorization", &bearer)], vec![], 200),
        (Method::POST, under("main", "systemone"), vec![("authorization", &bearer)], good.clone(), 200),
        (Method::GET, under("main", "models"), vec![("authorization", &bearer)], vec![], 200),
        (Method::POST, system_one.clone(), vec![], good.clone(), 403),
        (Method::GET, models.clone(), vec![("authorization", "Bearer wrong")], vec![], 401),
        (Method::POST, under("other", "systemone"), vec![("authorization", &bearer)], good.clone(), 403),
        (Method::POST, system_one.clone(), vec![("authorization", &bearer)], uncovered, 403),
        (Method::POST, system_one.clone(), vec![("authorization", &bearer)], b"{".to_vec(), 422),
        (Method::POST, system_one.clone(), vec![("authorization", &bearer)], vec![b' '; 70_000], 413),
        (Method::POST, system_one.clone(), vec![("authorization", &bearer), ("content-encoding", "br")], good.clone(), 415),
        (Method::GET, format!("{}/v2/anything", app.address), vec![], vec![], 404),
        (Method::GET, format!("{}/contracts/main/v1/other", app.address), vec![], vec![], 404),
        (Method::GET, system_one.clone(), vec![("authorization", &bearer)], vec![], 405),
        (Method::DELETE, models.clone(), vec![], vec![], 405),
        (Method::POST, system_one.clone(), vec![("authorization", &bearer), ("x-filler", &huge_header)], good.clone(), 431),
    ];
    let mut ids = BTreeSet::new();
    for (method, url, headers, body, status) in cases {
        let mut builder = app
            .client
            .request(method.clone(), &url)
            .header("x-request-id", "CLIENT-CHOSEN-ID")
            .body(body);
        for (name, value) in &headers {
            builder = builder.header(*name, *value);
        }
        let response = builder.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {url}");
        let id = request_id(&response);
        assert!(ids.insert(id.clone()), "request ids are unique: {id}");
        let text = response.text().await.unwrap();
        assert!(!text.contains("UPSTREAM-ID"), "{text}");
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {url}: not JSON: {text:?}"));
        match status {
            200 => {}
            422 => assert!(body["detail"][0]["loc"].is_array(), "{text}"),
            _ => {
                let detail = &body["detail"];
                assert!(
                    detail["error_type"].as_str().is_some_and(|t| !t.is_empty())
                        && detail["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{method} {url}: {text}"
                );
            }
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn proxy_statuses_have_documented_error_types() {
    let app = spawn("choice", "").await;
    let bearer = format!("Bearer {CLIENT_KEY}");
    let response = app
        .client
        .get(format!("{}/v1/systemone", app.address))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["detail"]["error_type"], "method_not_allowed");

    let response = app
        .client
        .post(format!("{}/v1/systemone", app.address))
        .header("authorization", &bearer)
        .header("x-filler", "h".repeat(40 * 1024))
        .body(serde_json::to_vec(&request()).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 431);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["detail"]["error_type"],
        "request_header_fields_too_large"
    );
    // Just under the limit is served.
    let response = app
        .client
        .post(format!("{}/v1/systemone", app.address))
        .header("authorization", &bearer)
        .header("x-filler", "h".repeat(30 * 1024))
        .body(serde_json::to_vec(&request()).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = app
        .client
        .get(format!("{}/contracts/%FF/v1/models", app.address))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    request_id(&response);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["detail"]["error_type"], "not_found");
    assert!(app.upstream.seen.lock().unwrap().len() == 1);
    app.stop().await;
}

#[tokio::test]
async fn a_shed_request_says_when_to_retry() {
    let app = TestConfig {
        view: "choice".into(),
        provider_extra: "timeout_ms = 10000\nmax_concurrency = 1\nqueue_timeout_ms = 100".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    app.upstream.script(
        200,
        serde_json::to_vec(&native_answer()).unwrap(),
        &[],
        Duration::from_millis(1500),
    );
    let body = request();
    // The first request holds the only slot while the upstream sleeps on it.
    let first = {
        let client = app.client.clone();
        let url = format!("{}/v1/systemone", app.address);
        let body = serde_json::to_vec(&body).unwrap();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(CLIENT_KEY)
                .body(body)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    for _ in 0..500 {
        if !app.upstream.seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(app.upstream.seen.lock().unwrap().len(), 1);
    let second = app.post(&body).await;
    assert_eq!(second.status(), 503);
    assert_eq!(second.headers()["retry-after"], "1");
    request_id(&second);
    let detail: Value = second.json().await.unwrap();
    assert_eq!(detail["detail"]["error_type"], "upstream_saturated");
    assert_eq!(first.await.unwrap().unwrap(), 200);
    app.stop().await;
}

#[tokio::test]
async fn the_path_prefix_selects_a_contract_like_the_header() {
    let app = spawn("full_native", "").await;
    let body = serde_json::to_vec(&request()).unwrap();
    let post = |path: String, key: &'static str, header: Option<&'static str>| {
        let mut builder = app
            .client
            .post(format!("{}{path}", app.address))
            .bearer_auth(key)
            .body(body.clone());
        if let Some(contract) = header {
            builder = builder.header("x-release-contract", contract);
        }
        builder.send()
    };
    // A key bound to several contracts picks one by path alone.
    let response = post("/contracts/other/v1/systemone".into(), MULTI_KEY, None)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let released: Value = response.json().await.unwrap();
    assert_eq!(
        released["usage"],
        json!({"input_tokens": 0, "output_tokens": 0}),
        "contract `other` drops usage"
    );
    assert_eq!(
        released["answers"]["cause"],
        json!({"type": "choice", "choice": "B",
               "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0}),
        "contract `other` releases the choice view (complete shape: one-hot fill)"
    );
    let response = post(
        "/contracts/main/v1/systemone".into(),
        MULTI_KEY,
        Some("main"),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let released: Value = response.json().await.unwrap();
    assert_eq!(released["answers"]["cause"]["confidence"], json!(0.61));
    let cases: [(&str, &str, Option<&str>, u16, &str); 4] = [
        ("other", CLIENT_KEY, None, 403, "permission_denied"),
        (
            "no-such-contract",
            MULTI_KEY,
            None,
            403,
            "permission_denied",
        ),
        ("other", MULTI_KEY, Some("main"), 400, "contract_conflict"),
        (
            "other",
            "wrong-key",
            Some("main"),
            401,
            "authentication_error",
        ),
    ];
    for (contract, key, header, status, error_type) in cases {
        let response = post(format!("/contracts/{contract}/v1/systemone"), key, header)
            .await
            .unwrap();
        let (got_status, got_type, _) = crate::helpers::error_of(response).await;
        assert_eq!(
            (got_status, got_type.as_str()),
            (status, error_type),
            "{contract}"
        );
    }
    let models = app
        .client
        .get(format!("{}/contracts/other/v1/models", app.address))
        .bearer_auth(MULTI_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("releasegate_requests_total{contract=\"other\",status_class=\"2xx\"} 2"),
        "{metrics}"
    );
    assert!(!metrics.contains("no-such-contract"), "{metrics}");
    app.stop().await;
}

/// Sends `head` on a fresh connection (whatever the proxy still reads of it) and returns
/// the response: status, headers (lower-case names) and body.
async fn raw_exchange(address: &str, head: Vec<u8>) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = address.trim_start_matches("http://");
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        // The proxy stops reading a refused head: a failed write is expected.
        let _ = writer.write_all(&head).await;
        writer
    });
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut response))
        .await
        .expect("the proxy answered and closed")
        .unwrap();
    drop(writing.await);
    let end = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8(response[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    (status, headers, response[end + 4..].to_vec())
}

/// Every head the proxy refuses gets its JSON error and request ids, whether the
/// middleware refuses it (beyond 32 KiB of fields) or hyper does before any routing
/// (beyond its 64 KiB read buffer or 100 fields, or not HTTP at all).
#[tokio::test]
async fn every_refused_head_gets_json_and_request_ids() {
    let app = spawn("choice", "").await;
    let post = |fields: &str| {
        format!(
            "POST /v1/systemone HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {CLIENT_KEY}\r\n{fields}content-length: 2\r\n\r\n{{}}"
        )
        .into_bytes()
    };
    let many: String = (0..150).map(|n| format!("x-field-{n}: v\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "40 KiB field",
            post(&format!("x-filler: {}\r\n", "h".repeat(40 * 1024))),
            431,
            "request_header_fields_too_large",
        ),
        (
            "300 KiB field",
            post(&format!("x-filler: {}\r\n", "h".repeat(300 * 1024))),
            431,
            "request_header_fields_too_large",
        ),
        (
            "2 MiB field",
            post(&format!("x-filler: {}\r\n", "h".repeat(2 << 20))),
            431,
            "request_header_fields_too_large",
        ),
        (
            "150 fields",
            post(&many),
            431,
            "request_header_fields_too_large",
        ),
        (
            "not HTTP",
            b"GARBAGE GARBAGE\r\n\r\n".to_vec(),
            400,
            "invalid_request_head",
        ),
    ];
    let mut ids = BTreeSet::new();
    for (name, head, status, error_type) in cases {
        let (got, headers, body) = raw_exchange(&app.address, head).await;
        assert_eq!(got, status, "{name}");
        let header = |wanted: &str| {
            headers
                .iter()
                .find(|(name, _)| name == wanted)
                .map(|(_, value)| value.clone())
        };
        let id = header("x-request-id").unwrap_or_else(|| panic!("{name}: no request id"));
        assert_eq!(
            header("x-typesafe-request-id").as_deref(),
            Some(id.as_str())
        );
        assert!(id.starts_with("rg-"), "{id}");
        assert!(ids.insert(id), "{name}: request ids are unique");
        assert_eq!(header("content-type").as_deref(), Some("application/json"));
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{name}: not JSON: {:?}", String::from_utf8_lossy(&body)));
        assert_eq!(body["detail"]["error_type"], error_type, "{name}");
        assert!(
            body["detail"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // The connection limits did not stop the proxy serving.
    let response = app.post(&request()).await;
    assert_eq!(response.status(), 200);
    app.stop().await;
}
