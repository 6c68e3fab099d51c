//! The binary's subcommands.

use super::helpers::{Question, Recipient, TestConfig, contract, question, recipient, scratch};
use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// The simulator's delivery question, in its order.
const DELIVERY_CLASSES: [&str; 4] = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"];

/// The delivery domain's `coarse_cause` question under `view`, with `extra` lines and the
/// simulator's pinned text.
fn delivery_question(view: &str, extra: &str) -> Question {
    let delivery = releasegate_sim::simulate::ontology::domain("delivery").unwrap();
    question(
        "coarse_cause",
        &DELIVERY_CLASSES,
        view,
        &format!(
            "{extra}{}",
            releasegate_sim::simulate::pinned_text_toml(delivery)
        ),
    )
}

/// Runs a prepared command and requires success; returns its output.
fn succeed(command: &mut Command) -> std::process::Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `releasegate simulate` into `out` and returns the file's bytes.
pub(crate) fn simulate(pairs_per_domain: u32, seed: u64, out: &std::path::Path) -> Vec<u8> {
    succeed(
        Command::new(BIN)
            .args([
                "simulate",
                "--pairs-per-domain",
                &pairs_per_domain.to_string(),
            ])
            .args(["--seed", &seed.to_string(), "--out"])
            .arg(out),
    );
    std::fs::read(out).unwrap()
}

#[test]
fn hash_key_prints_the_sha256_of_stdin() {
    let mut child = Command::new(BIN)
        .arg("hash-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"demo-dispatcher-key\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        "d2aacb68b85bbdced6e4c3f176f8c2c9f0e8faa9e41842a3c426d1111a37022b"
    );
}

#[test]
fn check_config_accepts_the_default_and_names_the_broken_key() {
    let dir = scratch("cli");
    let ok = succeed(Command::new(BIN).args([
        "check-config",
        "--config",
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/releasegate.toml"),
    ]));
    let summary = String::from_utf8_lossy(&ok.stdout);
    assert!(summary.contains("contract dispatcher"));
    // The summary says what a recipient can tell of a WCPQ fallback.
    assert!(
        summary.contains("contract planner: provider sim, usage Drop, shape complete"),
        "{summary}"
    );
    assert!(
        summary.contains("wcpq fallback native: same headers, fields and field order"),
        "{summary}"
    );

    assert!(
        summary.contains("asks a choice question, pinned: instructions, 4 of 4 options described"),
        "{summary}"
    );
    assert!(!summary.contains("warning:"), "{summary}");
    // The budget on request bytes in force, and where it comes from.
    assert!(
        summary.contains("request bytes in flight: auto")
            && summary.contains("request bytes in flight: at most ")
            && summary.contains("an eighth of the "),
        "{summary}"
    );

    // Settings that weaken a contract on purpose are named.
    let risky = dir.join("risky.toml");
    std::fs::write(
        &risky,
        TestConfig {
            contracts: vec![contract(
                "c",
                "usage = \"keep\"",
                vec![
                    question("free", &["x", "y"], "choice", "caller_text = true"),
                    question(
                        "noisy",
                        &["x", "y"],
                        "full_native",
                        "mechanism = { kind = \"gaussian\", sigma = 0.1, confidence = \"native\" }",
                    ),
                ],
            )],
            ..TestConfig::bare()
        }
        .toml(""),
    )
    .unwrap();
    let risky = succeed(
        Command::new(BIN)
            .args(["check-config", "--config"])
            .arg(&risky),
    );
    let summary = String::from_utf8_lossy(&risky.stdout);
    assert!(
        summary.contains("warning: contracts.c.questions.free.caller_text = true")
            && summary.contains("not certifiable"),
        "{summary}"
    );
    assert!(
        summary.contains("warning: contracts.c.questions.noisy.mechanism.confidence = \"native\""),
        "{summary}"
    );
    // Token counts a contract keeps can undo what it hides.
    assert!(
        summary.contains("warning: contracts.c.usage = \"keep\"")
            && summary.contains("output_tokens"),
        "{summary}"
    );

    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "[server]\nmax_body_bytes = 0\n").unwrap();
    let bad = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("server.max_body_bytes"));

    let missing = Command::new(BIN)
        .args(["check-config", "--config", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(64));
}

#[test]
fn simulate_then_replay_through_the_binary() {
    let dir = scratch("sim");
    let first = simulate(5, 3, &dir.join("a.jsonl"));
    assert_eq!(
        first,
        simulate(5, 3, &dir.join("b.jsonl")),
        "deterministic per seed"
    );
    assert_eq!(first.iter().filter(|b| **b == b'\n').count(), 30);

    let output = succeed(
        Command::new(BIN)
            .args([
                "replay",
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/releasegate.toml"),
            ])
            .args(["--contract", "dispatcher", "--worlds"])
            .arg(dir.join("a.jsonl"))
            .arg("--out")
            .arg(dir.join("released.jsonl")),
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["worlds_read"], 30);
    // The dispatcher contract covers the delivery classes only: the other
    // domains' requests do not fit it and are reported, not skipped silently.
    assert_eq!(summary["answers_released"]["coarse_cause"]["choice"], 10);
    assert_eq!(summary["rejected_requests"]["total"], 20);
    let released = std::fs::read_to_string(dir.join("released.jsonl")).unwrap();
    assert_eq!(released.lines().count(), 30);
    // The dispatcher's `choice` view in the complete shape: the probabilities
    // are the one-hot fill of the choice and the confidence 1, never native values.
    let first: serde_json::Value = serde_json::from_str(released.lines().next().unwrap()).unwrap();
    let answer = &first["response"]["answers"]["coarse_cause"];
    let choice = answer["choice"].as_str().unwrap();
    for (label, p) in answer["probabilities"].as_object().unwrap() {
        assert_eq!(p.as_f64(), Some(if label == choice { 1.0 } else { 0.0 }));
    }
    assert_eq!(answer["confidence"], 1.0);
}

#[test]
fn the_shipped_codebooks_rebuild_byte_for_byte_with_the_documented_commands() {
    let dir = scratch("codebooks");
    let worlds = dir.join("worlds.jsonl");
    simulate(240, 0, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let cases: [(&str, &[&str], &str); 2] = [
        (
            "config/releasegate.toml",
            &["planner"],
            "delivery-coarse_cause.json",
        ),
        (
            "config/tuple-bench.toml",
            &["delivery", "equipment", "it_ops"],
            "tuple-bench-coarse_cause.json",
        ),
    ];
    for (config, contracts, file) in cases {
        let out = dir.join(file);
        let mut build = Command::new(BIN);
        build.args(["build-codebook", "--config", &format!("{root}/{config}")]);
        for contract in contracts {
            build.args(["--contract", contract]);
        }
        build
            .args([
                "--question",
                "coarse_cause",
                "--denominator",
                "20",
                "--pool",
                "grid+training",
                "--worlds",
            ])
            .arg(&worlds)
            .arg("--out")
            .arg(&out);
        succeed(&mut build);
        let shipped = std::fs::read(format!("{root}/config/codebooks/{file}")).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == shipped,
            "{file} differs from the shipped codebook"
        );
    }
}

#[test]
fn audit_reports_recovery_and_costs_for_every_release() {
    let dir = scratch("audit");
    let worlds = dir.join("worlds.jsonl");
    simulate(40, 5, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let output = succeed(
        Command::new(BIN)
            .args([
                "audit",
                "--config",
                &format!("{root}/config/tuple-bench.toml"),
            ])
            .args([
                "--contract",
                "delivery",
                "--contract",
                "equipment",
                "--contract",
                "it_ops",
            ])
            .args([
                "--views",
                "no_output,choice,full_native",
                "--mechanisms",
                "quantize=0.2,top_k",
            ])
            .args(["--bootstrap", "50", "--shape", "minimal", "--worlds"])
            .arg(&worlds)
            .arg("--json")
            .arg(dir.join("audit.json"))
            .arg("--svg")
            .arg(dir.join("audit.svg")),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Secret recovery") && text.contains("equivariance passed"),
        "{text}"
    );
    // Unattended (stderr is a pipe here), a run still says where it is, one plain line per
    // phase with the worlds read.
    let progress = String::from_utf8_lossy(&output.stderr);
    for phase in ["releasing", "fitting attackers"] {
        assert!(
            progress
                .lines()
                .any(|l| l.starts_with(&format!("audit: {phase} (")) && l.contains(" worlds read")),
            "{progress}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("audit.json")).unwrap()).unwrap();
    let releases = json["report"]["releases"].as_array().unwrap();
    let names: Vec<&str> = releases
        .iter()
        .map(|r| r["release"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "no_output",
            "choice",
            "full_native",
            "wcpq (contract)",
            "quantize=0.2",
            "top_k",
            "workflow floor"
        ]
    );
    assert_eq!(json["intake"]["worlds_used"], 240);
    // Without --gate, the JSON still carries every sample size line the text prints.
    let sizes = json["sample_size"]["releases"].as_array().unwrap();
    assert_eq!(sizes.len(), names.len());
    for (size, name) in sizes.iter().zip(&names) {
        assert_eq!(size["release"], *name);
        let width = size["interval_width"].as_f64().unwrap();
        let line = format!(
            "sample size {name}: gain interval {:.1} points wide",
            100.0 * width
        );
        assert!(text.contains(&line), "{line}: {text}");
        assert!(size["pairs_needed"].as_u64().is_some(), "{size}");
    }
    assert_eq!(json["sample_size"]["budget_source"], "default");
    assert!(json["sample_size"]["test_pairs"].as_u64().unwrap() > 0);
    assert!(text.contains("the default budget of 5.0 points (no contract or recipient declares"));
    assert_eq!(json["left_out_test_worlds"], 0);
    assert!(json["floor"]["floor"].is_object(), "{}", json["floor"]);
    assert_eq!(json["shapes"]["it_ops"], "minimal");
    assert_eq!(json["attacker_reads_fills"], false);
    assert_eq!(json["report"]["equivariance_passed"], true);
    let svg = std::fs::read_to_string(dir.join("audit.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
    // A picture a person can read: one panel per workflow family (not per workflow), every
    // release named in the legend once, each in a colour of its own.
    let mut families: Vec<&str> = releases
        .iter()
        .flat_map(|r| r["utility"].as_array().unwrap())
        .map(|u| u["workflow"].as_str().unwrap().split('/').next().unwrap())
        .collect();
    families.sort_unstable();
    families.dedup();
    assert!(!families.is_empty() && families.len() < 10, "{families:?}");
    for family in &families {
        assert_eq!(
            svg.matches(&format!(">{family} workflows</text>")).count(),
            1,
            "{family}"
        );
    }
    assert_eq!(svg.matches(" workflows</text>").count(), families.len());
    let legend: Vec<&str> = svg.lines().rev().skip(1).take(2 * names.len()).collect();
    let mut colours = std::collections::BTreeSet::new();
    for name in &names {
        let escaped = name.replace('&', "&amp;");
        let entry = legend
            .iter()
            .position(|line| line.ends_with(&format!(">{escaped}</text>")))
            .unwrap_or_else(|| panic!("{name} is not in the legend: {legend:?}"));
        let marker = legend[entry + 1];
        let fill = marker
            .split("fill=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        colours.insert(fill.to_string());
    }
    assert_eq!(colours.len(), names.len(), "{legend:?}");
    let bad_shape = Command::new(BIN)
        .args([
            "audit",
            "--config",
            &format!("{root}/config/tuple-bench.toml"),
        ])
        .args(["--contract", "delivery", "--shape", "partial", "--worlds"])
        .arg(&worlds)
        .output()
        .unwrap();
    assert_eq!(bad_shape.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad_shape.stderr).contains("unknown shape `partial`"));
}

#[test]
fn build_codebook_learns_a_compact_codebook_reproducibly() {
    let dir = scratch("learned");
    let worlds = dir.join("worlds.jsonl");
    simulate(40, 2, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let build = |out: &std::path::Path| {
        let output = succeed(
            Command::new(BIN)
                .args([
                    "build-codebook",
                    "--config",
                    &format!("{root}/config/releasegate.toml"),
                ])
                .args(["--contract", "planner", "--question", "coarse_cause"])
                .args([
                    "--denominator",
                    "10",
                    "--budget",
                    "0.2",
                    "--max-codewords",
                    "16",
                ])
                .arg("--worlds")
                .arg(&worlds)
                .arg("--out")
                .arg(out),
        );
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        summary
    };
    let summary = build(&dir.join("a.json"));
    build(&dir.join("b.json"));
    let a = std::fs::read(dir.join("a.json")).unwrap();
    assert_eq!(
        a,
        std::fs::read(dir.join("b.json")).unwrap(),
        "two builds differ"
    );
    let artifact: serde_json::Value = serde_json::from_slice(&a).unwrap();
    // The compact codebook is learned (its statistics are in the summary), but one domain's
    // validation split has too few pairs to show it leaks less: the guard writes strict.
    let count = summary["learned"]["stats"]["codewords"].as_u64().unwrap();
    assert!((1..=16).contains(&count), "{count}");
    let guard = &artifact["guard"];
    assert_eq!(guard["chosen"], "strict", "{guard}");
    assert!(
        guard["reason"]
            .as_str()
            .unwrap()
            .contains("fewer than the 30"),
        "{guard}"
    );
    assert_eq!(
        (guard["budget"].as_f64(), guard["max_codewords"].as_u64()),
        (Some(0.2), Some(16))
    );
    assert!(guard["difference"].is_null(), "{guard}");
    assert_eq!(summary["guard"], *guard);
    assert!(artifact["budget"].is_null() && artifact["strict_stage"].is_null());
    assert!(artifact["codeword_count"].as_u64().unwrap() > 16);
    // --max-codewords needs --budget.
    let lone = Command::new(BIN)
        .args([
            "build-codebook",
            "--config",
            &format!("{root}/config/releasegate.toml"),
        ])
        .args([
            "--contract",
            "planner",
            "--question",
            "coarse_cause",
            "--max-codewords",
            "4",
        ])
        .arg("--worlds")
        .arg(&worlds)
        .arg("--out")
        .arg(dir.join("c.json"))
        .output()
        .unwrap();
    assert!(!lone.status.success());
}

/// With enough validation pairs the guard measures both codebooks, paired, and writes the
/// bounded one only when the upper bound of (bounded - strict) recovery is below 0; the file
/// and the summary record both figures and the choice, and a contract of that budget serves
/// the written codebook.
#[test]
fn build_codebook_writes_strict_unless_the_bounded_codebook_is_shown_to_leak_less() {
    let dir = scratch("guarded");
    let worlds = dir.join("worlds.jsonl");
    simulate(60, 4, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let out = dir.join("guarded.json");
    let output = succeed(
        Command::new(BIN)
            .args([
                "build-codebook",
                "--config",
                &format!("{root}/config/tuple-bench.toml"),
            ])
            .args(["--contract", "delivery", "--contract", "equipment"])
            .args(["--contract", "it_ops", "--question", "coarse_cause"])
            .args(["--denominator", "8", "--budget", "0.04"])
            .args(["--max-codewords", "16", "--worlds"])
            .arg(&worlds)
            .arg("--out")
            .arg(&out),
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let artifact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let guard = &artifact["guard"];
    assert_eq!(summary["guard"], *guard);
    let (strict, bounded, difference) = (
        &guard["strict_recovery"],
        &guard["bounded_recovery"],
        &guard["difference"],
    );
    for figure in [strict, bounded, difference] {
        let pairs = figure["pairs"].as_u64().unwrap();
        assert!(pairs >= 30, "{guard}");
        assert_eq!(pairs, difference["pairs"].as_u64().unwrap());
        let (lower, upper) = (
            figure["lower"].as_f64().unwrap(),
            figure["upper"].as_f64().unwrap(),
        );
        let point = figure["point"].as_f64().unwrap();
        assert!(lower <= point && point <= upper, "{figure}");
    }
    let point = |f: &serde_json::Value| f["point"].as_f64().unwrap();
    assert!((point(bounded) - point(strict) - point(difference)).abs() < 1e-9);
    // On these pairs the bounded codebook is not shown to leak less: strict is written.
    assert!(difference["upper"].as_f64().unwrap() >= 0.0, "{guard}");
    assert_eq!(guard["chosen"], "strict");
    assert!(artifact["budget"].is_null(), "a strict codebook");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wrote the strict codebook instead of the bounded one"),
        "{stderr}"
    );
    // A contract of budget 0.04 serves it, strictly; another budget refuses it.
    for (budget, expected) in [("0.04", None), ("0.2", Some("needs a codebook learned"))] {
        let config = dir.join(format!("config-{budget}.toml"));
        let mechanism = format!(
            "workflows = {{ preset = \"tuple-bench\" }}\n\
             mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\", admissibility = {{ budget = {budget} }} }}",
            out.display()
        );
        std::fs::write(
            &config,
            TestConfig {
                contracts: vec![contract(
                    "c",
                    "",
                    vec![question(
                        "coarse_cause",
                        &DELIVERY_CLASSES,
                        "full_native",
                        &mechanism,
                    )],
                )],
                ..TestConfig::bare()
            }
            .toml(""),
        )
        .unwrap();
        let check = Command::new(BIN)
            .arg("check-config")
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&check.stderr);
        match expected {
            None => assert!(check.status.success(), "{stderr}"),
            Some(message) => assert!(
                !check.status.success() && stderr.contains(message),
                "{stderr}"
            ),
        }
    }
}

#[test]
fn audit_gate_fails_a_contract_over_its_leakage_budget_or_missing_a_keep_field() {
    let dir = scratch("gate");
    let worlds = dir.join("worlds.jsonl");
    simulate(30, 4, &worlds);
    let gated = |name: &str, view: &str, policy: &str| {
        contract(
            name,
            &format!("policy = {policy}"),
            vec![delivery_question(view, "")],
        )
    };
    let mut free = gated("free", "choice", "{ keep = [\"choice\"] }");
    free.questions[0].lines.push_str("caller_text = true\n");
    let config = dir.join("gate.toml");
    std::fs::write(
        &config,
        TestConfig {
            contracts: vec![
                gated(
                    "open",
                    "full_native",
                    "{ keep = [\"choice\", \"coarse_cause.probabilities\"], hide = [\"secret\"], max_recovery_gain = 1.0 }",
                ),
                gated("narrow", "choice", "{ keep = [\"probabilities\"] }"),
                gated(
                    "tight",
                    "full_native",
                    "{ hide = [\"secret\"], max_recovery_gain = 0.0 }",
                ),
                free,
                gated(
                    "unsure",
                    "full_native",
                    "{ hide = [\"secret\"], max_recovery_gain = 0.2 }",
                ),
            ],
            ..TestConfig::bare()
        }
        .toml(""),
    )
    .unwrap();
    let run = |name: &str| {
        let json = dir.join(format!("{name}.json"));
        let output = Command::new(BIN)
            .arg("audit")
            .arg("--config")
            .arg(&config)
            .args([
                "--contract",
                name,
                "--views",
                "no_output",
                "--bootstrap",
                "50",
            ])
            .args(["--gate", "--worlds"])
            .arg(&worlds)
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (output.status.code(), stdout, value["gate"][0].clone())
    };
    let (code, stdout, open) = run("open");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("gate open: pass"), "{stdout}");
    assert_eq!(open["passed"], true);
    assert!(open["recovery_gain"]["upper"].as_f64().unwrap() <= 1.0);

    let (code, stdout, narrow) = run("narrow");
    assert_eq!(code, Some(3), "{stdout}");
    assert!(
        stdout.contains("gate narrow: FAIL")
            && stdout.contains("drops KEEP coarse_cause.probabilities"),
        "{stdout}"
    );
    assert_eq!(
        narrow["dropped_keep"],
        serde_json::json!(["coarse_cause.probabilities"])
    );

    // The budget: the full native answer leaks the secret above no output.
    let (code, stdout, tight) = run("tight");
    let upper = tight["recovery_gain"]["upper"].as_f64().unwrap();
    assert!(upper > 0.0, "{stdout}");
    assert_eq!(code, Some(3), "{stdout}");
    assert_eq!(tight["passed"], false);

    // A question whose text the caller writes is never certified.
    let (code, stdout, free) = run("free");
    assert_eq!(code, Some(3), "{stdout}");
    assert!(
        stdout.contains("gate free: FAIL") && stdout.contains("not certifiable"),
        "{stdout}"
    );
    assert_eq!(free["not_certifiable"], serde_json::json!(["coarse_cause"]));

    // Too few pairs to resolve a 20-point budget: neither pass nor fail, with the pairs needed.
    let (code, stdout, unsure) = run("unsure");
    assert_eq!(code, Some(4), "{stdout}");
    assert!(
        stdout.contains("gate unsure: INCONCLUSIVE") && stdout.contains("would resolve it"),
        "{stdout}"
    );
    assert_eq!(unsure["verdict"], "inconclusive");
    let pairs = unsure["pairs"].as_u64().unwrap();
    assert!(unsure["pairs_needed"].as_u64().unwrap() > pairs, "{unsure}");
}

#[test]
fn audit_sweeps_wcpq_budgets_into_a_frontier() {
    let dir = scratch("frontier");
    let worlds = dir.join("worlds.jsonl");
    simulate(30, 6, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let output = succeed(
        Command::new(BIN)
            .args([
                "audit",
                "--config",
                &format!("{root}/config/tuple-bench.toml"),
            ])
            .args([
                "--contract",
                "delivery",
                "--contract",
                "equipment",
                "--contract",
                "it_ops",
            ])
            .args(["--views", "no_output,full_native", "--bootstrap", "50"])
            .args(["--budgets", "0,0.2", "--max-codewords", "4,64", "--worlds"])
            .arg(&worlds)
            .arg("--json")
            .arg(dir.join("audit.json"))
            .arg("--svg")
            .arg(dir.join("audit.svg")),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("frontier wcpq a=0.2 K=64"), "{text}");
    // The floor no setting that keeps the plans goes below, beside the settings.
    assert!(text.contains("frontier workflow floor: recovery"), "{text}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("audit.json")).unwrap()).unwrap();
    let frontier = json["frontier"].as_array().unwrap();
    assert_eq!(frontier.len(), 4);
    for point in frontier {
        let budget = point["budget"].as_f64().unwrap();
        // The three contracts share the shipped strict codebook and the same workflows up
        // to labels: they pool into one learned codebook, which serves each of them.
        let codebooks = point["codebooks"].as_array().unwrap();
        assert_eq!(codebooks.len(), 1, "{point}");
        assert_eq!(
            codebooks[0]["serves"].as_array().unwrap().len(),
            3,
            "{point}"
        );
        let codewords = codebooks[0]["codewords"].as_u64().unwrap();
        assert!(
            codewords <= point["max_codewords"].as_u64().unwrap(),
            "{point}"
        );
        let questions = point["questions"].as_array().unwrap();
        assert_eq!(questions.len(), 3, "{point}");
        for question in questions {
            assert!(question["test_answers"].as_u64().unwrap() > 0, "{question}");
            if point["max_codewords"] == 64 && budget > 0.0 {
                assert!(
                    question["covered_test_answers"].as_u64().unwrap() > 0,
                    "{question}"
                );
            }
        }
        assert!(point["recovery"]["mean"].is_number(), "{point}");
        assert!(point["recovery_gain"]["upper"].is_number(), "{point}");
        assert!(
            point["paired"]["workflow floor"]["mean"].is_number(),
            "{point}"
        );
        let worst = point["worst_relative_increase"].as_object().unwrap();
        assert_eq!(worst.len(), 18);
        // The shipped contracts fall back to the native answer, so every output stays in budget.
        for value in worst.values() {
            assert!(value.as_f64().unwrap() <= budget + 1e-12, "{point}");
        }
        let mean = point["mean_cost_increase"].as_object().unwrap();
        assert_eq!(mean.len(), 18, "{point}");
        assert!(mean.values().all(serde_json::Value::is_number), "{point}");
    }
    let names: Vec<&str> = json["report"]["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["release"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"wcpq a=0 K=4") && names.contains(&"wcpq a=0.2 K=64"),
        "{names:?}"
    );
    let svg = std::fs::read_to_string(dir.join("audit.svg")).unwrap();
    assert!(svg.contains("wcpq a=0.2 K=64"), "one point per setting");
    // A sweep needs a WCPQ contract.
    let plain = Command::new(BIN)
        .args([
            "audit",
            "--config",
            &format!("{root}/config/releasegate.toml"),
        ])
        .args(["--contract", "dispatcher", "--budgets", "0.1", "--worlds"])
        .arg(&worlds)
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(64));
}

#[test]
fn audit_reports_the_workflow_floor_of_every_wcpq_question() {
    let dir = scratch("floor");
    let worlds = dir.join("worlds.jsonl");
    simulate(40, 5, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let audit = |config: &std::path::Path, views: &str, json: &str| {
        let output = succeed(
            Command::new(BIN)
                .arg("audit")
                .arg("--config")
                .arg(config)
                .args(["--contract", "delivery", "--contract", "equipment"])
                .args(["--contract", "it_ops", "--views", views])
                .args(["--bootstrap", "50", "--worlds"])
                .arg(&worlds)
                .arg("--json")
                .arg(dir.join(json)),
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(json)).unwrap()).unwrap();
        (String::from_utf8_lossy(&output.stdout).to_string(), json)
    };
    let shipped = std::path::PathBuf::from(format!("{root}/config/tuple-bench.toml"));
    let (text, json) = audit(&shipped, "no_output,full_native", "a.json");
    assert!(
        text.contains("workflow floor: recovery from the frozen workflows' plans alone"),
        "{text}"
    );
    assert!(text.contains("wcpq (contract) minus floor"), "{text}");
    let floor = &json["floor"];
    assert_eq!(floor["release"], "workflow floor");
    assert!(floor["at_floor"].is_boolean(), "{floor}");
    assert!(floor["strict_minus_floor"]["upper"].is_number(), "{floor}");
    assert!(
        floor["full_native"]["accuracy"]["mean"].is_number(),
        "{floor}"
    );
    for (contract, domain) in [
        ("delivery", "delivery"),
        ("equipment", "equipment"),
        ("it_ops", "it_ops"),
    ] {
        let question = &floor["questions"][format!("{contract}/coarse_cause")];
        assert_eq!(question["policies"], 18, "{question}");
        assert_eq!(question["worlds"], 80, "{question}");
        assert!(question["figures"][domain]["floor"]["accuracy"]["mean"].is_number());
        assert!(question["figures"][domain]["strict"]["gain"]["mean"].is_number());
        assert!(text.contains(&format!(
            "workflow floor {contract}/coarse_cause: 18 policies"
        )));
    }
    // The attacker reads the plans: some domain's chosen strategy is the plans' subview.
    let release = json["report"]["releases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["release"] == "workflow floor")
        .unwrap();
    assert!(
        release["domains"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["strategy"]["subview"] == "choice"),
        "{release}"
    );
    // Contracts that release otherwise (another fallback) but keep the same plans, audited
    // beside other views, have the same floor.
    let text = std::fs::read_to_string(&shipped)
        .unwrap()
        .replace("fallback = \"native\"", "fallback = \"choice_only\"")
        .replace(
            "codebook = \"codebooks/",
            &format!("codebook = \"{root}/config/codebooks/"),
        );
    assert!(text.contains("choice_only"));
    let other = dir.join("other.toml");
    std::fs::write(&other, text).unwrap();
    let (_, again) = audit(&other, "no_output,choice", "b.json");
    assert_eq!(again["floor"]["floor"], floor["floor"]);
    for key in [
        "delivery/coarse_cause",
        "equipment/coarse_cause",
        "it_ops/coarse_cause",
    ] {
        let figures = |json: &serde_json::Value| json["floor"]["questions"][key]["figures"].clone();
        let domain = key.split('/').next().unwrap();
        assert_eq!(
            figures(&again)[domain]["floor"],
            figures(&json)[domain]["floor"]
        );
        assert!(figures(&json)[domain]["floor"].is_object());
    }
    assert_ne!(
        again["floor"]["strict"], floor["strict"],
        "the strict releases differ"
    );
}

#[test]
fn audit_gates_a_recipient_on_everything_its_contracts_release() {
    let dir = scratch("recipient");
    let worlds = dir.join("worlds.jsonl");
    simulate(30, 4, &worlds);
    let config = dir.join("recipient.toml");
    std::fs::write(
        &config,
        TestConfig {
            recipients: vec![Recipient {
                lines: "policy = { hide = [\"secret\"], max_recovery_gain = 0.0 }".into(),
                ..recipient("analyst", "analyst-key", &["coarse", "fine"])
            }],
            contracts: vec![
                contract("coarse", "", vec![delivery_question("choice", "")]),
                contract("fine", "", vec![delivery_question("full_native", "")]),
            ],
            ..TestConfig::bare()
        }
        .toml(""),
    )
    .unwrap();
    let json = dir.join("recipient.json");
    let output = Command::new(BIN)
        .arg("audit")
        .arg("--config")
        .arg(&config)
        .args([
            "--recipient",
            "analyst",
            "--views",
            "no_output",
            "--bootstrap",
            "50",
        ])
        .args(["--gate", "--worlds"])
        .arg(&worlds)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The recipient's own zero budget: what it reads from both releases together leaks.
    assert_eq!(output.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("gate recipient analyst: FAIL"), "{stdout}");
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(value["recipient"], "analyst");
    assert_eq!(value["contracts"], serde_json::json!(["coarse", "fine"]));
    let gate = value["gate"].as_array().unwrap();
    assert_eq!(gate.last().unwrap()["contract"], "recipient analyst");
    // A budget of 0 is no sample size's budget: the default is, and the line says so.
    assert!(
        stdout.contains("test pairs; the default budget of 5.0 points (no contract or recipient declares max_recovery_gain) needs "),
        "{stdout}"
    );
    // A recipient's own positive budget is the sample size's, named as the recipient's.
    let budgeted = dir.join("budgeted.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &budgeted,
        text.replace("max_recovery_gain = 0.0", "max_recovery_gain = 0.25"),
    )
    .unwrap();
    let output = succeed(
        Command::new(BIN)
            .arg("audit")
            .arg("--config")
            .arg(&budgeted)
            .args([
                "--recipient",
                "analyst",
                "--views",
                "no_output,choice",
                "--bootstrap",
                "50",
            ])
            .arg("--worlds")
            .arg(&worlds),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("test pairs; recipient analyst's max_recovery_gain of 25.0 points needs "),
        "{stdout}"
    );
    // --recipient and --contract exclude each other (clap's usage error, 2); an unknown
    // recipient is the audit's usage error (64).
    for (args, code) in [
        (vec!["--recipient", "analyst", "--contract", "coarse"], 2),
        (vec!["--recipient", "nobody"], 64),
    ] {
        let output = Command::new(BIN)
            .arg("audit")
            .arg("--config")
            .arg(&config)
            .args(args)
            .arg("--worlds")
            .arg(&worlds)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code));
    }
}

#[test]
fn offline_commands_fail_clearly_on_input_they_cannot_use() {
    let dir = scratch("empty-input");
    let root = env!("CARGO_MANIFEST_DIR");
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let worlds = dir.join("worlds.jsonl");
    simulate(5, 1, &worlds);
    // The simulator's worlds, asked with other text than this contract pins: none fits.
    let mismatched = dir.join("mismatched.toml");
    let shipped = std::fs::read_to_string(format!("{root}/config/tuple-bench.toml")).unwrap();
    std::fs::write(
        &mismatched,
        shipped.replace("Choose the coarse route", "Pick any route"),
    )
    .unwrap();
    let codebooks = format!("{root}/config/codebooks");
    let mismatched_text = std::fs::read_to_string(&mismatched)
        .unwrap()
        .replace("codebooks/", &format!("{codebooks}/"));
    std::fs::write(&mismatched, mismatched_text).unwrap();
    let run = |args: Vec<String>| {
        let output = Command::new(BIN).args(&args).output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    let build = |config: &str, input: &std::path::Path| {
        run(vec![
            "build-codebook".into(),
            "--config".into(),
            config.into(),
            "--contract".into(),
            "delivery".into(),
            "--question".into(),
            "coarse_cause".into(),
            "--worlds".into(),
            input.display().to_string(),
            "--out".into(),
            dir.join("c.json").display().to_string(),
            "--denominator".into(),
            "4".into(),
        ])
    };
    let tuple_bench = format!("{root}/config/tuple-bench.toml");
    for ((code, stderr), expected) in [
        (
            build(&tuple_bench, &empty),
            "is empty: expected worlds JSONL",
        ),
        (
            build(&mismatched.display().to_string(), &worlds),
            "no train-split world",
        ),
    ] {
        assert_eq!(code, Some(64), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let replay = |config: &str, input: &std::path::Path| {
        run(vec![
            "replay".into(),
            "--config".into(),
            config.into(),
            "--contract".into(),
            "delivery".into(),
            "--worlds".into(),
            input.display().to_string(),
            "--out".into(),
            dir.join("out.jsonl").display().to_string(),
        ])
    };
    let (code, stderr) = replay(&tuple_bench, &empty);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("holds no world"), "{stderr}");
    let (code, stderr) = replay(&mismatched.display().to_string(), &worlds);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("none of the"), "{stderr}");
    // A decision log with no decision line.
    let log = dir.join("not-decisions.jsonl");
    std::fs::write(&log, "{\"hello\": 1}\nplain text\n").unwrap();
    let (code, stderr) = run(vec!["decisions".into(), log.display().to_string()]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("no decision line"), "{stderr}");
}

#[test]
fn audit_refuses_gains_on_pairs_that_fail_its_checks_unless_allowed() {
    let dir = scratch("unpaired");
    let worlds = dir.join("worlds.jsonl");
    let text = String::from_utf8(simulate(40, 8, &worlds)).unwrap();
    // Break two pairs of the delivery domain: one world leaves its pair (two groups of one),
    // and another pair's second world gets the first one's secret.
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut delivery = lines
        .iter()
        .enumerate()
        .filter(|(_, w)| w["domain"] == "delivery" && w["split"] == "test")
        .map(|(i, _)| i);
    let (alone, _, first, second) = (
        delivery.next().unwrap(),
        delivery.next().unwrap(),
        delivery.next().unwrap(),
        delivery.next().unwrap(),
    );
    lines[alone]["pair_id"] = serde_json::json!("left-alone");
    assert_eq!(lines[first]["pair_id"], lines[second]["pair_id"]);
    lines[second]["labels"]["S"] = lines[first]["labels"]["S"].clone();
    let broken = dir.join("broken.jsonl");
    let body: String = lines.iter().map(|w| format!("{w}\n")).collect();
    std::fs::write(&broken, body).unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let audit = |worlds: &std::path::Path, extra: &[&str]| {
        Command::new(BIN)
            .args([
                "audit",
                "--config",
                &format!("{root}/config/tuple-bench.toml"),
                "--contract",
                "delivery",
                "--views",
                "no_output,choice",
                "--bootstrap",
                "50",
            ])
            .args(extra)
            .arg("--worlds")
            .arg(worlds)
            .output()
            .unwrap()
    };
    // The generator's own pairs pass, and each release says what its interval needs.
    let good = audit(&worlds, &[]);
    assert_eq!(good.status.code(), Some(0), "{good:?}");
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert!(
        stdout.contains("sample size choice: gain interval")
            && stdout.contains(" test pairs; ")
            && stdout.contains(" needs "),
        "{stdout}"
    );
    assert!(!String::from_utf8_lossy(&good.stderr).contains("input check"));
    let refused = audit(&broken, &[]);
    assert_eq!(refused.status.code(), Some(65), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("domain delivery")
            && stderr.contains("pair ids that do not group exactly two worlds")
            && stderr.contains("pairs whose two worlds hold the same secret"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("Secret recovery"));
    let allowed = audit(&broken, &["--allow-unpaired", "--threads", "1"]);
    assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
    let stdout = String::from_utf8_lossy(&allowed.stdout);
    assert!(
        stdout.contains("UNCHECKED INPUT") && stdout.contains("Secret recovery"),
        "{stdout}"
    );
    // Worlds without labels (what a live capture writes): exit 65, pointing to the pairs and
    // to collect, with or without --gate.
    let unlabelled = dir.join("unlabelled.jsonl");
    let body: String = lines
        .iter()
        .map(|w| {
            let mut w = w.clone();
            w.as_object_mut().unwrap().remove("labels");
            format!("{w}\n")
        })
        .collect();
    std::fs::write(&unlabelled, body).unwrap();
    for extra in [&[][..], &["--gate"][..]] {
        let refused = audit(&unlabelled, extra);
        assert_eq!(refused.status.code(), Some(65), "{refused:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("no labelled world fits")
                && stderr.contains(&format!(
                    "({} of {} worlds carry no labels)",
                    lines.len(),
                    lines.len()
                ))
                && stderr.contains("docs/pairs.md")
                && stderr.contains("releasegate collect"),
            "{stderr}"
        );
    }
}

#[test]
fn build_codebook_keeps_training_answers_out_unless_asked() {
    let dir = scratch("pool");
    let worlds = dir.join("worlds.jsonl");
    simulate(20, 4, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let build = |pool: Option<&str>, out: &str| {
        let mut command = Command::new(BIN);
        command
            .args([
                "build-codebook",
                "--config",
                &format!("{root}/config/releasegate.toml"),
                "--contract",
                "planner",
                "--question",
                "coarse_cause",
                "--denominator",
                "6",
                "--worlds",
            ])
            .arg(&worlds)
            .arg("--out")
            .arg(dir.join(out));
        if let Some(pool) = pool {
            command.args(["--pool", pool]);
        }
        let output = succeed(&mut command);
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (summary, std::fs::read(dir.join(out)).unwrap())
    };
    let (grid, grid_bytes) = build(None, "grid.json");
    assert_eq!(grid["pool"], "grid");
    assert!(grid["training_answers"].as_u64().unwrap() > 0);
    assert_eq!(grid["stats"]["training_codewords"], 0);
    assert_eq!(grid["stats"]["midpoint_codewords"], 0);
    let (trained, trained_bytes) = build(Some("grid+training"), "trained.json");
    assert_eq!(trained["pool"], "grid+training");
    assert!(trained["stats"]["training_codewords"].as_u64().unwrap() > 0);
    assert!(trained_bytes.len() > grid_bytes.len());
    // The grid-only codebook is the grid: every codeword's probabilities are multiples of 1/6.
    let codebook = releasegate_core::codebook::Codebook::from_json(&grid_bytes).unwrap();
    for codeword in codebook.codewords() {
        for p in &codeword.p {
            assert!(((p * 6.0) - (p * 6.0).round()).abs() < 1e-9, "{p}");
        }
    }
}

/// `audit --gate` of `contract` in `config` over `worlds` (own release only, 50 resamples):
/// the exit code, stdout and the JSON report.
pub(crate) fn gate_audit(
    config: &std::path::Path,
    contract: &str,
    worlds: &std::path::Path,
) -> (Option<i32>, String, serde_json::Value) {
    let json = worlds.with_extension(format!("{contract}.json"));
    let output = Command::new(BIN)
        .arg("audit")
        .arg("--config")
        .arg(config)
        .args(["--contract", contract, "--views", "no_output"])
        .args(["--bootstrap", "50", "--gate", "--worlds"])
        .arg(worlds)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let value = serde_json::from_slice(&std::fs::read(&json).unwrap_or_default())
        .unwrap_or_else(|_| panic!("{stdout}{stderr}"));
    (output.status.code(), stdout, value)
}

#[test]
fn audit_of_a_coarsening_contract_leaves_out_no_world_and_a_gate_says_what_it_left_out() {
    let dir = scratch("coarse-audit");
    let worlds = dir.join("worlds.jsonl");
    simulate(30, 4, &worlds);
    let config = dir.join("coarse.toml");
    std::fs::write(
        &config,
        TestConfig {
            contracts: vec![contract(
                "coarse",
                "policy = { hide = [\"secret\"], max_recovery_gain = 1.0 }",
                vec![delivery_question(
                    "full_probabilities",
                    "coarsen = { ADDRESS = \"CUSTOMER_SIDE\", DELIVERY_RECORD = \"CUSTOMER_SIDE\" }\n\
                     withhold_labels = [\"DAMAGE\"]\n",
                )],
            )],
            ..TestConfig::bare()
        }
        .toml(""),
    )
    .unwrap();
    let (code, stdout, value) = gate_audit(&config, "coarse", &worlds);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("gate coarse: pass"), "{stdout}");
    // Every delivery world is in, merged and withheld classes included.
    let intake = &value["intake"];
    let text = std::fs::read_to_string(&worlds).unwrap();
    let in_domain = text
        .lines()
        .filter(|l| l.contains("\"domain\":\"delivery\""))
        .count();
    assert_eq!(intake["worlds_used"], in_domain as u64, "{intake}");
    assert_eq!(intake["left_out_test"], serde_json::json!({}), "{intake}");
    assert!(intake["labelled_test_worlds"].as_u64().unwrap() > 0);
    assert_eq!(value["gate"][0]["left_out_test_worlds"], 0);
    assert_eq!(value["gate"][0]["too_many_left_out"], false);

    // Labels of a class the contract does not know, on a few whole test pairs: those worlds
    // are counted, by reason, and the verdict cannot certify the contract.
    let mut edited = String::new();
    let mut pairs = std::collections::BTreeSet::new();
    for line in text.lines() {
        let mut world: serde_json::Value = serde_json::from_str(line).unwrap();
        let pair = world["pair_id"].as_str().unwrap().to_string();
        let number: u32 = pair.rsplit('p').next().unwrap().parse().unwrap();
        if world["domain"] == "delivery" && world["split"] == "test" && number.is_multiple_of(3) {
            world["labels"]["T"] = serde_json::json!("NOWHERE");
            pairs.insert(pair);
        }
        edited += &format!("{world}\n");
    }
    assert!(!pairs.is_empty());
    let tampered = dir.join("tampered.jsonl");
    std::fs::write(&tampered, edited).unwrap();
    let (code, stdout, value) = gate_audit(&config, "coarse", &tampered);
    assert_eq!(code, Some(4), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("gate coarse: "))
        .unwrap();
    assert!(
        line.starts_with("gate coarse: INCONCLUSIVE")
            && line.contains("authorized_class_not_in_contract")
            && line.contains("more than 5%"),
        "{line}"
    );
    let gate = &value["gate"][0];
    assert_eq!(gate["verdict"], "inconclusive");
    assert_eq!(gate["too_many_left_out"], true);
    assert_eq!(gate["left_out_test_worlds"], 2 * pairs.len() as u64);
    assert_eq!(
        value["intake"]["left_out_test"]["authorized_class_not_in_contract"],
        2 * pairs.len() as u64
    );
}

#[test]
fn audit_measures_the_output_tokens_a_contract_keeps() {
    let dir = scratch("usage-audit");
    let generated = dir.join("generated.jsonl");
    simulate(400, 1, &generated);
    // A question over one coarse class's fine mechanisms (and one more label), coarsened
    // into that class: the release hides the mechanism, the simulator's output count
    // follows the length of the mechanism's name it wrote.
    let delivery = releasegate_sim::simulate::ontology::domain("delivery").unwrap();
    let class = &delivery.classes[0];
    let mut labels: Vec<&str> = class.mechanisms.iter().map(|m| m.id).collect();
    labels.push("OTHER");
    let criteria: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|l| (l.to_string(), serde_json::Value::Null))
        .collect();
    let mut requests = String::new();
    for line in std::fs::read_to_string(&generated).unwrap().lines() {
        let world: serde_json::Value = serde_json::from_str(line).unwrap();
        if world["labels"]["T"] != class.label {
            continue;
        }
        let request = serde_json::json!({
            "id": world["world_id"], "pair_id": world["pair_id"], "split": world["split"],
            "domain": world["domain"], "question": "cause", "coarse": class.label,
            "secret": world["labels"]["S"], "hypotheses": world["labels"]["hypotheses"],
            "request": {"model": "jev-latest", "state": world["request"]["state"],
                "questions": {"cause": {"type": "choice", "criteria": criteria}}},
        });
        requests += &format!("{request}\n");
    }
    std::fs::write(dir.join("requests.jsonl"), requests).unwrap();
    let coarsen: Vec<String> = class
        .mechanisms
        .iter()
        .map(|m| format!("{} = \"{}\"", m.id, class.label))
        .collect();
    let coarsen = format!("coarsen = {{ {} }}", coarsen.join(", "));
    let text = TestConfig {
        contracts: ["keep", "input"]
            .into_iter()
            .map(|usage| {
                contract(
                    usage,
                    &format!(
                        "usage = \"{usage}\"\n\
                         policy = {{ hide = [\"secret\"], max_recovery_gain = 0.05 }}"
                    ),
                    vec![question("cause", &labels, "full_probabilities", &coarsen)],
                )
            })
            .collect(),
        ..TestConfig::bare()
    }
    .toml("");
    let config = dir.join("usage.toml");
    std::fs::write(&config, text).unwrap();
    let checked = succeed(
        Command::new(BIN)
            .arg("check-config")
            .arg("--config")
            .arg(&config),
    );
    let summary = String::from_utf8_lossy(&checked.stdout);
    assert!(
        summary.contains("warning: contracts.keep.usage = \"keep\"")
            && !summary.contains("contracts.input.usage"),
        "{summary}"
    );
    let worlds = dir.join("worlds.jsonl");
    succeed(
        Command::new(BIN)
            .args(["collect", "--config"])
            .arg(&config)
            .args(["--contract", "keep", "--requests"])
            .arg(dir.join("requests.jsonl"))
            .arg("--out")
            .arg(&worlds),
    );
    let gain = |value: &serde_json::Value, bound: &str| {
        value["gate"][0]["recovery_gain"][bound].as_f64().unwrap()
    };
    // Kept, the output count tells the mechanisms apart: the gate fails.
    let (code, stdout, keep) = gate_audit(&config, "keep", &worlds);
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("gate keep: FAIL"), "{stdout}");
    assert!(gain(&keep, "lower") > 0.05, "{stdout}");
    // Released as 0, it tells nothing: the same contract's gain is well below.
    let (code, stdout, input) = gate_audit(&config, "input", &worlds);
    assert_ne!(code, Some(3), "{stdout}");
    assert!(gain(&input, "mean") < gain(&keep, "lower"), "{stdout}");
    assert_eq!(keep["intake"]["left_out_test"], serde_json::json!({}));
}
