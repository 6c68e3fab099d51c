use std::io::Cursor;

use serde_json::{Value, json};

use super::*;
use releasegate_core::config::Config;

fn contract() -> std::sync::Arc<Contract> {
    let text = "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nusage = \"drop\"\n\
        [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n";
    from_toml(text).unwrap().contracts()["c"].clone()
}

fn world(id: &str, question: &str, answer: Value) -> String {
    json!({
        "world_id": id, "pair_id": "p1", "split": "train", "domain": "d",
        "request": {"model": "m", "state": "s", "questions": {question: {"type": "choice", "criteria": {"A": null, "B": null}}}},
        "response": {"model": "m", "answers": {question: answer}, "usage": {"input_tokens": 3, "output_tokens": 1}},
        "labels": {"question": question, "T": "A", "S": "x", "hypotheses": ["x", "y"]},
        "custom_key": {"kept": true}
    })
    .to_string()
}

fn run(input: &str) -> Result<(Summary, Vec<Value>), Error> {
    let reader = Reader::new(Cursor::new(input.as_bytes().to_vec()));
    let mut writer = Writer::new(Vec::new());
    let summary = replay(&contract(), reader, &mut writer, &mut |_| {})?;
    let bytes = writer.into_inner()?;
    let lines = String::from_utf8(bytes).unwrap();
    Ok((
        summary,
        lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    ))
}

#[test]
fn replay_releases_rejects_and_keeps_unknown_keys() {
    let good = json!({"type": "choice", "choice": "B", "confidence": 0.4, "probabilities": {"A": 0.3, "B": 0.7}});
    let bad = json!({"type": "choice", "choice": "A", "confidence": 0.4, "probabilities": {"A": 0.9, "B": 0.7}});
    let input = [
        world("w0", "q", good.clone()),
        String::new(),
        world("w1", "q", bad),
        world("w2", "other", good),
    ]
    .join("\n");
    let (summary, out) = run(&input).unwrap();
    assert_eq!(summary.worlds_read, 3);
    assert_eq!(summary.worlds_written, 3);
    assert_eq!(summary.answers_released["q"]["choice"], 1);
    assert_eq!(summary.rejected_answers.total, 1);
    assert_eq!(summary.rejected_answers.worlds[0].line, 3);
    assert_eq!(summary.rejected_answers.by_reason["probability_sum"], 1);
    assert_eq!(summary.rejected_requests.worlds[0].line, 4);
    assert_eq!(summary.mechanisms["q"].kind, "none");
    assert_eq!(
        out[0]["response"],
        json!({"model": "m", "answers": {"q": {"type": "choice", "choice": "B",
            "probabilities": {"A": 0.0, "B": 1.0}, "confidence": 1.0}},
            "usage": {"input_tokens": 0, "output_tokens": 0}})
    );
    assert_eq!(out[0]["custom_key"], json!({"kept": true}));
    assert_eq!(out[0]["labels"]["S"], json!("x"));
    assert_eq!(
        out[1]["response"]["detail"]["error_type"],
        json!("invalid_upstream_answer")
    );
    // A question outside the contract is not released.
    assert_eq!(
        out[2]["response"]["detail"]["error_type"],
        json!("question_not_released")
    );
}

#[test]
fn a_malformed_line_is_an_error_with_its_line_number() {
    let good = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.3, "B": 0.7}});
    let input = format!("{}\n{{broken\n", world("w0", "q", good));
    let error = run(&input).unwrap_err();
    assert!(error.to_string().contains("line 2"), "{error}");
}

/// `world(id, "q", answer)` in pair `pair_id` and `split`.
fn world_in(id: &str, pair_id: &str, split: &str) -> String {
    let answer = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.3, "B": 0.7}});
    let mut value: Value = serde_json::from_str(&world(id, "q", answer)).unwrap();
    value["pair_id"] = json!(pair_id);
    value["split"] = json!(split);
    value.to_string()
}

#[test]
fn a_repeated_world_id_or_a_pair_across_splits_is_an_error_naming_both_lines() {
    // Far apart, so that the two worlds are parsed by different workers or batches.
    let mut lines: Vec<String> = (0..BATCH + 10)
        .map(|i| world_in(&format!("w{i}"), &format!("p{i}"), "train"))
        .collect();
    let mut repeated = lines.clone();
    repeated.push(world_in("w3", "other", "train"));
    let error = run(&repeated.join("\n")).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "line {}: world id `w3` repeats the world of line 4 (world ids are unique)",
            BATCH + 11
        )
    );
    lines.push(world_in("mate", "p5", "test"));
    let error = run(&lines.join("\n")).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "line {}: pair `p5` has a world in split test here and one in split train on \
             line 6 (both worlds of a pair share a split)",
            BATCH + 11
        )
    );
}

#[test]
fn a_world_naming_the_first_provider_repeats_one_naming_none() {
    let mut named: Value = serde_json::from_str(&world_in("w0", "other", "train")).unwrap();
    named["provider"] = json!("p");
    let input = [world_in("w0", "p0", "train"), named.to_string()].join("\n");
    let error = run(&input).unwrap_err();
    assert_eq!(
        error.to_string(),
        "line 2: world id `w0` repeats the world of line 1 (world ids are unique)"
    );
}

#[test]
fn batches_keep_input_order_and_line_numbers() {
    let good = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.3, "B": 0.7}});
    let bad = json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.9, "B": 0.7}});
    let n = BATCH + 300;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            world(
                &format!("w{i}"),
                "q",
                if i % 500 == 7 {
                    bad.clone()
                } else {
                    good.clone()
                },
            )
        })
        .collect();
    let (summary, out) = run(&lines.join("\n")).unwrap();
    assert_eq!(summary.worlds_read as usize, n);
    let ids: Vec<&str> = out
        .iter()
        .map(|w| w["world_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect::<Vec<_>>());
    let rejected: Vec<usize> = summary
        .rejected_answers
        .worlds
        .iter()
        .map(|r| r.line)
        .collect();
    let expected_lines: Vec<usize> = (0..n).filter(|i| i % 500 == 7).map(|i| i + 1).collect();
    assert_eq!(rejected, expected_lines);
}

/// The delivery contract of `config/tuple-bench.toml` with `DAMAGE` withheld,
/// replayed over the simulator's default worlds. WCPQ used to verify the
/// unwithheld form and send the withheld one (plan agreement 0.848, a largest
/// realized-cost difference of 19.6); it now verifies the bytes that go out.
#[test]
fn withholding_under_wcpq_keeps_every_plan_on_the_simulators_worlds() {
    let (_, input, shipped) = tuple_bench();
    let shipped = shipped.replace(
        "[contracts.delivery.questions.coarse_cause]\n",
        "[contracts.delivery.questions.coarse_cause]\nwithhold_labels = [\"DAMAGE\"]\n",
    );
    for (fallback, evaluated) in [("native", 480), ("deny", 479)] {
        let text = shipped.replace(
            "fallback = \"native\"",
            &format!("fallback = \"{fallback}\""),
        );
        let config = from_toml(&text).unwrap();
        let contract = &config.contracts()["delivery"];
        let mut writer = Writer::new(Vec::new());
        let summary = replay(
            contract,
            Reader::new(Cursor::new(input.clone().into_bytes())),
            &mut writer,
            &mut |_| {},
        )
        .unwrap();
        let released = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        let withheld = released
            .lines()
            .filter(|l| l.contains("\"choice\":\"DAMAGE\""))
            .count();
        assert!(withheld > 50, "{withheld} withheld selections");
        let mechanism = &summary.mechanisms["coarse_cause"];
        assert_eq!(mechanism.answers, 480);
        let covered = mechanism.covered.unwrap();
        assert!(covered >= 470, "{fallback}: {covered} covered");
        // Coverage per split adds up to the total, and every split of the worlds appears.
        let splits = &mechanism.coverage_by_split;
        assert_eq!(
            splits.keys().map(String::as_str).collect::<Vec<_>>(),
            ["test", "train", "validation"]
        );
        assert_eq!(splits.values().map(|s| s.answers).sum::<u64>(), 480);
        assert_eq!(splits.values().map(|s| s.covered).sum::<u64>(), covered);
        for split in splits.values() {
            assert_eq!(split.coverage, split.covered as f64 / split.answers as f64);
        }
        let workflows = mechanism.workflows.as_ref().unwrap();
        // Every covered answer (and the native fallback) is evaluated; a denied one is not.
        assert_eq!(workflows.answers, evaluated, "{fallback}");
        assert_eq!(workflows.plan_agreement, 1.0, "{fallback}");
        assert_eq!(workflows.max_realized_cost_difference, 0.0, "{fallback}");
    }
}

/// The delivery contract of `config/tuple-bench.toml` under a WCPQ budget: the
/// summary reports the worst per-output increase next to plan agreement, and it
/// stays within α·κ_j (strict: 0).
#[test]
fn a_wcpq_budget_reports_the_worst_cost_increase() {
    let (worlds, input, shipped) = tuple_bench();
    let run_with = |shipped: &str, admissibility: &str| {
        let text = shipped.replace(
            "codebook = \"",
            &format!("admissibility = {admissibility}, codebook = \""),
        );
        let config = from_toml(&text).unwrap();
        let mut writer = Writer::new(Vec::new());
        let summary = replay(
            &config.contracts()["delivery"],
            Reader::new(Cursor::new(input.clone().into_bytes())),
            &mut writer,
            &mut |_| {},
        )
        .unwrap();
        summary.mechanisms["coarse_cause"]
            .workflows
            .clone()
            .unwrap()
    };
    let run = |admissibility: &str| run_with(&shipped, admissibility);
    // A codebook learned for α = 0.2 from the train split, as `build-codebook --budget 0.2` does.
    let config = from_toml(&shipped).unwrap();
    let contract = &config.contracts()["delivery"];
    let rule = &contract.questions()["coarse_cause"];
    let releasegate_core::mechanism::Mechanism::Wcpq(wcpq) = &rule.mechanism() else {
        panic!("not wcpq")
    };
    let spec = rule.workflows().unwrap();
    let responses: Vec<releasegate_core::codebook::Response> = worlds
        .iter()
        .filter(|w| w.split == releasegate_sim::worlds::Split::Train)
        .filter_map(|w| releasegate_sim::dataset::native_answer(contract, "coarse_cause", w).ok())
        .enumerate()
        .map(|(i, a)| releasegate_core::codebook::Response {
            pair_id: format!("{i}"),
            native: releasegate_core::workflow::Release {
                choice: a.vector.choice,
                probabilities: Some(a.vector.probabilities),
                confidence: a.vector.confidence,
            },
            public: Vec::new(),
        })
        .collect();
    assert!(responses.len() > 50);
    let (learned, _) = releasegate_core::codebook::learn(
        wcpq.mapper.codebook(),
        spec,
        &responses,
        &[],
        &releasegate_core::codebook::Settings::new(0.2, 64),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("learned.json");
    std::fs::write(&path, learned.to_json_bytes()).unwrap();
    let strict = run("\"strict\"");
    assert_eq!(strict.plan_agreement, 1.0);
    assert_eq!(strict.max_realized_cost_increase, 0.0);
    assert_eq!(strict.max_relative_cost_increase, 0.0);
    let shipped = shipped.replace(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/codebooks/tuple-bench-coarse_cause.json"
        ),
        &path.display().to_string(),
    );
    let bounded = run_with(&shipped, "{ budget = 0.2 }");
    assert!(bounded.plan_agreement < 1.0, "{bounded:?}");
    assert!(bounded.max_realized_cost_increase > 0.0, "{bounded:?}");
    assert!(bounded.max_relative_cost_increase <= 0.2, "{bounded:?}");
    let summary = serde_json::to_value(&bounded).unwrap();
    assert!(summary["max_relative_cost_increase"].is_number());
}

/// Validates TOML text, reading the files it names relative to the repository root.
fn from_toml(text: &str) -> Result<Config, releasegate_core::config::Error> {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    Config::from_toml_with(
        text,
        "inline",
        root,
        releasegate_core::config::Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        },
    )
}

/// The simulator's default worlds, the same as JSON Lines, and `config/tuple-bench.toml` with
/// its codebook paths made absolute.
fn tuple_bench() -> (Vec<releasegate_sim::worlds::World>, String, String) {
    let worlds =
        releasegate_sim::simulate::generate(&releasegate_sim::simulate::Options::default())
            .unwrap();
    let lines: Vec<String> = worlds.iter().map(|w| w.to_line().unwrap()).collect();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/tuple-bench.toml"
    ))
    .unwrap()
    .replace(
        "codebooks/",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/codebooks/"),
    );
    let input = lines.join("\n");
    (worlds, input, shipped)
}

/// Replay asks what the proxy asks: a saved request whose text is not the contract's is
/// refused as the proxy refuses it, and the released answers are the proxy's (the score
/// legend is the contract's text, whatever the saved request spelled).
#[test]
fn replay_reads_the_pinned_question_as_the_proxy_sends_it() {
    let text = "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n\
        [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\ninstructions = \"Which?\"\n\
        [contracts.c.questions.s]\nclasses = [\"0\", \"1\"]\nview = \"choice\"\n\
        descriptions = { \"0\" = \"low\", \"1\" = \"high\" }\n";
    let contract = from_toml(text).unwrap().contracts()["c"].clone();
    let line = |id: &str, instructions: &str| {
        json!({
            "world_id": id, "pair_id": "p1", "split": "test", "domain": "d",
            "request": {"model": "m", "state": "s", "questions": {
                "q": {"type": "choice", "instructions": instructions, "criteria": {"B": null, "A": null}},
                "s": {"type": "score", "criteria": [null, "high"]}}},
            "response": {"model": "m", "answers": {
                "q": {"type": "choice", "choice": "B", "confidence": 0.4, "probabilities": {"A": 0.3, "B": 0.7}},
                "s": {"type": "score", "score": 0.2, "confidence": 0.6, "legend": {"0": "x"}, "probabilities": {"0": 0.8, "1": 0.2}}},
                "usage": {}}
        })
        .to_string()
    };
    let input = [line("w0", "Which?"), line("w1", "Which one is SECRET?")].join("\n");
    let mut writer = Writer::new(Vec::new());
    let summary = replay(
        &contract,
        Reader::new(Cursor::new(input.into_bytes())),
        &mut writer,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(summary.rejected_requests.total, 1);
    assert_eq!(summary.rejected_requests.worlds[0].line, 2);
    assert_eq!(
        summary.rejected_requests.by_reason["question_text_mismatch"],
        1
    );
    let out = String::from_utf8(writer.into_inner().unwrap()).unwrap();
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["response"]["answers"]["s"]["legend"],
        json!({"0": "low", "1": "high"})
    );
    for line in out.lines() {
        let world: Value = serde_json::from_str(line).unwrap();
        assert!(!world["response"].to_string().contains("SECRET"), "{line}");
    }
}

/// Replays `worlds` (JSON Lines) under `contract`: the summary and the written lines.
fn replay_lines(contract: &Contract, worlds: &[String]) -> (Summary, Vec<String>) {
    let mut writer = Writer::new(Vec::new());
    let input = worlds.join("\n").into_bytes();
    let summary = replay(
        contract,
        Reader::new(Cursor::new(input)),
        &mut writer,
        &mut |_| {},
    )
    .unwrap();
    let out = String::from_utf8(writer.into_inner().unwrap()).unwrap();
    (summary, out.lines().map(str::to_string).collect())
}

/// A second provider's codebook for the delivery question, built as `build-codebook
/// --denominator 10 --pool grid+training` builds it from the train split of the simulator's
/// worlds of another seed.
fn second_codebook(shipped: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let worlds = releasegate_sim::simulate::generate(&releasegate_sim::simulate::Options {
        pairs_per_domain: 60,
        seed: 11,
    })
    .unwrap();
    let config = from_toml(shipped).unwrap();
    let contracts = [config.contracts()["delivery"].clone()];
    let rule = &contracts[0].questions()["coarse_cause"];
    let spec = rule.workflows().unwrap();
    let mut training = releasegate_sim::dataset::TrainingSet::default();
    for world in &worlds {
        training.add(&contracts, ("coarse_cause", "sim"), spec, world, false);
    }
    assert!(training.answers.len() > 20);
    let built = releasegate_core::codebook::build(
        rule.released_labels(),
        10,
        spec,
        &training.answers,
        "seed 11".into(),
    )
    .unwrap();
    let path = dir.join("second.json");
    std::fs::write(&path, built.codebook.to_json_bytes()).unwrap();
    path
}

/// Worlds answered by two providers, each released with its own codebook: every released
/// line is byte for byte the one a contract naming only that provider writes.
#[test]
fn each_world_is_released_with_the_codebook_of_the_provider_that_answered_it() {
    let (worlds, _, shipped) = tuple_bench();
    let dir = tempfile::tempdir().unwrap();
    let second = second_codebook(&shipped, dir.path());
    let with_sim2 = shipped.replacen(
        "[providers.sim]",
        "[providers.sim2]\nkind = \"simulated\"\n[providers.sim]",
        1,
    );
    let both = with_sim2
        .replacen("provider = \"sim\"", "providers = [\"sim\", \"sim2\"]", 1)
        .replacen(
            "fallback = \"native\" }",
            &format!(
                "fallback = \"native\", codebooks = {{ sim2 = \"{}\" }} }}",
                second.display()
            ),
            1,
        );
    let only_sim2 = with_sim2.replacen("provider = \"sim\"", "provider = \"sim2\"", 1);
    let only_sim2 = only_sim2.replacen(
        concat!(
            "codebook = \"",
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/codebooks/tuple-bench-coarse_cause.json"
        ),
        &format!("codebook = \"{}", second.display()),
        1,
    );
    let contract = |text: &str| from_toml(text).unwrap().contracts()["delivery"].clone();
    let (both, only_sim, only_sim2) = (contract(&both), contract(&shipped), contract(&only_sim2));
    assert_eq!(both.providers(), ["sim", "sim2"]);
    let sha256 = |c: &Contract| match c.questions()["coarse_cause"].mechanism() {
        releasegate_core::mechanism::Mechanism::Wcpq(wcpq) => wcpq.codebook_sha256.clone(),
        _ => String::new(),
    };
    assert_eq!(
        sha256(both.for_provider("sim2").unwrap()),
        sha256(&only_sim2)
    );
    assert_ne!(sha256(&only_sim2), sha256(&only_sim));

    // Every other delivery world was answered by sim2; the others name no provider (sim's).
    let mut sim_lines = Vec::new();
    let mut sim2_lines = Vec::new();
    let mut mixed = Vec::new();
    for (index, world) in worlds.iter().filter(|w| w.domain == "delivery").enumerate() {
        let mut world = world.clone();
        if index % 2 == 0 {
            world.provider = Some("sim2".into());
            sim2_lines.push(world.to_line().unwrap());
        } else {
            sim_lines.push(world.to_line().unwrap());
        }
        mixed.push(world.to_line().unwrap());
    }
    // A world of its own (ids are unique), answered by a provider the contract does not list.
    let mut gone = worlds[0].clone();
    gone.world_id = "gone-w0".into();
    gone.pair_id = "gone".into();
    gone.provider = Some("gone".into());
    mixed.insert(3, gone.to_line().unwrap());

    let (summary, out) = replay_lines(&both, &mixed);
    assert_eq!(summary.worlds_read as usize, mixed.len());
    assert_eq!(summary.worlds_written as usize, mixed.len() - 1);
    assert_eq!(summary.skipped.total, 1);
    assert_eq!(summary.skipped.worlds[0].line, 4);
    assert_eq!(summary.skipped.by_reason["provider_not_in_contract"], 1);
    assert_eq!(summary.worlds_by_provider["sim"], sim_lines.len() as u64);
    assert_eq!(summary.worlds_by_provider["sim2"], sim2_lines.len() as u64);
    let (_, by_sim) = replay_lines(&only_sim, &sim_lines);
    let (_, by_sim2) = replay_lines(&only_sim2, &sim2_lines);
    let (expected_sim2, expected_sim): (Vec<&String>, Vec<&String>) = out
        .iter()
        .partition(|line| line.contains("\"provider\":\"sim2\""));
    // The same releases, but for the model: a contract of several providers releases the
    // model the request asked for, a contract of one its provider's.
    // (Written out again, so that the order of members counts as well.)
    let asked_model = |lines: Vec<&String>| -> Vec<String> {
        lines
            .into_iter()
            .map(|line| {
                let mut world: Value = serde_json::from_str(line).unwrap();
                if world["response"].get("model").is_some() {
                    world["response"]["model"] = world["request"]["model"].clone();
                }
                serde_json::to_string(&world).unwrap()
            })
            .collect()
    };
    // (Compared as booleans: a failure would print hundreds of worlds.)
    assert!(asked_model(expected_sim) == asked_model(by_sim.iter().collect()));
    assert!(asked_model(expected_sim2) == asked_model(by_sim2.iter().collect()));
    // The codebooks release differently: sim2's answers under sim's codebook are other bytes.
    let sim2_under_sim: Vec<String> = sim2_lines
        .iter()
        .map(|line| line.replace(",\"provider\":\"sim2\"", ""))
        .collect();
    let (_, under_sim) = replay_lines(&only_sim, &sim2_under_sim);
    assert_eq!(under_sim.len(), by_sim2.len());
    let differing = by_sim2
        .iter()
        .zip(&under_sim)
        .filter(|(a, b)| a.replace(",\"provider\":\"sim2\"", "") != **b)
        .count();
    assert!(differing > 10, "{differing} of {} differ", by_sim2.len());
}
