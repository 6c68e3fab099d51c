//! A WCPQ codebook per provider through the binary: `build-codebook --provider` builds each
//! provider's codebook from the worlds it answered, `replay` releases each world with the
//! codebook of its provider, `collect --provider` asks one provider and names it on each world.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::cli::simulate;
use super::helpers::{PROVIDER_KEY, PROVIDER_KEY_ENV, Provider, TestConfig, request, scratch};

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// Two simulated providers and the contract `coarse` asking `providers`: the simulator's
/// delivery question coarsened to three released labels, released by WCPQ with
/// `codebook_lines` (the mechanism table's codebook keys) over workflows of three classes.
fn config(providers: &str, codebook_lines: &str) -> String {
    let delivery = releasegate_sim::simulate::ontology::domain("delivery").unwrap();
    format!(
        "[providers.sim]\nkind = \"simulated\"\n[providers.sim2]\nkind = \"simulated\"\n\
         [contracts.coarse]\n{providers}\n\
         [contracts.coarse.questions.coarse_cause]\n\
         classes = [\"DELAY\", \"ADDRESS\", \"DAMAGE\", \"DELIVERY_RECORD\"]\nview = \"full_native\"\n\
         coarsen = {{ ADDRESS = \"CUSTOMER_SIDE\", DELIVERY_RECORD = \"CUSTOMER_SIDE\" }}\n\
         mechanism = {{ kind = \"wcpq\", fallback = \"native\", {codebook_lines} }}\n\
         workflows = {{ families = [\"selective\", \"asymmetric\"], profiles = [\"authored\"], \
         costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, \
         matrix = [[0, 8, 12], [9, 0, 10], [14, 6, 0], [3, 3, 3]] }} }}\n{}",
        releasegate_sim::simulate::pinned_text_toml(delivery)
    )
}

fn run(args: &[&str], paths: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args);
    for (flag, path) in paths {
        command.arg(flag).arg(path);
    }
    command.output().unwrap()
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The worlds of `bytes` (JSON Lines), each naming `provider` when given; their world and
/// pair ids then start with `PROVIDER-`, so that another simulation's worlds can join them in
/// one file (world ids are unique).
fn answered_by(bytes: &[u8], provider: Option<&str>) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|line| {
            let mut world: Value = serde_json::from_str(line).unwrap();
            if let Some(provider) = provider {
                world["provider"] = provider.into();
                for key in ["world_id", "pair_id"] {
                    let id = format!("{provider}-{}", world[key].as_str().unwrap());
                    world[key] = id.into();
                }
            }
            world.to_string()
        })
        .collect()
}

/// Train-split delivery worlds among `lines`.
fn train_delivery(lines: &[String]) -> u64 {
    lines
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|w| w["split"] == "train" && w["domain"] == "delivery")
        .count() as u64
}

#[test]
fn each_provider_gets_a_codebook_of_its_own_answers_and_replay_uses_it() {
    let dir = scratch("provider-codebooks");
    // The first provider's worlds name none; the second's name it (another seed).
    let first = answered_by(&simulate(20, 4, &dir.join("a.jsonl")), None);
    let second = answered_by(&simulate(20, 9, &dir.join("b.jsonl")), Some("sim2"));
    let worlds = dir.join("worlds.jsonl");
    std::fs::write(
        &worlds,
        format!("{}\n{}\n", first.join("\n"), second.join("\n")),
    )
    .unwrap();
    let both = dir.join("both.toml");
    std::fs::write(
        &both,
        config(
            "providers = [\"sim\", \"sim2\"]",
            "codebook = \"one.json\", codebooks = { sim2 = \"two.json\" }",
        ),
    )
    .unwrap();
    let build = |provider: Option<&str>, out: &str| {
        let mut args = vec!["build-codebook", "--contract", "coarse", "--question"];
        args.extend([
            "coarse_cause",
            "--denominator",
            "8",
            "--pool",
            "grid+training",
        ]);
        if let Some(provider) = provider {
            args.extend(["--provider", provider]);
        }
        let out = dir.join(out);
        let paths = [
            ("--config", &*both),
            ("--worlds", &*worlds),
            ("--out", &*out),
        ];
        run(&args, &paths)
    };
    let one = json(&build(None, "one.json"));
    assert_eq!(one["provider"], "sim");
    assert_eq!(one["training_answers"], train_delivery(&first));
    let other_train = second
        .iter()
        .filter(|l| l.contains("\"split\":\"train\""))
        .count();
    assert_eq!(one["skipped_train_worlds"]["other_provider"], other_train);
    let two = json(&build(Some("sim2"), "two.json"));
    assert_eq!(two["provider"], "sim2");
    assert_eq!(two["training_answers"], train_delivery(&second));
    assert_eq!(two["class_sets"][0].as_array().unwrap().len(), 3);
    assert_ne!(
        std::fs::read(dir.join("one.json")).unwrap(),
        std::fs::read(dir.join("two.json")).unwrap()
    );
    let gone = build(Some("gone"), "gone.json");
    assert_eq!(gone.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains("contract `coarse` has no provider `gone`"),
        "{stderr}"
    );

    // Replay: each world with its provider's codebook, exactly as a contract naming only
    // that provider releases it.
    let replay = |config: &Path, input: &Path, out: &str| {
        let out = dir.join(out);
        let args = ["replay", "--contract", "coarse"];
        let summary = json(&run(
            &args,
            &[("--config", config), ("--worlds", input), ("--out", &out)],
        ));
        (summary, std::fs::read_to_string(out).unwrap())
    };
    let (summary, released) = replay(&both, &worlds, "released.jsonl");
    assert_eq!(summary["worlds_by_provider"]["sim"], first.len());
    assert_eq!(summary["worlds_by_provider"]["sim2"], second.len());
    assert_eq!(summary["skipped"]["total"], 0);
    let only = dir.join("only.toml");
    std::fs::write(
        &only,
        config("provider = \"sim2\"", "codebook = \"two.json\""),
    )
    .unwrap();
    let input = dir.join("second.jsonl");
    std::fs::write(&input, second.join("\n")).unwrap();
    let (_, alone) = replay(&only, &input, "alone.jsonl");
    // The same releases, but for the model: several providers release the model the
    // request asked for, one provider its own.
    // (Written out again, so that the order of members counts as well.)
    let asked_model = |line: &str| {
        let mut world: Value = serde_json::from_str(line).unwrap();
        if world["response"].get("model").is_some() {
            world["response"]["model"] = world["request"]["model"].clone();
        }
        serde_json::to_string(&world).unwrap()
    };
    let released: Vec<String> = released.lines().map(asked_model).collect();
    let alone: Vec<String> = alone.lines().map(asked_model).collect();
    assert!(released[first.len()..] == alone[..]);
    // A world naming a provider the contract does not list is skipped and counted.
    std::fs::write(&input, second.join("\n").replace("\"sim2\"", "\"gone\"")).unwrap();
    let (summary, written) = replay(&both, &input, "gone.jsonl");
    assert_eq!(summary["skipped"]["total"], second.len());
    assert_eq!(
        summary["skipped"]["by_reason"]["provider_not_in_contract"],
        second.len()
    );
    assert!(written.is_empty());
}

#[test]
fn a_contract_without_a_codebook_for_each_provider_is_refused() {
    let dir = scratch("provider-codebooks-config");
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        config("providers = [\"sim\", \"sim2\"]", "codebook = \"one.json\""),
    )
    .unwrap();
    let worlds = dir.join("w.jsonl");
    simulate(2, 1, &worlds);
    let out = dir.join("out.jsonl");
    let output = run(
        &["replay", "--contract", "coarse"],
        &[("--config", &path), ("--worlds", &worlds), ("--out", &out)],
    );
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("contracts.coarse.questions.coarse_cause.mechanism.codebooks: provider `sim2` of the contract has no codebook"),
        "{stderr}"
    );
}

/// `collect --provider` asks that provider of the contract and names it on every world; the
/// default is the first provider; a provider the contract does not list is a usage error.
#[tokio::test(flavor = "multi_thread")]
async fn collect_asks_the_provider_named_and_writes_it_on_each_world() {
    let dir = scratch("collect-provider");
    let (upstream, base_url) = super::helpers::spawn_upstream().await;
    // `down` (first, unreachable) and `up` (the local upstream).
    let text = TestConfig {
        provider: Provider::Url(base_url),
        provider_key: true,
        provider_extra: "timeout_ms = 2000".into(),
        main: true,
        ..TestConfig::bare()
    }
    .toml("")
    .replacen(
        "[providers.up]",
        "[providers.down]\nkind = \"systemone\"\nbase_url = \"http://127.0.0.1:1\"\ntimeout_ms = 500\n[providers.up]",
        1,
    )
    .replacen(
        "[contracts.main]\nprovider = \"up\"",
        "[contracts.main]\nproviders = [\"down\", \"up\"]",
        1,
    );
    std::fs::write(dir.join("c.toml"), text).unwrap();
    let requests = format!(
        "{{\"id\": \"a\", \"request\": {}}}\n{{\"id\": \"b\", \"request\": {}}}\n",
        request(),
        request()
    );
    std::fs::write(dir.join("requests.jsonl"), requests).unwrap();
    let collect = |provider: Option<&'static str>, out: &'static str| {
        let mut command = Command::new(BIN);
        command
            .args([
                "collect",
                "--contract",
                "main",
                "--retries",
                "0",
                "--config",
            ])
            .arg(dir.join("c.toml"))
            .arg("--requests")
            .arg(dir.join("requests.jsonl"))
            .arg("--out")
            .arg(dir.join(out))
            .env(PROVIDER_KEY_ENV, PROVIDER_KEY);
        if let Some(provider) = provider {
            command.args(["--provider", provider]);
        }
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let output = collect(Some("up"), "up.jsonl").await.unwrap();
    let summary = json(&output);
    assert_eq!(summary["provider"], "up");
    assert_eq!(summary["collected"], 2);
    assert_eq!(upstream.seen.lock().unwrap().len(), 2);
    let worlds = std::fs::read_to_string(dir.join("up.jsonl")).unwrap();
    for line in worlds.lines() {
        let world: Value = serde_json::from_str(line).unwrap();
        assert_eq!(world["provider"], "up", "{line}");
    }
    // The default is the first provider (here unreachable: every request fails).
    let output = collect(None, "down.jsonl").await.unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(upstream.seen.lock().unwrap().len(), 2);
    let errors = std::fs::read_to_string(dir.join("down.jsonl.errors.jsonl")).unwrap();
    assert!(errors.contains("connect"), "{errors}");
    // A provider the contract does not list; resuming a file another provider answered.
    let output = collect(Some("gone"), "gone.jsonl").await.unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("contract `main` has no provider `gone` (its providers: down, up)"),
        "{stderr}"
    );
    let output = collect(Some("down"), "up.jsonl").await.unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("was answered by `up`, not `down`"),
        "{stderr}"
    );
}

/// Serving: a request the first provider cannot take fails over to the second, and its
/// answer is released with the second provider's codebook, byte for byte as a contract
/// naming only the second provider releases it.
#[tokio::test]
async fn a_failover_is_released_with_the_answering_providers_codebook() {
    let dir = scratch("failover-codebooks");
    let first = answered_by(&simulate(20, 4, &dir.join("a.jsonl")), None);
    let second = answered_by(&simulate(20, 9, &dir.join("b.jsonl")), Some("sim2"));
    let worlds = dir.join("worlds.jsonl");
    std::fs::write(
        &worlds,
        format!("{}\n{}\n", first.join("\n"), second.join("\n")),
    )
    .unwrap();
    let both = dir.join("both.toml");
    let lines = "codebook = \"one.json\", codebooks = { sim2 = \"two.json\" }";
    std::fs::write(&both, config("providers = [\"sim\", \"sim2\"]", lines)).unwrap();
    for (provider, out) in [("sim", "one.json"), ("sim2", "two.json")] {
        let args = [
            "build-codebook",
            "--contract",
            "coarse",
            "--question",
            "coarse_cause",
            "--denominator",
            "8",
            "--pool",
            "grid+training",
            "--provider",
            provider,
        ];
        json(&run(
            &args,
            &[
                ("--config", &*both),
                ("--worlds", &*worlds),
                ("--out", &*dir.join(out)),
            ],
        ));
    }
    // Nothing listens on the first provider's port: every request fails over.
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let serve = |name: &str, providers: &str, codebooks: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [providers.down]\nkind = \"systemone\"\nbase_url = \"http://{refused}\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"coarse\"]\n{}",
            releasegate_proxy::auth::hash_key(super::helpers::CLIENT_KEY),
            config(providers, codebooks)
        );
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        releasegate_proxy::load::load(Some(&path)).unwrap()
    };
    let failover = serve(
        "failover.toml",
        "providers = [\"down\", \"sim2\"]",
        "codebooks = { down = \"one.json\", sim2 = \"two.json\" }",
    );
    let alone = serve(
        "alone.toml",
        "provider = \"sim2\"",
        "codebook = \"two.json\"",
    );
    let other = serve(
        "other.toml",
        "provider = \"sim2\"",
        "codebook = \"one.json\"",
    );
    let mut apps = Vec::new();
    for config in [failover, alone, other] {
        apps.push(super::helpers::start(config, super::helpers::Upstream::default()).await);
    }
    let mut differs = 0;
    for line in second.iter().take(40) {
        let world: Value = serde_json::from_str(line).unwrap();
        if world["domain"] != "delivery" {
            continue;
        }
        let mut bodies = Vec::new();
        for app in &apps {
            let response = app.post(&world["request"]).await;
            assert_eq!(response.status(), 200);
            let bytes = response.bytes().await.unwrap().to_vec();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            // Several providers release the model the caller asked for, one its own: the
            // bytes are compared with the model the request asked for in each.
            if bodies.is_empty() {
                assert_eq!(body["model"], world["request"]["model"]);
            }
            let model = |value: &Value| format!("\"model\":{value}");
            bodies.push(String::from_utf8_lossy(&bytes).replacen(
                &model(&body["model"]),
                &model(&world["request"]["model"]),
                1,
            ));
        }
        assert_eq!(bodies[0], bodies[1], "{}", world["world_id"]);
        differs += usize::from(bodies[0] != bodies[2]);
    }
    // The other provider's codebook would have released some of them otherwise.
    assert!(differs > 0);
    for app in apps {
        app.stop().await;
    }
}
