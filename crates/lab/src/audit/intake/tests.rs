//! The audit reads complete and minimal releases identically.

use std::sync::Arc;

use super::*;
use crate::audit::ReleasedUsage;
use releasegate_core::config::Config as AppConfig;
use releasegate_core::contract::Shape;
use releasegate_sim::simulate;

/// The shipped offline contracts (WCPQ over the pooled codebook), in `shape`.
fn contracts(shape: Shape) -> Vec<Arc<Contract>> {
    let config_dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config"));
    let text = std::fs::read_to_string(config_dir.join("tuple-bench.toml")).unwrap();
    let config = AppConfig::from_toml_with(
        &text,
        "tuple-bench.toml",
        config_dir,
        releasegate_core::config::Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        },
    )
    .unwrap();
    ["delivery", "equipment", "it_ops"]
        .iter()
        .map(|name| Arc::new(config.contract(name).unwrap().with_shape(shape)))
        .collect()
}

fn candidates() -> Vec<CandidateRelease> {
    let mut out: Vec<CandidateRelease> = View::ALL
        .iter()
        .map(|&view| CandidateRelease::uniform(view.as_str(), Some(view), Some(Mechanism::None)))
        .collect();
    out.push(CandidateRelease::uniform(
        "wcpq (contract)",
        Some(View::FullNative),
        None,
    ));
    for (name, mechanism) in [
        (
            "top_k",
            Mechanism::TopK {
                k: 2,
                confidence: releasegate_core::mechanism::ConfidenceSource::Derived,
            },
        ),
        (
            "quantize",
            Mechanism::Quantize {
                step: 0.1,
                confidence: releasegate_core::mechanism::ConfidenceSource::Derived,
            },
        ),
    ] {
        for view in [View::FullProbabilities, View::FullNative] {
            out.push(CandidateRelease::uniform(
                format!("{name} {view}"),
                Some(view),
                Some(mechanism.clone()),
            ));
        }
    }
    out
}

#[test]
fn complete_and_minimal_releases_give_the_same_audit_input_and_recovery() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 30,
        seed: 4,
    })
    .unwrap();
    let (complete, complete_intake) = build(
        &contracts(Shape::Complete),
        &worlds,
        &candidates(),
        Reading::Released,
        9,
    )
    .unwrap();
    let (minimal, minimal_intake) = build(
        &contracts(Shape::Minimal),
        &worlds,
        &candidates(),
        Reading::Released,
        9,
    )
    .unwrap();
    // The bodies differ (fills, left-out answers) ...
    let delivery = &contracts(Shape::Complete)[0];
    let world = &worlds[0];
    let asked = wire::check_request(&world.request, delivery).unwrap();
    let body = |shape: Shape, view: View| {
        let contract = delivery
            .with_release(view, Some(&Mechanism::None))
            .unwrap()
            .with_shape(shape);
        let mut rng = Rng::new(0);
        let mut options = Options {
            rng: &mut rng,
            evaluate: false,
        };
        release::release(&contract, &asked, &world.response, &mut options)
            .unwrap()
            .to_bytes()
    };
    for view in [
        View::NoOutput,
        View::Choice,
        View::ChoiceConfidence,
        View::FullProbabilities,
    ] {
        assert_ne!(
            body(Shape::Complete, view),
            body(Shape::Minimal, view),
            "{view}"
        );
    }
    // ... but the attacker's features, the recipients' readings and so the costs are equal.
    assert_eq!(complete, minimal);
    assert_eq!(complete_intake.mechanisms, minimal_intake.mechanisms);
    assert_eq!(
        complete_intake.recipient_posteriors,
        minimal_intake.recipient_posteriors
    );
    // Equal inputs give equal recovery: the audit is a deterministic function of its
    // input (`audit::tests`), so running it here would only repeat that check.
}

#[test]
fn an_attacker_reading_the_fills_sees_the_same_in_both_shapes() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 30,
        seed: 4,
    })
    .unwrap();
    let read = |shape: Shape, reading: Reading| {
        build(&contracts(shape), &worlds, &candidates(), reading, 9)
            .unwrap()
            .0
    };
    let complete = read(Shape::Complete, Reading::WithFills);
    assert_eq!(complete, read(Shape::Minimal, Reading::WithFills));
    // The fills are features now: the choice view carries the one-hot vector and confidence 1.
    let released = read(Shape::Complete, Reading::Released);
    assert_ne!(complete, released);
    let choice = complete
        .releases
        .iter()
        .find(|r| r.name == "choice")
        .unwrap();
    for example in &choice.examples {
        let hot = example.release.choice.unwrap();
        let p = example.release.probabilities.as_ref().unwrap();
        assert!(
            p.iter()
                .enumerate()
                .all(|(i, v)| *v == Some(if i == hot { 1.0 } else { 0.0 }))
        );
        assert_eq!(example.release.confidence, Some(1.0));
    }
}

#[test]
fn the_candidates_are_the_views_the_contracts_own_release_and_the_mechanisms() {
    let names = |candidates: &[CandidateRelease]| {
        candidates
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let wcpq = contracts(Shape::Complete);
    // Every view, then the contracts' own WCPQ release.
    let all = super::candidates(None, &[], &wcpq, 1).unwrap();
    let mut expected: Vec<String> = View::ALL.iter().map(|v| v.as_str().to_string()).collect();
    expected.push("wcpq (contract)".into());
    assert_eq!(names(&all), expected);
    assert!(
        all[..5]
            .iter()
            .all(|c| matches!(c.mechanism, Some(Mechanism::None)))
    );
    assert!(all[5].view.is_none() && all[5].mechanism.is_none());
    // Views as named; a contract without a mechanism adds no release of its own; each
    // mechanism under full_native, named by its trimmed spec.
    let plain: Vec<Arc<Contract>> = wcpq
        .iter()
        .map(|c| {
            Arc::new(
                c.with_release(View::Choice, Some(&Mechanism::None))
                    .unwrap(),
            )
        })
        .collect();
    let views = vec![" choice".to_string(), "full_native".to_string()];
    let mechanisms = vec!["top_k=3".to_string(), " quantize ".to_string()];
    let some = super::candidates(Some(&views), &mechanisms, &plain, 1).unwrap();
    assert_eq!(
        names(&some),
        ["choice", "full_native", "top_k=3", "quantize"]
    );
    assert_eq!(some[2].view, Some(View::FullNative));
    assert!(matches!(
        some[2].mechanism,
        Some(Mechanism::TopK { k: 3, .. })
    ));
    // Errors name what is unknown.
    let error = super::candidates(Some(&["rainbow".to_string()]), &[], &plain, 1).unwrap_err();
    assert_eq!(error, "unknown view `rainbow`");
    let error = super::candidates(None, &["blur".to_string()], &plain, 1).unwrap_err();
    assert!(error.contains("unknown mechanism `blur`"), "{error}");
    let error = super::candidates(None, &["quantize=-1".to_string()], &plain, 1).unwrap_err();
    assert!(error.starts_with("`quantize=-1`: "), "{error}");
}

/// A contract over the simulator's delivery question that coarsens ADDRESS and
/// DELIVERY_RECORD, withholds DAMAGE and releases usage as `usage` says.
fn coarsening(usage: &str, view: &str) -> Arc<Contract> {
    let delivery = simulate::ontology::domain("delivery").unwrap();
    let text = format!(
        "[providers.sim]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"sim\"\nusage = \"{usage}\"\n\
         [contracts.c.questions.coarse_cause]\n\
         classes = [\"DELAY\", \"ADDRESS\", \"DAMAGE\", \"DELIVERY_RECORD\"]\nview = \"{view}\"\n\
         coarsen = {{ ADDRESS = \"CUSTOMER_SIDE\", DELIVERY_RECORD = \"CUSTOMER_SIDE\" }}\n\
         withhold_labels = [\"DAMAGE\"]\n{}",
        simulate::pinned_text_toml(delivery)
    );
    AppConfig::from_toml_with(
        &text,
        "coarsening.toml",
        std::path::Path::new("."),
        releasegate_core::config::Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: false,
        },
    )
    .unwrap()
    .contracts()["c"]
        .clone()
}

fn own_release() -> Vec<CandidateRelease> {
    vec![CandidateRelease::uniform("own", None, None)]
}

#[test]
fn a_coarsening_contract_audits_every_labelled_world_under_its_coarse_class() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 20,
        seed: 3,
    })
    .unwrap();
    let contract = coarsening("drop", "full_probabilities");
    let (input, intake) = build(
        std::slice::from_ref(&contract),
        &worlds,
        &own_release(),
        Reading::Released,
        1,
    )
    .unwrap();
    let delivery: Vec<&World> = worlds.iter().filter(|w| w.domain == "delivery").collect();
    // Every delivery world is in, merged and withheld classes included; the other domains'
    // requests are refused by the contract and are not its to audit.
    assert_eq!(intake.worlds_used, delivery.len() as u64);
    assert_eq!(
        intake.skipped.keys().collect::<Vec<_>>(),
        ["request_does_not_fit"]
    );
    assert!(
        intake.left_out_test.is_empty(),
        "{:?}",
        intake.left_out_test
    );
    let test = delivery
        .iter()
        .filter(|w| w.split == worlds::Split::Test)
        .count();
    assert_eq!(intake.labelled_test_worlds, test as u64);
    assert_eq!(intake.left_out_share(), 0.0);
    assert!(!intake.too_many_left_out());
    let examples = &input.releases[0].examples;
    for (world, example) in delivery.iter().zip(examples) {
        let fine = &world.labels.as_ref().unwrap().t;
        let expected = match fine.as_str() {
            "ADDRESS" | "DELIVERY_RECORD" => "CUSTOMER_SIDE",
            other => other,
        };
        assert_eq!(example.t, expected, "{}", world.world_id);
        assert_eq!(example.class_count, 3);
        assert_eq!(
            contract.questions()["coarse_cause"].released_labels()[example.t_index],
            expected
        );
    }
    for class in ["ADDRESS", "DELIVERY_RECORD", "DAMAGE"] {
        assert!(
            delivery
                .iter()
                .any(|w| w.labels.as_ref().unwrap().t == class && w.split == worlds::Split::Test),
            "the data hold test worlds of {class}"
        );
    }
}

#[test]
fn labelled_test_worlds_left_out_are_counted_by_reason() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 20,
        seed: 3,
    })
    .unwrap();
    // Labels the contract cannot read: a class it does not have, a secret off its hypotheses.
    let mut edited = worlds.clone();
    let mut broken = 0;
    for world in edited
        .iter_mut()
        .filter(|w| w.domain == "delivery" && w.split == worlds::Split::Test)
        .step_by(3)
    {
        let labels = world.labels.as_mut().unwrap();
        if broken % 2 == 0 {
            labels.t = "UNKNOWN".into();
        } else {
            labels.s = "elsewhere".into();
        }
        broken += 1;
    }
    let contract = coarsening("drop", "choice");
    let (_, intake) = build(
        std::slice::from_ref(&contract),
        &edited,
        &own_release(),
        Reading::Released,
        1,
    )
    .unwrap();
    assert_eq!(intake.left_out_test_worlds(), broken);
    assert_eq!(
        intake.left_out_test.keys().collect::<Vec<_>>(),
        [
            "authorized_class_not_in_contract",
            "secret_not_a_hypothesis"
        ]
    );
    assert!(intake.left_out_share() > usable::MAX_LEFT_OUT_SHARE);
    assert!(intake.too_many_left_out());
}

#[test]
fn the_attacker_reads_usage_as_the_contract_releases_it() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 10,
        seed: 5,
    })
    .unwrap();
    let delivery: Vec<&World> = worlds.iter().filter(|w| w.domain == "delivery").collect();
    let read = |usage: &str| {
        let contract = coarsening(usage, "choice");
        let (input, _) = build(
            std::slice::from_ref(&contract),
            &worlds,
            &own_release(),
            Reading::Released,
            1,
        )
        .unwrap();
        input.releases[0]
            .examples
            .iter()
            .map(|e| e.release.usage)
            .collect::<Vec<_>>()
    };
    let count = |world: &World, key: &str| world.response["usage"][key].as_f64();
    let keep = read("keep");
    let input = read("input");
    for ((world, keep), input) in delivery.iter().zip(&keep).zip(&input) {
        assert_eq!(keep.input_tokens, count(world, "input_tokens"));
        assert_eq!(keep.output_tokens, count(world, "output_tokens"));
        assert_eq!(input.input_tokens, count(world, "input_tokens"));
        assert_eq!(input.output_tokens, None, "released as 0: nothing to read");
    }
    // The simulator's output count follows the fine label written: it varies.
    let outputs: std::collections::BTreeSet<u64> = keep
        .iter()
        .filter_map(|u| u.output_tokens)
        .map(|t| t as u64)
        .collect();
    assert!(outputs.len() > 1, "{outputs:?}");
    assert!(read("drop").iter().all(ReleasedUsage::is_empty));
    // A recipient's other contract joins with the counts it releases.
    let (joined, _) = build_joint(
        &[coarsening("drop", "choice")],
        &[coarsening("keep", "choice")],
        &worlds,
        &own_release(),
        Reading::Released,
        1,
    )
    .unwrap();
    for (example, keep) in joined.releases[0].examples.iter().zip(&keep) {
        assert!(example.release.usage.is_empty());
        assert_eq!(example.release.joint[0].usage, *keep);
    }
}

#[test]
fn a_candidate_no_configuration_could_hold_is_refused_not_audited() {
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 10,
        seed: 4,
    })
    .unwrap();
    let contracts = contracts(Shape::Complete);
    // The equipment contract's WCPQ mapper serves other labels and workflows than the
    // delivery contract's question.
    let foreign = contracts[1].questions()[simulate::COARSE_QUESTION]
        .mechanism()
        .clone();
    assert!(matches!(foreign, Mechanism::Wcpq(_)));
    let candidate = CandidateRelease::uniform("foreign", Some(View::FullNative), Some(foreign));
    let error = build(&contracts, &worlds, &[candidate], Reading::Released, 9).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("contract `{}`", contracts[0].name()))
            && text.contains(simulate::COARSE_QUESTION),
        "{text}"
    );
}

/// The shipped `delivery` contract of `config/tuple-bench.toml` asking `providers`, its WCPQ
/// question's further codebooks `codebooks` (a TOML inline table's entries) and, when given,
/// another first codebook.
fn delivery_with(
    providers: &str,
    codebooks: &str,
    first: Option<&std::path::Path>,
) -> Arc<Contract> {
    let config_dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config"));
    let mut text = std::fs::read_to_string(config_dir.join("tuple-bench.toml"))
        .unwrap()
        .replacen(
            "[providers.sim]",
            "[providers.sim2]\nkind = \"simulated\"\n[providers.sim]",
            1,
        )
        .replacen("provider = \"sim\"", providers, 1)
        .replacen(
            "fallback = \"native\" }",
            &format!("fallback = \"native\"{codebooks} }}"),
            1,
        );
    if let Some(first) = first {
        text = text.replacen(
            "codebook = \"codebooks/tuple-bench-coarse_cause.json\"",
            &format!("codebook = \"{}\"", first.display()),
            1,
        );
    }
    let config = AppConfig::from_toml_with(
        &text,
        "tuple-bench.toml",
        config_dir,
        releasegate_core::config::Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        },
    )
    .unwrap();
    config.contract("delivery").unwrap().clone()
}

/// Each world is audited as the contract releases its provider's answers; a world naming a
/// provider the contract does not list is left out and counted.
#[test]
fn each_world_is_audited_with_the_codebook_of_its_provider() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = delivery_with("provider = \"sim\"", "", None);
    let rule = &shipped.questions()[simulate::COARSE_QUESTION];
    let spec = rule.workflows().unwrap();
    let built =
        releasegate_core::codebook::build(rule.released_labels(), 10, spec, &[], "sim2".into())
            .unwrap();
    let second = dir.path().join("sim2.json");
    std::fs::write(&second, built.codebook.to_json_bytes()).unwrap();
    let codebooks = format!(", codebooks = {{ sim2 = \"{}\" }}", second.display());
    let both = delivery_with("providers = [\"sim\", \"sim2\"]", &codebooks, None);
    let only_sim2 = delivery_with("provider = \"sim2\"", "", Some(&second));

    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain: 20,
        seed: 3,
    })
    .unwrap();
    let delivery: Vec<World> = worlds
        .into_iter()
        .filter(|w| w.domain == "delivery")
        .collect();
    let answered = |provider: Option<&str>| -> Vec<World> {
        let mut worlds = delivery.clone();
        for world in &mut worlds {
            world.provider = provider.map(str::to_string);
        }
        worlds
    };
    let examples = |contract: &Arc<Contract>, worlds: &[World]| {
        let (input, intake) = build(
            std::slice::from_ref(contract),
            worlds,
            &own_release(),
            Reading::Released,
            1,
        )
        .unwrap();
        (input.releases[0].examples.clone(), intake)
    };
    let (by_both, _) = examples(&both, &answered(Some("sim2")));
    let (alone, _) = examples(&only_sim2, &answered(Some("sim2")));
    assert_eq!(by_both, alone);
    // The same answers as the first provider's are released otherwise.
    let (as_first, _) = examples(&both, &answered(None));
    assert_eq!(as_first.len(), by_both.len());
    assert!(
        as_first
            .iter()
            .zip(&by_both)
            .any(|(a, b)| a.release != b.release)
    );

    let mut mixed = answered(Some("sim2"));
    let gone: Vec<usize> = (0..mixed.len())
        .filter(|&i| mixed[i].split == worlds::Split::Test)
        .step_by(4)
        .collect();
    for &index in &gone {
        mixed[index].provider = Some("gone".into());
    }
    let (used, intake) = examples(&both, &mixed);
    assert_eq!(used.len(), delivery.len() - gone.len());
    assert_eq!(
        intake.skipped["provider_not_in_contract"],
        gone.len() as u64
    );
    assert_eq!(
        intake.left_out_test["provider_not_in_contract"],
        gone.len() as u64
    );
}
