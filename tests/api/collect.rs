//! `releasegate collect` through the binary against a real local upstream, and the live
//! capture of a running proxy.

use std::process::{Command, Output};

use serde_json::{Value, json};

use super::helpers::{
    PROVIDER_KEY, PROVIDER_KEY_ENV, Provider, TestConfig, contract, native_answer, question,
    request, scratch, spawn_upstream,
};

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// A collect configuration: contract `main` (the helpers' three pinned questions) on the
/// local upstream.
fn config(base_url: &str) -> String {
    TestConfig {
        provider: Provider::Url(base_url.into()),
        provider_key: true,
        provider_extra: "timeout_ms = 2000".into(),
        main: true,
        ..TestConfig::bare()
    }
    .toml("")
}

/// Runs `releasegate collect` (off the async workers: the upstream runs on them).
async fn collect(dir: &std::path::Path, extra: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["collect", "--config"])
        .arg(dir.join("c.toml"))
        .args(["--contract", "main", "--requests"])
        .arg(dir.join("requests.jsonl"))
        .arg("--out")
        .arg(dir.join("worlds.jsonl"))
        .args(extra)
        .env(PROVIDER_KEY_ENV, PROVIDER_KEY);
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn line(id: &str, request: &Value, extra: &str) -> String {
    format!("{{\"id\": \"{id}\", \"request\": {request}{extra}}}\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_writes_worlds_records_every_failure_and_resumes() {
    let dir = scratch("collect");
    let (upstream, base_url) = spawn_upstream().await;
    std::fs::write(dir.join("c.toml"), config(&base_url)).unwrap();
    let mut other_classes = request();
    other_classes["questions"]["cause"]["criteria"] =
        json!({"A": null, "B": "b", "X": null, "D": null});
    let requests = [
        line("a", &request(), ""),
        "{not json\n".to_string(),
        line("b", &other_classes, ""),
        "\n".to_string(),
        line("a", &request(), ""),
        line(
            "c",
            &request(),
            r#", "pair_id": "p", "split": "test", "question": "cause", "coarse": "B", "secret": "s2", "hypotheses": ["s2", "s1"]"#,
        ),
        line("d", &request(), ""),
    ]
    .concat();
    std::fs::write(dir.join("requests.jsonl"), &requests).unwrap();
    // `a` meets a transient 503 first (retried after half a second).
    upstream.once(503, b"UPSTREAM-SECRET".to_vec(), &[]);
    let output = collect(&dir, &["--concurrency", "1"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");

    let worlds = lines(&dir.join("worlds.jsonl"));
    let ids: Vec<&str> = worlds
        .iter()
        .map(|w| w["world_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "c", "d"], "{stderr}");
    let a = &worlds[0];
    assert_eq!(
        (
            a["pair_id"].as_str(),
            a["split"].as_str(),
            a["domain"].as_str()
        ),
        (Some("a"), Some("train"), Some("main"))
    );
    assert!(a.get("labels").is_none());
    assert_eq!(a["response"], native_answer());
    // What went upstream is recorded: the contract's questions (in its order), the caller's state.
    let sent: Value = serde_json::from_slice(&upstream.last().body).unwrap();
    assert_eq!(a["request"], sent);
    assert_eq!(a["request"]["state"], request()["state"]);
    let c = &worlds[1];
    assert_eq!(
        (c["pair_id"].as_str(), c["split"].as_str()),
        (Some("p"), Some("test"))
    );
    assert_eq!(
        c["labels"],
        json!({"question": "cause", "T": "B", "S": "s2", "hypotheses": ["s1", "s2"]})
    );
    // The provider got the proxy's key from the environment.
    assert_eq!(
        upstream.last().headers["authorization"],
        format!("Bearer {PROVIDER_KEY}").as_str()
    );

    let errors = lines(&dir.join("worlds.jsonl.errors.jsonl"));
    let kinds: Vec<(u64, &str)> = errors
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            (2, "invalid_line"),
            (5, "duplicate_id"),
            (3, "invalid_request")
        ],
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| !e.to_string().contains("UPSTREAM-SECRET"))
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["collected"], 3);
    assert_eq!(summary["retried"], 1);
    assert_eq!(
        summary["failures"],
        json!({"duplicate_id": 1, "invalid_line": 1, "invalid_request": 1})
    );

    // A rerun asks only what is missing; a torn last line (an interrupted write) is repaired.
    let asked = upstream.seen.lock().unwrap().len();
    let mut torn = std::fs::read(dir.join("worlds.jsonl")).unwrap();
    torn.extend_from_slice(b"{\"world_id\": \"e\", \"pai");
    std::fs::write(dir.join("worlds.jsonl"), torn).unwrap();
    let fixed = requests
        .replace("{not json\n", "")
        .replace(&line("b", &other_classes, ""), "");
    let fixed = fixed.replacen(&line("a", &request(), ""), "", 1);
    std::fs::write(
        dir.join("requests.jsonl"),
        format!("{fixed}{}", line("e", &request(), "")),
    )
    .unwrap();
    // `e` gets an answer the release path refuses: recorded, not written.
    upstream.once(
        200,
        br#"{"model": "m", "answers": {"cause": {"type": "choice", "choice": "Z"}}}"#.to_vec(),
        &[],
    );
    let output = collect(&dir, &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    assert_eq!(
        upstream.seen.lock().unwrap().len(),
        asked + 1,
        "only `e` is asked"
    );
    let errors = lines(&dir.join("worlds.jsonl.errors.jsonl"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["id"], "e");
    assert_eq!(errors[0]["kind"], "invalid_answer");
    assert_eq!(lines(&dir.join("worlds.jsonl")).len(), 3);

    // Now `e` succeeds: everything is collected, exit 0; a last line without its newline is
    // ended before the next world is appended.
    let mut text = std::fs::read(dir.join("worlds.jsonl")).unwrap();
    assert_eq!(text.pop(), Some(b'\n'));
    std::fs::write(dir.join("worlds.jsonl"), text).unwrap();
    let output = collect(&dir, &[]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(lines(&dir.join("worlds.jsonl")).len(), 4);
    assert!(lines(&dir.join("worlds.jsonl.errors.jsonl")).is_empty());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("worlds.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

/// A world line as collect writes it for the contract's first provider (without `provider`,
/// as older files have it), with `extra` keys.
fn world(id: &str, pair: &str, split: &str, extra: &str) -> String {
    format!(
        "{{\"world_id\": \"{id}\", \"pair_id\": \"{pair}\", \"split\": \"{split}\", \"domain\": \"main\", \"request\": {}, \"response\": {}{extra}}}\n",
        request(),
        native_answer()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_refuses_to_resume_a_worlds_file_the_readers_refuse() {
    let dir = scratch("collect-refused");
    let (upstream, base_url) = spawn_upstream().await;
    std::fs::write(dir.join("c.toml"), config(&base_url)).unwrap();
    std::fs::write(dir.join("requests.jsonl"), line("new", &request(), "")).unwrap();
    let three = r#", "labels": {"question": "cause", "T": "B", "S": "s1", "hypotheses": ["s1", "s2", "s3"]}"#;
    let cases = [
        (
            [
                world("a", "a", "train", ""),
                world("b", "b", "train", ""),
                world("a", "a", "train", ""),
            ]
            .concat(),
            vec!["line 3: world id `a` repeats the world of line 1"],
        ),
        (
            [world("a", "p", "train", ""), world("b", "p", "test", "")].concat(),
            vec![
                "line 2: pair `p` has a world in split test here and one in split train on line 1",
            ],
        ),
        // A whole last line without its newline is a world to check, not a line cut short.
        (
            world("a", "a", "train", three).trim_end().to_string(),
            vec!["line 1: not a valid world", "got 3 names"],
        ),
        (
            format!("{}{{\"world_id\": \"b\"}}\n", world("a", "a", "train", "")),
            vec!["line 2: not a valid world", "missing field"],
        ),
    ];
    for (worlds, causes) in cases {
        assert!(
            releasegate_sim::worlds::read_all(worlds.as_bytes()).is_err(),
            "the readers refuse it"
        );
        std::fs::write(dir.join("worlds.jsonl"), &worlds).unwrap();
        let output = collect(&dir, &[]).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{} is not a worlds file collect can resume: ",
                dir.join("worlds.jsonl").display()
            )),
            "{stderr}"
        );
        for cause in causes {
            assert!(stderr.contains(cause), "{cause}: {stderr}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("worlds.jsonl")).unwrap(),
            worlds,
            "a refused file is left as it is"
        );
    }
    assert!(upstream.seen.lock().unwrap().is_empty(), "nothing is asked");

    // A world without `provider` is the contract's first provider's: one naming that
    // provider repeats its id, or splits its pair (a reader that does not know the
    // contract tells them apart).
    let named = r#", "provider": "up""#;
    let cases = [
        (
            [
                world("a", "a", "train", ""),
                world("a", "b", "train", named),
            ]
            .concat(),
            "line 2: world id `a` repeats the world of line 1",
        ),
        (
            [world("a", "p", "train", ""), world("b", "p", "test", named)].concat(),
            "line 2: pair `p` has a world in split test here and one in split train on line 1",
        ),
    ];
    for (worlds, cause) in cases {
        assert!(releasegate_sim::worlds::read_all(worlds.as_bytes()).is_ok());
        std::fs::write(dir.join("worlds.jsonl"), &worlds).unwrap();
        let output = collect(&dir, &[]).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(cause), "{cause}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(dir.join("worlds.jsonl")).unwrap(),
            worlds
        );
    }
    assert!(upstream.seen.lock().unwrap().is_empty(), "nothing is asked");

    // The same worlds, one id each and the pair in one split, are resumed.
    std::fs::write(
        dir.join("worlds.jsonl"),
        [world("a", "p", "test", ""), world("b", "p", "test", "")].concat(),
    )
    .unwrap();
    let output = collect(&dir, &[]).await;
    assert!(output.status.success(), "{output:?}");
    let worlds = std::fs::read(dir.join("worlds.jsonl")).unwrap();
    let worlds = releasegate_sim::worlds::read_all(worlds.as_slice()).unwrap();
    let ids: Vec<&str> = worlds.iter().map(|w| w.world_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "new"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_appends_no_world_that_would_repeat_an_id_or_split_a_pair() {
    let dir = scratch("collect-pairs");
    let (upstream, base_url) = spawn_upstream().await;
    std::fs::write(dir.join("c.toml"), config(&base_url)).unwrap();
    let pair = |pair: &str, split: &str| format!(r#", "pair_id": "{pair}", "split": "{split}""#);
    std::fs::write(
        dir.join("requests.jsonl"),
        [
            line("a", &request(), &pair("p", "train")),
            line("x", &request(), &pair("q", "test")),
        ]
        .concat(),
    )
    .unwrap();
    let output = collect(&dir, &["--concurrency", "1"]).await;
    assert!(output.status.success(), "{output:?}");

    let out = dir.join("worlds.jsonl");
    let requests = [
        // `a` is in --out, in split train.
        line("a", &request(), &pair("p", "test")),
        // The pair of `a` in another split.
        line("b", &request(), &pair("p", "test")),
        // The other world of a pair whose first is in --out, in its split: asked.
        line("y", &request(), &pair("q", "test")),
        line("c", &request(), &pair("r", "train")),
        // A pair split within the requests file.
        line("d", &request(), &pair("r", "validation")),
        line("x", &request(), &pair("q", "test")),
    ]
    .concat();
    std::fs::write(dir.join("requests.jsonl"), &requests).unwrap();
    let output = collect(&dir, &["--concurrency", "1"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert_eq!(
        upstream.seen.lock().unwrap().len(),
        4,
        "only `y` and `c` are asked"
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (&summary["collected"], &summary["already_collected"]),
        (&json!(2), &json!(1))
    );
    assert_eq!(
        summary["failures"],
        json!({"conflicts_with_out": 1, "pair_across_splits": 2})
    );
    let errors = lines(&dir.join("worlds.jsonl.errors.jsonl"));
    let found: Vec<(u64, &str, &str)> = errors
        .iter()
        .map(|e| {
            (
                e["line"].as_u64().unwrap(),
                e["id"].as_str().unwrap(),
                e["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (1, "a", "conflicts_with_out"),
            (2, "b", "pair_across_splits"),
            (5, "d", "pair_across_splits")
        ],
        "{errors:?}"
    );
    let message = |at: usize| errors[at]["message"].as_str().unwrap().to_string();
    assert!(
        message(0).contains(&format!(
            "world `a` is in {} (line 1) in pair `p`, split train, domain `main`; this line puts it in pair `p`, split test",
            out.display()
        )),
        "{}",
        message(0)
    );
    assert!(
        message(1).contains(&format!(
            "pair `p` has a world in split test here and one in split train on line 1 of {}",
            out.display()
        )),
        "{}",
        message(1)
    );
    assert!(
        message(2).contains(
            "pair `r` has a world in split validation here and one in split train on line 4 ("
        ),
        "{}",
        message(2)
    );
    // What was appended, the worlds readers read.
    let worlds =
        releasegate_sim::worlds::read_all(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let ids: Vec<(&str, &str, &str)> = worlds
        .iter()
        .map(|w| (w.world_id.as_str(), w.pair_id.as_str(), w.split.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            ("a", "p", "train"),
            ("x", "q", "test"),
            ("y", "q", "test"),
            ("c", "r", "train")
        ]
    );

    // Once the requests file agrees with --out, the rest is collected.
    let requests = requests
        .replace(
            &line("a", &request(), &pair("p", "test")),
            &line("a", &request(), &pair("p", "train")),
        )
        .replace(
            &line("b", &request(), &pair("p", "test")),
            &line("b", &request(), &pair("p", "train")),
        )
        .replace(
            &line("d", &request(), &pair("r", "validation")),
            &line("d", &request(), &pair("r", "train")),
        );
    std::fs::write(dir.join("requests.jsonl"), &requests).unwrap();
    let output = collect(&dir, &[]).await;
    assert!(output.status.success(), "{output:?}");
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            &summary["collected"],
            &summary["already_collected"],
            &summary["worlds_in_out"]
        ),
        (&json!(2), &json!(4), &json!(6))
    );
    let worlds =
        releasegate_sim::worlds::read_all(std::fs::read(&out).unwrap().as_slice()).unwrap();
    assert_eq!(worlds.len(), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_fails_clearly_when_nothing_is_collected() {
    let dir = scratch("collect-none");
    let (upstream, base_url) = spawn_upstream().await;
    std::fs::write(dir.join("c.toml"), config(&base_url)).unwrap();
    // Every answer is refused by the provider (401: the proxy's key), never retried.
    upstream.script(
        401,
        b"UPSTREAM-SECRET".to_vec(),
        &[],
        std::time::Duration::ZERO,
    );
    std::fs::write(
        dir.join("requests.jsonl"),
        [line("a", &request(), ""), line("b", &request(), "")].concat(),
    )
    .unwrap();
    let output = collect(&dir, &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing was collected"), "{stderr}");
    assert_eq!(upstream.seen.lock().unwrap().len(), 2);
    let errors = lines(&dir.join("worlds.jsonl.errors.jsonl"));
    assert!(
        errors
            .iter()
            .all(|e| e["kind"] == "auth" && e["attempts"] == 1),
        "{errors:?}"
    );

    // An empty requests file and an unknown contract are usage errors naming what is expected.
    std::fs::write(dir.join("requests.jsonl"), "\n\n").unwrap();
    let output = collect(&dir, &[]).await;
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("holds no request line"));
    let output = Command::new(BIN)
        .args(["collect", "--config"])
        .arg(dir.join("c.toml"))
        .args(["--contract", "nope", "--requests"])
        .arg(dir.join("requests.jsonl"))
        .arg("--out")
        .arg(dir.join("w.jsonl"))
        .env(PROVIDER_KEY_ENV, PROVIDER_KEY)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no contract named `nope` (known: main)")
    );
    // Without the provider key in the environment collect refuses to start, as serve does.
    let output = Command::new(BIN)
        .args(["collect", "--config"])
        .arg(dir.join("c.toml"))
        .args(["--contract", "main", "--requests"])
        .arg(dir.join("requests.jsonl"))
        .arg("--out")
        .arg(dir.join("w.jsonl"))
        .env_remove(PROVIDER_KEY_ENV)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains(PROVIDER_KEY_ENV));
}

#[tokio::test(flavor = "multi_thread")]
async fn live_capture_writes_released_answers_and_changes_nothing_a_recipient_sees() {
    let dir = scratch("capture");
    let path = dir.join("captured.jsonl");
    let capture = format!(
        "capture = {{ path = \"{}\", sample_rate = 1 }}",
        path.display()
    );
    let captured = TestConfig {
        view: "full_probabilities".into(),
        contract: String::from(&capture),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let plain = TestConfig {
        view: "full_probabilities".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let (mut bodies, mut headers) = (Vec::new(), Vec::new());
    for app in [&captured, &plain] {
        let response = app.post(&request()).await;
        assert_eq!(response.status(), 200);
        let mut names: Vec<String> = response.headers().keys().map(|k| k.to_string()).collect();
        names.sort();
        headers.push(names);
        bodies.push(response.bytes().await.unwrap());
    }
    assert_eq!(
        bodies[0], bodies[1],
        "the capture changes no byte of the answer"
    );
    assert_eq!(headers[0], headers[1], "nor any header");
    // A failed answer is not captured.
    captured.upstream.once(200, b"not json".to_vec(), &[]);
    assert_eq!(captured.post(&request()).await.status(), 502);
    assert_eq!(captured.post(&request()).await.status(), 200);
    // The writer thread counts what it wrote (bounded wait: it runs beside the requests).
    let mut metrics = String::new();
    for _ in 0..500 {
        metrics = captured.metrics().await;
        if metrics.contains("releasegate_captured_total{contract=\"main\"} 2") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sent: Vec<Value> = captured
        .upstream
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|seen| serde_json::from_slice(&seen.body).unwrap())
        .collect();
    captured.stop().await;
    plain.stop().await;
    // The drain flushed the file.
    let worlds =
        releasegate_sim::worlds::read_all(std::fs::read(&path).unwrap().as_slice()).unwrap();
    assert_eq!(worlds.len(), 2, "{metrics}");
    for world in &worlds {
        assert_eq!(world.split, releasegate_sim::worlds::Split::Train);
        assert_eq!(world.pair_id, world.world_id);
        assert_eq!(world.domain, "main");
        assert!(world.world_id.starts_with("main-rg-"), "{}", world.world_id);
        assert!(world.labels.is_none());
        assert_eq!(world.request, sent[0]);
        assert_eq!(world.response, native_answer());
    }
    assert_ne!(worlds[0].world_id, worlds[1].world_id);
    assert!(
        metrics.contains("releasegate_captured_total{contract=\"main\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "releasegate_capture_dropped_total{contract=\"main\",reason=\"queue_full\"} 0"
        ),
        "{metrics}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn check_config_names_a_capture_creates_nothing_and_refuses_a_path_it_cannot_write() {
    let dir = scratch("check-capture");
    let config = |path: &str| {
        TestConfig {
            contracts: vec![contract(
                "c",
                &format!("capture = {{ path = \"{path}\", sample_rate = 0.1 }}"),
                vec![question("q", &["A", "B"], "choice", "")],
            )],
            ..TestConfig::bare()
        }
        .toml("")
    };
    let check = |text: String| {
        let path = dir.join("c.toml");
        std::fs::write(&path, text).unwrap();
        Command::new(BIN)
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let output = check(config("captured.jsonl"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let file = dir.join("captured.jsonl");
    assert!(
        stdout.contains(&format!("capture c: {} · sample rate 0.1", file.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: contracts.c.capture:") && stdout.contains("native answers"),
        "{stdout}"
    );
    assert!(!file.exists(), "check-config creates no capture file");

    for path in [
        "/nonexistent-releasegate-dir/c.jsonl".to_string(),
        dir.display().to_string(),
    ] {
        let output = check(config(&path));
        assert_eq!(output.status.code(), Some(64));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("contracts.c.capture.path"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn collect_checks_images_as_serve_does() {
    use base64::Engine;
    let dir = scratch("collect-images");
    let (upstream, base_url) = spawn_upstream().await;
    std::fs::write(dir.join("c.toml"), config(&base_url)).unwrap();
    let png = base64::engine::general_purpose::STANDARD
        .encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-COLLECTED-PNG");
    let with_assets = |assets: Value| {
        let mut body = request();
        body["state"] = json!({"ticket": "late parcel", "photo": "<image:a>"});
        body["assets"] = assets;
        body
    };
    let requests = [
        line(
            "ok",
            &with_assets(
                json!({"<image:a>": {"type": "image", "format": "png", "data_base64": png}}),
            ),
            "",
        ),
        // Not an image; a part a requests file cannot carry.
        line(
            "text",
            &with_assets(
                json!({"<image:a>": {"type": "image", "format": "png", "data_base64": "aGVsbG8="}}),
            ),
            "",
        ),
        line(
            "part",
            &with_assets(json!({"<image:a>": {"type": "image", "part": "asset-0"}})),
            "",
        ),
    ]
    .concat();
    std::fs::write(dir.join("requests.jsonl"), &requests).unwrap();
    let output = collect(&dir, &["--concurrency", "1"]).await;
    assert_eq!(output.status.code(), Some(75), "{output:?}");
    let worlds = lines(&dir.join("worlds.jsonl"));
    assert_eq!(worlds.len(), 1);
    assert_eq!(worlds[0]["world_id"], "ok");
    let sent: Value = serde_json::from_slice(&upstream.last().body).unwrap();
    assert_eq!(
        sent["assets"],
        json!({"<image:a>": {"type": "image", "format": "png", "data_base64": png}})
    );
    assert_eq!(
        upstream.seen.lock().unwrap().len(),
        1,
        "refused requests never go upstream"
    );
    let errors = lines(&dir.join("worlds.jsonl.errors.jsonl"));
    let kinds: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e["id"].as_str().unwrap_or(""), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("text", "invalid_request"), ("part", "invalid_request")],
        "{errors:?}"
    );
}
