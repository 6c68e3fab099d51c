//! A provider that sends responses nobody asked for: what it sends on a connection reaches
//! no other recipient (each recipient has its own upstream connections), and a spare that
//! is already waiting when the next request comes reaches nobody (the connection is
//! dropped, not reused).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

use crate::helpers::{
    CLIENT_KEY, MULTI_KEY, Provider, TestApp, TestConfig, contract, question, recipient,
};

/// The classes each recipient picks from: disjoint, so that an answer that went to the
/// other recipient shows in its choice.
const PICKS: [[&str; 2]; 2] = [["A", "B"], ["C", "D"]];
const KEYS: [&str; 2] = [CLIENT_KEY, MULTI_KEY];

/// A provider answering each request with the class its `state` picks (`pick X`), then,
/// `spare_after` later, the same response again on the same connection, unasked. Counts
/// the connections it accepted.
async fn spare_provider(spare_after: Duration) -> (String, Arc<AtomicUsize>) {
    provider(spare_after, false).await
}

/// [`spare_provider`], whose answers also answer a question nobody asked when `unasked`.
async fn provider(spare_after: Duration, unasked: bool) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, spare_after, unasked));
        }
    });
    (format!("http://{address}"), accepted)
}

/// One connection: read a request, answer it, send the spare later; until the peer closes.
async fn serve(stream: tokio::net::TcpStream, spare_after: Duration, unasked: bool) {
    let (mut reader, writer) = stream.into_split();
    let writer = Arc::new(Mutex::new(writer));
    let mut buffer = Vec::new();
    loop {
        let Some(body) = read_request(&mut reader, &mut buffer).await else {
            return;
        };
        let response = answer(&body, unasked);
        if writer.lock().await.write_all(&response).await.is_err() {
            return;
        }
        let writer = writer.clone();
        tokio::spawn(async move {
            tokio::time::sleep(spare_after).await;
            let _ = writer.lock().await.write_all(&response).await;
        });
    }
}

/// Reads one request (head and `content-length` body); `None` at the end of the stream.
async fn read_request(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    buffer: &mut Vec<u8>,
) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            if buffer.len() >= end + 4 + length {
                let body = buffer[end + 4..end + 4 + length].to_vec();
                buffer.drain(..end + 4 + length);
                return Some(body);
            }
        }
        let mut chunk = [0u8; 8192];
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The response to a request body: each asked question answered with the picked class
/// (and `extra`, a question not asked, when `unasked`).
fn answer(body: &[u8], unasked: bool) -> Vec<u8> {
    let request: Value = serde_json::from_slice(body).unwrap();
    let pick = request["state"]
        .as_str()
        .and_then(|state| state.strip_prefix("pick "))
        .unwrap()
        .to_string();
    let mut ids: Vec<String> = request["questions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    if unasked {
        ids.push("extra".into());
    }
    let answers: serde_json::Map<String, Value> = ids
        .iter()
        .map(|id| {
            let probabilities: serde_json::Map<String, Value> = ["A", "B", "C", "D"]
                .iter()
                .map(|class| {
                    let p = if *class == pick { 0.97 } else { 0.01 };
                    (class.to_string(), json!(p))
                })
                .collect();
            let answer = json!({"type": "choice", "choice": pick,
                "probabilities": probabilities, "confidence": 0.97});
            (id.clone(), answer)
        })
        .collect();
    let body = json!({"model": "jev-1", "answers": answers,
        "usage": {"input_tokens": 10, "output_tokens": 1}})
    .to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Two recipients (`one` on contract `a`, `two` on `b`), each contract asking `q` over the
/// same four classes, on one event loop (so that, were connections shared, both
/// recipients' requests would take turns on the same ones).
async fn two_recipients(base_url: String) -> TestApp {
    let q = || vec![question("q", &["A", "B", "C", "D"], "full_native", "")];
    TestConfig {
        server: "worker_threads = 1".into(),
        provider: Provider::Url(base_url),
        provider_extra: "timeout_ms = 5000".into(),
        recipients: vec![
            recipient("one", CLIENT_KEY, &["a"]),
            recipient("two", MULTI_KEY, &["b"]),
        ],
        contracts: vec![contract("a", "", q()), contract("b", "", q())],
        ..TestConfig::bare()
    }
    .spawn()
    .await
}

/// Asks as recipient `who` for class `pick`: the status and the released choice.
async fn ask(app: &TestApp, who: usize, pick: &str) -> (u16, Option<String>) {
    let request = json!({"model": "jev-1", "state": format!("pick {pick}"),
        "questions": {"q": {"type": "choice",
            "criteria": {"A": null, "B": null, "C": null, "D": null}}}});
    let response = app
        .client
        .post(format!("{}/v1/systemone", app.address))
        .bearer_auth(KEYS[who])
        .json(&request)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let choice = body["answers"]["q"]["choice"].as_str().map(str::to_string);
    (status, choice)
}

#[tokio::test]
async fn a_spare_response_waiting_on_an_idle_connection_reaches_nobody() {
    let (base_url, accepted) = spare_provider(Duration::from_millis(20)).await;
    let app = two_recipients(base_url).await;
    let mut wrong = Vec::new();
    for round in 0..50 {
        let who = round % 2;
        let pick = PICKS[who][(round / 2) % 2];
        let (status, choice) = ask(&app, who, pick).await;
        if status != 200 || choice.as_deref() != Some(pick) {
            wrong.push((round, status, choice));
        }
        // The spare arrives (20 ms after the answer) before the next request.
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    assert!(
        wrong.is_empty(),
        "answers that were not the request's: {wrong:?}"
    );
    // Each spare made its connection unusable: none was reused.
    assert_eq!(accepted.load(Ordering::SeqCst), 50);
    app.stop().await;
}

#[tokio::test]
async fn back_to_back_spares_never_reach_the_other_recipient() {
    // Spares right behind each answer, while both recipients send back to back.
    let (base_url, _) = spare_provider(Duration::ZERO).await;
    let app = Arc::new(two_recipients(base_url).await);
    let mut tasks = Vec::new();
    for who in [0, 1] {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for round in 0..20 {
                let pick = PICKS[who][round % 2];
                let (status, choice) = ask(&app, who, pick).await;
                seen.push((status, pick, choice));
            }
            seen
        }));
    }
    for (who, task) in tasks.into_iter().enumerate() {
        let seen = task.await.unwrap();
        for (status, pick, choice) in seen {
            // A spare read as the next answer can only be this recipient's own earlier
            // answer (no HTTP/1.1 client can tell it apart); never the other's.
            assert!(
                matches!(status, 200 | 502),
                "recipient {who}, pick {pick}: status {status}"
            );
            if let Some(choice) = choice {
                assert!(
                    PICKS[who].contains(&choice.as_str()),
                    "recipient {who} asked {pick} and got {choice}, the other recipient's"
                );
            }
        }
    }
    Arc::try_unwrap(app).ok().unwrap().stop().await;
}

#[tokio::test]
async fn an_answer_to_a_question_not_asked_is_not_this_requests() {
    let (base_url, _) = provider(Duration::from_secs(60), true).await;
    let app = two_recipients(base_url).await;
    let (status, choice) = ask(&app, 0, "A").await;
    assert_eq!((status, choice), (502, None));
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "releasegate_rejected_upstream_answers_total{contract=\"a\",reason=\"unasked_answer\"} 1\n"
        ),
        "{metrics}"
    );
    app.stop().await;
}
