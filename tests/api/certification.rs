//! Certificates through the binary: `audit --gate --certificate-dir` writes them, `check-config`
//! reports them, `serve` refuses an uncertified contract under `certification = "required"` at
//! start-up and at reload (the old configuration keeps serving), and serves it with a warning
//! and a 0 gauge under `"advisory"`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::binary::{BIN, Served, client, serve_command};
use super::cli::{gate_audit, simulate};
use super::helpers::{PATIENCE, TestConfig, contract, question, recipient, scratch};

const KEY: &str = "certification-test-key";
const REQUEST: &str = include_str!("../../config/examples/delivery-request.json");

/// A configuration of its own: a recipient holding a choice-only contract with a budget and
/// a coarsening contract with a KEEP-only policy, over the simulator's delivery domain.
fn config(mode: &str, dispatch_view: &str) -> String {
    let delivery = releasegate_sim::simulate::ontology::domain("delivery").unwrap();
    let text = releasegate_sim::simulate::pinned_text_toml(delivery);
    let coarse_cause = |view: &str, extra: &str| {
        vec![question(
            "coarse_cause",
            &["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"],
            view,
            &format!("{extra}{text}"),
        )]
    };
    TestConfig {
        server: format!("certificates = \"certs\"\ncertification = \"{mode}\""),
        recipients: vec![recipient("desk", KEY, &["dispatch", "merged"])],
        contracts: vec![
            contract(
                "dispatch",
                "usage = \"drop\"\n\
                 policy = { keep = [\"choice\"], hide = [\"secret\"], max_recovery_gain = 1.0 }",
                coarse_cause(dispatch_view, ""),
            ),
            contract(
                "merged",
                "usage = \"drop\"\npolicy = { keep = [\"choice\"] }",
                coarse_cause(
                    "choice",
                    "coarsen = { ADDRESS = \"CUSTOMER\", DELIVERY_RECORD = \"CUSTOMER\" }\n",
                ),
            ),
        ],
        ..TestConfig::bare()
    }
    .toml("")
}

fn run(args: &[&str], config: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

/// Waits (bounded) for a log line of `served` holding `needle`, or fails with its log.
async fn assert_logged(served: &Served, needle: &str) {
    assert!(
        served.logged(needle, PATIENCE).await,
        "{needle}: {:?}",
        served.logs.lock().unwrap()
    );
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn decide(served: &Served) -> Value {
    let response = tokio::time::timeout(
        PATIENCE,
        client()
            .post(format!("http://{}/v1/systemone", served.public))
            .bearer_auth(KEY)
            .header("x-release-contract", "dispatch")
            .header("content-type", "application/json")
            .body(REQUEST)
            .send(),
    )
    .await
    .expect("no answer")
    .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn only_what_the_gate_certified_is_served_under_required_certification() {
    let dir = scratch("certification");
    let worlds = dir.join("worlds.jsonl");
    simulate(30, 7, &worlds);
    let path = dir.join("releasegate.toml");
    std::fs::write(&path, config("required", "choice")).unwrap();

    // Before the gate: nothing is certified, and neither check-config nor serve accept it.
    let output = run(&["check-config"], &path);
    assert!(!output.status.success(), "{}", text(&output));
    for name in [
        "contract dispatch: missing",
        "contract merged: missing",
        "recipient desk: missing",
    ] {
        assert!(text(&output).contains(name), "{name}: {}", text(&output));
    }

    // The gate certifies both contracts and the recipient.
    let mut audit = Command::new(BIN);
    audit
        .args(["audit", "--config"])
        .arg(&path)
        .args([
            "--recipient",
            "desk",
            "--views",
            "no_output",
            "--bootstrap",
            "50",
        ])
        .args(["--gate", "--worlds"])
        .arg(&worlds)
        .arg("--certificate-dir")
        .arg(dir.join("certs"));
    let output = audit.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let certificate: Value = serde_json::from_slice(
        &std::fs::read(dir.join("certs").join("contract-dispatch.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(certificate["gate"]["verdict"], "pass");
    assert_eq!(certificate["policy"]["max_recovery_gain"], 1.0);
    assert_eq!(
        certificate["release"]["questions"]["coarse_cause"]["view"],
        "choice"
    );
    assert_eq!(
        certificate["audit"]["worlds_sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    assert!(dir.join("certs").join("recipient-desk.json").exists());
    let output = run(&["check-config"], &path);
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("certification: required"));
    assert!(
        text(&output).contains("contract dispatch: certified"),
        "{}",
        text(&output)
    );
    assert!(
        text(&output).contains("recipient desk: certified"),
        "{}",
        text(&output)
    );

    // Certified: it serves, the choice view's fills (confidence 1).
    let mut served = Served::start(serve_command(&path));
    let answer = decide(&served).await;
    assert_eq!(answer["answers"]["coarse_cause"]["confidence"], 1.0);

    // A changed view is refused at reload; the certified configuration keeps serving.
    let changed = config("required", "choice_confidence");
    std::fs::write(&path, &changed).unwrap();
    served.signal("HUP");
    assert_logged(&served, "configuration reload refused").await;
    assert_logged(&served, "contract dispatch: stale (questions.coarse_cause.view: \\\"choice\\\" -> \\\"choice_confidence\\\")").await;
    assert!(served.running());
    assert_eq!(
        decide(&served).await["answers"]["coarse_cause"]["confidence"],
        1.0
    );
    // So is the policy taken away while its certificate is still there (it would otherwise
    // serve the contract ungated, without a word).
    let certified = config("required", "choice");
    let ungated = certified.replace(
        "policy = { keep = [\"choice\"], hide = [\"secret\"], max_recovery_gain = 1.0 }",
        "",
    );
    assert_ne!(ungated, certified);
    std::fs::write(&path, &ungated).unwrap();
    served.signal("HUP");
    assert_logged(&served, "contract dispatch: ungated").await;
    assert!(served.running());
    assert_eq!(
        decide(&served).await["answers"]["coarse_cause"]["confidence"],
        1.0
    );
    served.signal("TERM");
    served.exited().await;

    // ... and at start-up, naming the contract and the recipient that holds it.
    std::fs::write(&path, &changed).unwrap();
    let mut refused = serve_command(&path);
    let output = refused.output().unwrap();
    assert!(!output.status.success());
    let refusal = text(&output);
    assert!(refusal.contains("not certified"), "{refusal}");
    assert!(refusal.contains("contract dispatch: stale"), "{refusal}");
    assert!(refusal.contains("recipient desk: stale"), "{refusal}");
    assert!(!refusal.contains("contract merged"), "{refusal}");

    // Advisory: it serves, warns, and the gauges and check-config name what is uncertified.
    std::fs::write(&path, changed.replace("\"required\"", "\"advisory\"")).unwrap();
    let output = run(&["check-config"], &path);
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains(
            "contract dispatch: stale (questions.coarse_cause.view: \"choice\" -> \"choice_confidence\")"
        ),
        "{}",
        text(&output)
    );
    let served = Served::start(serve_command(&path));
    assert_logged(&served, "contract dispatch is served uncertified").await;
    assert_ne!(
        decide(&served).await["answers"]["coarse_cause"]["confidence"],
        Value::Null
    );
    let metrics = served.metrics().await;
    for line in [
        "releasegate_contract_certified{contract=\"dispatch\"} 0",
        "releasegate_contract_certified{contract=\"merged\"} 1",
        "releasegate_recipient_certified{recipient=\"desk\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}: {metrics}");
    }
}

#[test]
fn certificates_need_the_gate_and_the_configured_shape() {
    let dir = scratch("certification-usage");
    let path = dir.join("releasegate.toml");
    std::fs::write(&path, config("off", "choice")).unwrap();
    let output = Command::new(BIN)
        .args(["audit", "--config"])
        .arg(&path)
        .args([
            "--contract",
            "dispatch",
            "--worlds",
            "w.jsonl",
            "--certificate-dir",
            "c",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let output = Command::new(BIN)
        .args(["audit", "--config"])
        .arg(&path)
        .args([
            "--contract",
            "dispatch",
            "--worlds",
            "w.jsonl",
            "--gate",
            "--shape",
            "minimal",
        ])
        .args(["--certificate-dir", "c"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64), "{}", text(&output));
    assert!(
        text(&output).contains("leave out --shape"),
        "{}",
        text(&output)
    );
}

/// A WCPQ contract that keeps every frozen plan is gated on its workflow floor too (the
/// recipient runs its workflows on what it receives); one whose view drops the probabilities or
/// whose fallback changes plans is not.
#[test]
fn a_plan_keeping_wcpq_contract_is_gated_on_its_workflow_floor_too() {
    let dir = scratch("gate-floor");
    let worlds = dir.join("worlds.jsonl");
    simulate(40, 5, &worlds);
    let root = env!("CARGO_MANIFEST_DIR");
    let shipped = std::fs::read_to_string(format!("{root}/config/tuple-bench.toml"))
        .unwrap()
        .replace("\"codebooks/", &format!("\"{root}/config/codebooks/"))
        .replacen(
            "[contracts.delivery]\n",
            "[contracts.delivery]\npolicy = { hide = [\"secret\"], max_recovery_gain = 1.0 }\n",
            1,
        );
    let gate = |toml: &str, name: &str| -> (String, Value) {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        let (_, stdout, value) = gate_audit(&config, "delivery", &worlds);
        (stdout, value["gate"][0].clone())
    };
    let (text, result) = gate(&shipped, "keeps");
    let floor = &result["workflow_floor"];
    assert!(floor["upper"].is_number(), "{result}");
    let line = text
        .lines()
        .find(|l| l.starts_with("gate delivery: "))
        .unwrap();
    assert!(line.contains("; its workflow floor "), "{line}");
    // A view without the probabilities gives the recipient no plans to compute: no floor.
    let (_, choice) = gate(
        &shipped.replacen("view = \"full_native\"", "view = \"choice\"", 1),
        "choice",
    );
    assert!(choice.get("workflow_floor").is_none(), "{choice}");
    // A fallback that sends a choice alone changes plans: no floor binds it.
    let (text, result) = gate(
        &shipped.replacen("fallback = \"native\"", "fallback = \"choice_only\"", 1),
        "choice_only",
    );
    assert!(result.get("workflow_floor").is_none(), "{result}");
    let line = text
        .lines()
        .find(|l| l.starts_with("gate delivery: "))
        .unwrap();
    assert!(!line.contains("workflow floor"), "{line}");
}
