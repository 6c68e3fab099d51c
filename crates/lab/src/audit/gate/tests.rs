use super::*;

#[test]
fn the_gate_is_its_worst_verdict_and_unchecked_pairs_pass_nothing() {
    use Verdict::{Fail, Inconclusive, Pass};
    assert_eq!(overall([], false), Pass);
    assert_eq!(overall([Pass, Pass], false), Pass);
    assert_eq!(overall([Pass, Inconclusive], false), Inconclusive);
    assert_eq!(overall([Inconclusive, Fail, Pass], false), Fail);
    assert_eq!(overall([], true), Inconclusive);
    assert_eq!(overall([Pass], true), Inconclusive);
    assert_eq!(overall([Fail], true), Fail);
}

fn estimate(lower: f64, upper: f64) -> Estimate {
    Estimate {
        n: 200,
        n_pairs: 100,
        mean: (lower + upper) / 2.0,
        lower,
        upper,
    }
}

#[test]
fn verdicts_follow_the_interval_and_the_budget() {
    // Precise and within.
    assert_eq!(verdict(&estimate(-0.01, 0.03), 0.05), Verdict::Pass);
    // Above with confidence, however wide.
    assert_eq!(verdict(&estimate(0.06, 0.3), 0.05), Verdict::Fail);
    assert_eq!(verdict(&estimate(0.01, 0.02), 0.0), Verdict::Fail);
    // Precise enough, and over.
    assert_eq!(verdict(&estimate(0.02, 0.06), 0.05), Verdict::Fail);
    // Wider than the budget: the data cannot tell, even with the upper bound within it.
    assert_eq!(verdict(&estimate(-0.04, 0.04), 0.05), Verdict::Inconclusive);
    assert_eq!(verdict(&estimate(-0.03, 0.09), 0.05), Verdict::Inconclusive);
    assert_eq!(verdict(&estimate(-0.01, 0.01), 0.0), Verdict::Inconclusive);
}

/// Worlds where the secret shifts the native probability of A and, independently, the
/// provider's confidence: a release of either carries part of it, both together more.
fn two_channel_worlds(pairs: usize) -> Vec<World> {
    use releasegate_core::rng::Rng;
    use releasegate_sim::worlds::{Labels, Split};
    let mut rng = Rng::new(11);
    let mut normal = move || {
        // Box-Muller from two uniforms.
        let (u, v) = (rng.uniform().max(1e-12), rng.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    };
    let mut worlds = Vec::new();
    for p in 0..pairs {
        let split = match p % 5 {
            0..=2 => Split::Train,
            3 => Split::Validation,
            _ => Split::Test,
        };
        for (w, secret) in ["h0", "h1"].into_iter().enumerate() {
            let sign = if secret == "h1" { 1.0 } else { -1.0 };
            let a = (0.7 + 0.06 * sign + 0.1 * normal()).clamp(0.01, 0.99);
            let a = (a * 1e4).round() / 1e4;
            let confidence = (0.5 + 0.06 * sign + 0.1 * normal()).clamp(0.0, 1.0);
            let confidence = (confidence * 1e4).round() / 1e4;
            let b = ((1.0 - a) * 1e4).round() / 1e4;
            let choice = if a >= b { "A" } else { "B" };
            worlds.push(World {
                world_id: format!("p{p}-w{w}"),
                pair_id: format!("p{p}"),
                split,
                domain: "d".into(),
                request: serde_json::json!({"model": "m", "state": {"case": p},
                    "questions": {"q": {"type": "choice", "criteria": {"A": null, "B": null}}}}),
                response: serde_json::json!({"model": "m", "answers": {"q": {"type": "choice",
                    "choice": choice, "confidence": confidence, "probabilities": {"A": a, "B": b}}},
                    "usage": {}}),
                labels: Some(Labels {
                    question: "q".into(),
                    t: "A".into(),
                    s: secret.into(),
                    hypotheses: ["h0".into(), "h1".into()],
                    extra: Default::default(),
                }),
                provider: None,
                extra: Default::default(),
            });
        }
    }
    worlds
}

/// A recipient holding a contract that releases the probabilities and one that releases
/// the confidence: each passes its budget alone, and what the recipient reads from both
/// together exceeds it.
#[test]
fn a_recipient_fails_its_budget_when_each_of_its_contracts_passes() {
    let budget = BUDGET;
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n\
         [[recipients]]\nname = \"both\"\nkey_sha256 = \"{}\"\ncontracts = [\"probs\", \"conf\"]\n\
         [contracts.probs]\nprovider = \"p\"\npolicy = {{ hide = [\"secret\"], max_recovery_gain = {budget} }}\n\
         [contracts.probs.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_probabilities\"\n\
         [contracts.conf]\nprovider = \"p\"\npolicy = {{ hide = [\"secret\"], max_recovery_gain = {budget} }}\n\
         [contracts.conf.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice_confidence\"\n",
        "0".repeat(64)
    );
    let config = config(&text);
    let contracts = vec![
        config.contract("probs").unwrap().clone(),
        config.contract("conf").unwrap().clone(),
    ];
    let worlds = two_channel_worlds(PAIRS);
    let settings = Config {
        n_bootstrap: 300,
        threads: 1,
        ..Config::default()
    };
    let alone = gate(&contracts, &worlds, Reading::Released, &settings).unwrap();
    let joint = recipient(
        "both",
        config.recipients()[0].policy.as_ref(),
        &contracts,
        &worlds,
        Reading::Released,
        &settings,
    )
    .unwrap()
    .unwrap();
    eprintln!("alone: {alone:#?}\njoint: {joint:#?}");
    for result in &alone {
        assert_eq!(result.verdict, Verdict::Pass, "{result:?}");
    }
    assert_eq!(joint.verdict, Verdict::Fail, "{joint:?}");
    assert_eq!(joint.contract, "recipient both");
    assert!(joint.recovery_gain.unwrap().mean > alone[0].recovery_gain.unwrap().mean);
    assert!(joint.recovery_gain.unwrap().mean > alone[1].recovery_gain.unwrap().mean);
}

/// A recipient whose contracts list different questions is refused, whichever comes
/// first: its gate would read only the first contract's worlds.
#[test]
fn a_recipient_over_different_questions_is_refused_not_gated_in_part() {
    let text = "[providers.p]\nkind = \"simulated\"\n\
         [contracts.risk]\nprovider = \"p\"\npolicy = { hide = [\"secret\"], max_recovery_gain = 0.1 }\n\
         [contracts.risk.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n\
         [contracts.both]\nprovider = \"p\"\n\
         [contracts.both.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n\
         [contracts.both.questions.r]\nclasses = [\"X\", \"Y\", \"Z\"]\nview = \"full_native\"\n";
    let config = config(text);
    let (risk, both) = (
        config.contract("risk").unwrap().clone(),
        config.contract("both").unwrap().clone(),
    );
    let worlds = two_channel_worlds(10);
    let settings = Config {
        n_bootstrap: 10,
        threads: 1,
        ..Config::default()
    };
    for contracts in [vec![risk.clone(), both.clone()], vec![both, risk]] {
        let error =
            recipient("r", None, &contracts, &worlds, Reading::Released, &settings).unwrap_err();
        assert!(error.starts_with("gate recipient r: contract `"), "{error}");
        assert!(error.contains("same questions"), "{error}");
    }
}

const BUDGET: f64 = 0.285;
const PAIRS: usize = 3000;

/// A test configuration read from `text`, its files from the working directory.
fn config(text: &str) -> releasegate_core::config::Config {
    releasegate_core::config::Config::from_toml_with(
        text,
        "test",
        std::path::Path::new("."),
        releasegate_core::config::Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        },
    )
    .unwrap()
}

/// A contract of one choice question, with a policy of budget `budget` when given.
fn contract(name: &str, budget: Option<f64>) -> Arc<Contract> {
    let policy = budget.map_or(String::new(), |gain| {
        format!("policy = {{ hide = [\"secret\"], max_recovery_gain = {gain:?} }}\n")
    });
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n\
         [contracts.{name}]\nprovider = \"p\"\n{policy}\
         [contracts.{name}.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n"
    );
    config(&text).contract(name).unwrap().clone()
}

/// One release whose examples are both worlds of each `(domain, pair, split)`.
fn input(pairs: &[(&str, &str, Split)]) -> Input {
    let examples = pairs
        .iter()
        .flat_map(|&(domain, pair, split)| {
            (0..2).map(move |s| super::super::Example {
                pair_id: pair.into(),
                split,
                domain: domain.into(),
                t: "A".into(),
                t_index: 0,
                hypotheses: ["h0".into(), "h1".into()],
                s_index: Some(s),
                release: Default::default(),
                public: Vec::new(),
                class_count: 2,
            })
        })
        .collect();
    Input {
        releases: vec![super::super::ReleaseExamples {
            name: "r".into(),
            examples,
        }],
        costs: Vec::new(),
    }
}

#[test]
fn the_sample_size_counts_test_pairs_against_the_smallest_declared_budget() {
    let input = input(&[
        ("d1", "p1", Split::Test),
        ("d1", "p2", Split::Test),
        // The same pair id in another domain is another pair.
        ("d2", "p1", Split::Test),
        ("d1", "p3", Split::Train),
        ("d1", "p4", Split::Validation),
    ]);
    let contracts = [
        contract("loose", Some(0.1)),
        contract("strict", Some(0.03)),
        contract("zero", Some(0.0)),
        contract("none", None),
    ];
    let size = sample_size(&input, &contracts, None);
    assert_eq!(
        size,
        SampleSize {
            pairs: 3,
            budget: 0.03,
            source: BudgetSource::Contracts,
        }
    );
    assert_eq!(
        size.describe(),
        "the contracts' max_recovery_gain of 3.0 points"
    );
    // A recipient's own budget counts when it is the smallest.
    let size = sample_size(&input, &contracts, Some(("analyst", 0.02)));
    assert_eq!(size.source, BudgetSource::Recipient("analyst".into()));
    assert_eq!(
        size.describe(),
        "recipient analyst's max_recovery_gain of 2.0 points"
    );
    let size = sample_size(&input, &contracts[2..], Some(("analyst", 0.25)));
    assert_eq!(
        (size.budget, size.source.name()),
        (0.25, "recipient analyst".into())
    );
    // No positive budget declared: 5 points.
    let size = sample_size(&input, &contracts[2..], Some(("analyst", 0.0)));
    assert_eq!(
        size,
        SampleSize {
            pairs: 3,
            budget: DEFAULT_BUDGET,
            source: BudgetSource::Default,
        }
    );
    assert_eq!(
        size.describe(),
        "the default budget of 5.0 points (no contract or recipient declares max_recovery_gain)"
    );
    assert_eq!(sample_size(&Input::default(), &[], None).pairs, 0);
    // Within the budget, twice too wide (four times the pairs), unresolvable.
    assert_eq!(size.need(0.04), Need::Enough);
    assert_eq!(size.need(0.10), Need::Pairs(12));
    assert_eq!(size.need(f64::INFINITY), Need::Unresolvable);
    let zero = SampleSize {
        budget: 0.0,
        ..size.clone()
    };
    assert_eq!(zero.need(0.01), Need::Unresolvable);
}

#[test]
fn the_pairs_needed_scale_with_the_square_of_the_width() {
    // Twice too wide on 240 pairs: four times the pairs.
    assert_eq!(pairs_needed(0.10, 240, 0.05), Some(960));
    assert_eq!(pairs_needed(0.04, 240, 0.05), Some(240));
    assert_eq!(pairs_needed(0.04, 240, 0.0), None);
}
