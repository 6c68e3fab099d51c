//! The adoption loop on a domain of its own, through the binary only: a team's own decision
//! model (a fake provider on loopback: loan-review triage, five classes of its own), `collect`
//! from a requests file, `build-codebook` from the collected worlds, `serve` with that codebook
//! while the contract captures live traffic, `build-codebook` from the captured worlds, and
//! `serve` with that one.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::binary::{BIN, Served, client, serve_command};
use super::helpers::{Provider, TestConfig, contract, question, recipient, scratch};

const KEY_ENV: &str = "LOAN_MODEL_KEY";
const KEY: &str = "loan-model-secret";
const RECIPIENT_KEY: &str = "branch-office-key";

/// The contract's classes, in its order.
const CLASSES: [&str; 5] = [
    "APPROVE",
    "VERIFY_INCOME",
    "VERIFY_IDENTITY",
    "COLLATERAL_REVIEW",
    "DECLINE",
];
/// Two protected fine causes behind each coarse class.
const CAUSES: [[&str; 2]; 5] = [
    ["clean_file", "long_tenure"],
    ["employer_gap", "income_gap"],
    ["address_mismatch", "document_expired"],
    ["appraisal_gap", "lien_found"],
    ["debt_ratio", "fraud_flag"],
];
const INSTRUCTIONS: &str = "Route the loan application to the next step of its review.";

/// The team's own model: a softmax over the request's five signals, answered in the order of
/// the labels it was asked; only with the key it was given.
async fn model(
    State(seen): State<Arc<Mutex<Vec<Value>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {KEY}"))
    {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not json").into_response();
    };
    seen.lock().unwrap().push(request.clone());
    let labels: Vec<String> = request["questions"]["route"]["criteria"]
        .as_object()
        .map(|criteria| criteria.keys().cloned().collect())
        .unwrap_or_default();
    let signals: Vec<f64> = request["state"]["signals"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if labels.len() != CLASSES.len() || signals.len() != CLASSES.len() {
        return (StatusCode::BAD_REQUEST, "unexpected question").into_response();
    }
    let top = signals.iter().copied().fold(f64::MIN, f64::max);
    let weights: Vec<f64> = signals.iter().map(|s| (s - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    // Four decimals, the remainder on the largest: a sum of exactly 1.
    let mut p: Vec<f64> = weights
        .iter()
        .map(|w| (w / total * 1e4).round() / 1e4)
        .collect();
    let best = (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap();
    let rest: f64 = p
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != best)
        .map(|(_, v)| v)
        .sum();
    p[best] = ((1.0 - rest) * 1e4).round() / 1e4;
    let k = p.len() as f64;
    let confidence = ((p[best] - 1.0 / k) / (1.0 - 1.0 / k)).clamp(0.0, 1.0);
    let probabilities: serde_json::Map<String, Value> = labels
        .iter()
        .cloned()
        .zip(p.iter().map(|v| json!(v)))
        .collect();
    axum::Json(json!({
        "model": "loan-triage-7",
        "answers": {"route": {"type": "choice", "choice": labels[best], "probabilities": probabilities,
                               "confidence": (confidence * 1e4).round() / 1e4}},
        "usage": {"input_tokens": 180, "output_tokens": 1}
    }))
    .into_response()
}

/// The team's cases: `pairs` counterfactual pairs (same coarse class and public context, the
/// private evidence edited between the two causes), as a requests file with labels.
fn requests(pairs: usize) -> String {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let descriptions: String = CLASSES
        .iter()
        .map(|c| format!("\"{c}\": \"{}\"", c.to_lowercase().replace('_', " ")))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = String::new();
    for pair in 0..pairs {
        let class = pair % CLASSES.len();
        let split = match pair % 5 {
            0..=2 => "train",
            3 => "validation",
            _ => "test",
        };
        let public: Vec<f64> = (0..CLASSES.len()).map(|_| next() * 1.5).collect();
        for (w, cause) in CAUSES[class].iter().enumerate() {
            let mut signals = public.clone();
            signals[class] += 2.5;
            // The private evidence: each cause leans towards a different neighbour.
            signals[(class + 1 + w) % CLASSES.len()] += 0.8 + next() * 0.4;
            let request = json!({
                "model": "loan-triage-latest",
                "state": {"region": if pair % 2 == 0 { "north" } else { "south" }, "signals": signals},
                "questions": {"route": {"type": "choice", "instructions": INSTRUCTIONS,
                    "criteria": serde_json::from_str::<Value>(&format!("{{{descriptions}}}")).unwrap()}}
            });
            let mut hypotheses = CAUSES[class].to_vec();
            hypotheses.sort();
            out.push_str(&format!(
                "{}\n",
                json!({"id": format!("case-{pair:03}-{w}"), "request": request, "pair_id": format!("case-{pair:03}"),
                       "split": split, "domain": "loans", "coarse": CLASSES[class], "secret": cause,
                       "hypotheses": hypotheses})
            ));
        }
    }
    out
}

fn config(base_url: &str, codebook: &str, capture: bool) -> String {
    let descriptions: String = CLASSES
        .iter()
        .map(|c| format!("{c} = \"{}\"", c.to_lowercase().replace('_', " ")))
        .collect::<Vec<_>>()
        .join(", ");
    // Action by true class: approving a file that needed a check is dear, declining a good
    // one dearer; the last row is a manual review.
    let matrix = "[[0, 6, 8, 9, 14], [3, 0, 4, 5, 9], [3, 4, 0, 5, 9], [4, 5, 5, 0, 7], [12, 9, 9, 6, 0], [1.5, 1.5, 1.5, 1.5, 1.5]]";
    let mut triage = String::from("model = \"loan-triage-7\"\n");
    if capture {
        // Small files: the capture rotates, as a long-running one does.
        triage.push_str(
            "capture = { path = \"captured.jsonl\", sample_rate = 1, max_bytes = 16384, max_files = 50 }\n",
        );
    }
    triage
        .push_str("policy = { keep = [\"choice\"], hide = [\"secret\"], max_recovery_gain = 0.1 }");
    let route = format!(
        "instructions = \"{INSTRUCTIONS}\"\ndescriptions = {{ {descriptions} }}\n\
         mechanism = {{ kind = \"wcpq\", codebook = \"{codebook}\", fallback = \"choice_only\" }}\n\
         [contracts.triage.questions.route.workflows]\n\
         families = [\"selective\", \"clarification\", \"asymmetric\"]\n\
         profiles = [\"authored\", \"review_half\", \"review_double\", \"check_quarter\", \"error_double\", \"asymmetric_class0_double\"]\n\
         costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = {matrix} }}\n\
         posterior = \"native\""
    );
    TestConfig {
        server: "shutdown_grace_ms = 1000\nworker_threads = 1".into(),
        provider: Provider::Url(base_url.into()),
        provider_extra: format!("api_key_env = \"{KEY_ENV}\"\ntimeout_ms = 5000"),
        recipients: vec![recipient("branch", RECIPIENT_KEY, &["triage"])],
        contracts: vec![contract(
            "triage",
            &triage,
            vec![question("route", &CLASSES, "full_probabilities", &route)],
        )],
        ..TestConfig::bare()
    }
    .toml("")
}

/// Runs the binary off the async workers (the fake provider runs on them).
async fn run(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.current_dir(dir).args(args).env(KEY_ENV, KEY);
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// `build-codebook` of the loop's question from `worlds` (in order) into `out`.
fn build_codebook<'a>(worlds: &[&'a str], out: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "build-codebook",
        "--config",
        "loans.toml",
        "--contract",
        "triage",
        "--question",
        "route",
        "--out",
        out,
        "--denominator",
        "10",
    ];
    for file in worlds {
        args.extend(["--worlds", file]);
    }
    args
}

fn succeeded(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// `releasegate serve` on the loop's configuration, with the provider key set.
fn serve(dir: &Path) -> Served {
    let mut command = serve_command(Path::new("loans.toml"));
    command.current_dir(dir).env(KEY_ENV, KEY);
    Served::start(command)
}

/// Asks the proxy every request of `lines` as the branch office; returns the released answers.
async fn ask(serving: &Served, lines: &[Value]) -> Vec<Value> {
    let client = client();
    let mut answers = Vec::new();
    for line in lines {
        let response = client
            .post(format!("http://{}/v1/systemone", serving.public))
            .bearer_auth(RECIPIENT_KEY)
            .json(&line["request"])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response
                .headers()
                .keys()
                .all(|name| !name.as_str().contains("capture")),
            "{:?}",
            response.headers()
        );
        answers.push(response.json::<Value>().await.unwrap());
    }
    answers
}

/// WCPQ answers (covered or fallback) the proxy released, from its metrics.
async fn wcpq_answers(serving: &Served) -> u64 {
    let metrics = serving.metrics().await;
    metrics
        .lines()
        .filter(|l| l.starts_with("releasegate_wcpq_answers_total{contract=\"triage\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn worlds(path: &Path) -> Vec<releasegate_sim::worlds::World> {
    releasegate_sim::worlds::read_all(std::fs::read(path).unwrap().as_slice()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_goes_from_its_own_provider_to_a_served_codebook() {
    let dir = scratch("own-provider");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let app = Router::new()
        .route("/v1/systemone", post(model))
        .with_state(seen.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let pairs = 40;
    std::fs::write(dir.join("requests.jsonl"), requests(pairs)).unwrap();
    std::fs::write(
        dir.join("loans.toml"),
        config(&base_url, "codebook.json", true),
    )
    .unwrap();

    // 1. Collect the team's cases from its own model.
    let collected = succeeded(
        &run(
            &dir,
            &[
                "collect",
                "--config",
                "loans.toml",
                "--contract",
                "triage",
                "--requests",
                "requests.jsonl",
                "--out",
                "collected.jsonl",
                "--concurrency",
                "4",
            ],
        )
        .await,
    );
    assert_eq!(collected["collected"], 2 * pairs);
    let collected = worlds(&dir.join("collected.jsonl"));
    assert_eq!(collected.len(), 2 * pairs);
    assert!(
        collected
            .iter()
            .all(|w| w.labels.is_some() && w.domain == "loans")
    );
    // The model was asked the contract's question, with its pinned text.
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|r| r["questions"]["route"]["instructions"] == INSTRUCTIONS)
    );

    // 2. Build the codebook from the collected train split.
    let built = succeeded(&run(&dir, &build_codebook(&["collected.jsonl"], "codebook.json")).await);
    let train = collected
        .iter()
        .filter(|w| w.split == releasegate_sim::worlds::Split::Train)
        .count();
    assert_eq!(built["training_answers"], train);

    // 3. check-config names the capture, then serve: the branch office's traffic is captured.
    let check = run(&dir, &["check-config", "--config", "loans.toml"]).await;
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        summary.contains("capture triage:")
            && summary.contains("warning: contracts.triage.capture"),
        "{summary}"
    );
    let traffic: Vec<Value> = requests(pairs)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .step_by(3)
        .collect();
    let serving = serve(&dir);
    let answers = ask(&serving, &traffic).await;
    for (answer, line) in answers.iter().zip(&traffic) {
        let route = &answer["answers"]["route"];
        assert!(
            CLASSES.contains(&route["choice"].as_str().unwrap()),
            "{answer}"
        );
        let released: f64 = route["probabilities"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(Value::as_f64)
            .sum();
        assert!((released - 1.0).abs() < 1e-6, "{answer}");
        assert!(
            answer.get("usage").is_some() && answer["model"] == "loan-triage-7",
            "{answer}"
        );
        assert!(line["request"]["state"].is_object());
    }
    assert_eq!(wcpq_answers(&serving).await, traffic.len() as u64);
    serving.stop().await;
    // The capture and its rotations, oldest first (`PATH.N` .. `PATH.1`, then `PATH`).
    let mut files: Vec<String> = (1..)
        .map(|n| format!("captured.jsonl.{n}"))
        .take_while(|name| dir.join(name).exists())
        .collect();
    assert!(!files.is_empty(), "the capture rotated");
    files.reverse();
    files.push("captured.jsonl".into());
    let captured: Vec<_> = files.iter().flat_map(|f| worlds(&dir.join(f))).collect();
    assert_eq!(captured.len(), traffic.len());
    assert!(
        captured
            .iter()
            .all(|w| w.labels.is_none() && w.split == releasegate_sim::worlds::Split::Train)
    );

    // 4. Build a codebook from the captured traffic alone (no labels needed), serve with it.
    // Every rotation, oldest first, read as one capture.
    let rotations: Vec<&str> = files.iter().map(String::as_str).collect();
    let rebuilt = succeeded(&run(&dir, &build_codebook(&rotations, "codebook-live.json")).await);
    assert_eq!(rebuilt["training_answers"], traffic.len());
    // Given one file of them, it reads only that file's answers.
    let newest = succeeded(
        &run(
            &dir,
            &build_codebook(&["captured.jsonl"], "codebook-newest.json"),
        )
        .await,
    );
    assert!(newest["training_answers"].as_u64().unwrap() < traffic.len() as u64);
    assert_eq!(rebuilt["workflows_sha256"], built["workflows_sha256"]);
    std::fs::write(
        dir.join("loans.toml"),
        config(&base_url, "codebook-live.json", false),
    )
    .unwrap();
    let serving = serve(&dir);
    let again = ask(&serving, &traffic[..5]).await;
    assert_eq!(again.len(), 5);
    assert_eq!(wcpq_answers(&serving).await, 5);
    serving.stop().await;
    // Serving without a capture wrote none.
    assert!(!dir.join(format!("captured.jsonl.{}", files.len())).exists());

    // 5. Audit with checked pairs and the gate over `collected.jsonl` (its labels and pairs).
    let root = dir.to_path_buf();
    let audit = |worlds: &'static str| {
        let dir = root.clone();
        async move {
            run(
                &dir,
                &[
                    "audit",
                    "--config",
                    "loans.toml",
                    "--contract",
                    "triage",
                    "--views",
                    "no_output,choice,full_native",
                    "--bootstrap",
                    "200",
                    "--gate",
                    "--worlds",
                    worlds,
                ],
            )
            .await
        }
    };
    let gated = audit("collected.jsonl").await;
    let stdout = String::from_utf8_lossy(&gated.stdout);
    let stderr = String::from_utf8_lossy(&gated.stderr);
    // The team's pairs pass the checks; 8 test pairs cannot resolve a 10-point budget, so the
    // gate says inconclusive and how many pairs would.
    assert!(!stderr.contains("input check"), "{stderr}");
    assert!(
        stdout.contains("sample size wcpq (contract): gain interval"),
        "{stdout}"
    );
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("gate triage: "))
        .unwrap_or_else(|| panic!("no gate line: {stdout}"));
    match gated.status.code() {
        Some(4) => assert!(
            verdict.contains("INCONCLUSIVE") && verdict.contains("would resolve it"),
            "{verdict}"
        ),
        Some(0) => assert!(verdict.contains("pass"), "{verdict}"),
        other => panic!("gate exit {other:?}: {verdict}\n{stderr}"),
    }
    // A file whose pairs are broken (one world dropped) is refused before any figure.
    let text = std::fs::read_to_string(dir.join("collected.jsonl")).unwrap();
    let test_world = text
        .lines()
        .position(|l| l.contains("\"split\":\"test\""))
        .unwrap();
    let kept: String = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != test_world)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("broken.jsonl"), kept).unwrap();
    let refused = audit("broken.jsonl").await;
    assert_eq!(refused.status.code(), Some(65), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("domain loans: 1 of 40 pair ids that do not group exactly two worlds"),
        "{refused:?}"
    );
}
