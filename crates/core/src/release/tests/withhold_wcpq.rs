//! WCPQ verifies exactly the bytes that go out: with coarsening, withholding,
//! either shape, any view and any fallback, a covered answer reads back with
//! the native answer's plans and realized costs.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::*;
use crate::codebook;
use crate::config::Config;
use crate::mechanism::Mechanism;
use crate::rng::Rng;
use crate::wire::check_request;

/// A random contract: `fine` classes coarsened onto 2..=4 labels, some of them
/// withheld, WCPQ over a small grid codebook of random frozen workflows.
struct Case {
    contract: Arc<Contract>,
    fine: Vec<String>,
    request: Value,
}

fn case(fine_count: usize, seed: u64) -> Case {
    case_with(fine_count, seed, false)
}

/// [`case`]; with `learned`, the codebook is one learned for a budget from a few answers
/// (the grid its strict stage), and the contract bounded by that budget.
fn case_with(fine_count: usize, seed: u64, learned: bool) -> Case {
    let mut rng = Rng::new(seed);
    let fine: Vec<String> = (0..fine_count).map(|i| format!("F{i}")).collect();
    let coarse_count = 2 + rng.below(fine_count.min(4) - 1);
    // Every coarse label gets at least one fine class.
    let mut map: Vec<usize> = (0..fine_count)
        .map(|i| {
            if i < coarse_count {
                i
            } else {
                rng.below(coarse_count)
            }
        })
        .collect();
    for i in (1..map.len()).rev() {
        map.swap(i, rng.below(i + 1));
    }
    // Coarse labels in order of first appearance (the configuration's rule).
    let mut order: Vec<usize> = Vec::new();
    for &c in &map {
        if !order.contains(&c) {
            order.push(c);
        }
    }
    let coarse_label = |c: usize| format!("C{}", order.iter().position(|&o| o == c).unwrap_or(0));
    let coarsen: Vec<String> = fine
        .iter()
        .zip(&map)
        .map(|(f, &c)| format!("{f} = \"{}\"", coarse_label(c)))
        .collect();
    let coarse: Vec<String> = (0..coarse_count).map(|i| format!("C{i}")).collect();
    let withheld: Vec<String> = coarse
        .iter()
        .filter(|_| rng.below(3) == 0)
        .map(|l| format!("\"{l}\""))
        .collect();
    let matrix: Vec<String> = (0..=coarse_count)
        .map(|action| {
            let row: Vec<String> = (0..coarse_count)
                .map(|t| {
                    if action == t {
                        "0.0".to_string()
                    } else if action == coarse_count {
                        "1.5".to_string()
                    } else {
                        format!("{}.0", 1 + rng.below(12))
                    }
                })
                .collect();
            format!("[{}]", row.join(", "))
        })
        .collect();
    let view = ["choice_confidence", "full_probabilities", "full_native"][rng.below(3)];
    let shape = ["complete", "minimal"][rng.below(2)];
    let fallback = ["native", "choice_only", "deny"][rng.below(3)];
    let confidence = ["codeword", "drop"][rng.below(2)];
    let denominator = 2 + rng.below(5) as u32;
    let text = |mechanism: &str| {
        format!(
            "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nshape = \"{shape}\"\n\
             [contracts.c.questions.q]\nclasses = [{}]\nview = \"{view}\"\n\
             coarsen = {{ {} }}\nwithhold_labels = [{}]\n{mechanism}\n\
             workflows = {{ families = [\"selective\", \"clarification\", \"asymmetric\"], profiles = [\"authored\", \"review_half\", \"review_double\", \"check_quarter\", \"error_double\", \"asymmetric_class0_double\"], costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = [{}] }} }}\n",
            fine.iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", "),
            coarsen.join(", "),
            withheld.join(", "),
            matrix.join(", "),
        )
    };
    // The frozen workflows as the configuration builds them, then their codebook.
    let plain = Config::from_toml(&text("")).unwrap();
    let rule = &plain.contracts["c"].questions["q"];
    let spec = rule.workflows.clone().unwrap();
    let built = codebook::build(
        rule.released_labels(),
        denominator,
        &spec,
        &[],
        "withhold".into(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("codebook.json");
    let (bytes, admissibility) = if learned {
        let labels = rule.released_labels().len();
        let responses: Vec<codebook::Response> = (0..24)
            .map(|i| {
                let raw: Vec<f64> = (0..labels).map(|_| rng.uniform() + 1e-3).collect();
                let sum: f64 = raw.iter().sum();
                let p: Vec<f64> = raw.iter().map(|x| x / sum).collect();
                codebook::Response {
                    pair_id: format!("p{i}"),
                    native: crate::workflow::Release {
                        choice: wire::argmax(&p),
                        probabilities: Some(p),
                        confidence: Some(rng.uniform()),
                    },
                    public: Vec::new(),
                }
            })
            .collect();
        let alpha = [0.05, 0.1, 0.3][rng.below(3)];
        let settings = codebook::Settings::new(alpha, 8);
        // A budget no codeword meets for these answers learns nothing: the grid then.
        match codebook::learn(&built.codebook, &spec, &responses, &[], &settings) {
            Ok((codebook, _)) => (
                codebook.to_json_bytes(),
                format!(", admissibility = {{ budget = {alpha} }}"),
            ),
            Err(_) => (built.codebook.to_json_bytes(), String::new()),
        }
    } else {
        (built.codebook.to_json_bytes(), String::new())
    };
    std::fs::write(&path, bytes).unwrap();
    let mechanism = format!(
        "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"{fallback}\", confidence = \"{confidence}\"{admissibility} }}",
        path.display()
    );
    let contract = Config::from_toml(&text(&mechanism)).unwrap().contracts["c"].clone();
    let criteria: serde_json::Map<String, Value> =
        fine.iter().map(|f| (f.clone(), Value::Null)).collect();
    let request = json!({"model": "m", "state": "s",
        "questions": {"q": {"type": "choice", "criteria": criteria}}});
    Case {
        contract,
        fine,
        request,
    }
}

fn native(fine: &[String], rng: &mut Rng) -> Value {
    let raw: Vec<f64> = fine.iter().map(|_| rng.uniform().powi(3) + 1e-3).collect();
    let sum: f64 = raw.iter().sum();
    let p: Vec<f64> = raw.iter().map(|x| x / sum).collect();
    let choice = wire::argmax(&p);
    let probabilities: serde_json::Map<String, Value> = fine
        .iter()
        .zip(&p)
        .map(|(l, v)| (l.clone(), json!(v)))
        .collect();
    let mut answer =
        json!({"type": "choice", "choice": fine[choice], "probabilities": probabilities});
    if rng.below(4) != 0 {
        answer["confidence"] = json!(rng.uniform());
    }
    json!({"model": "m", "answers": {"q": answer}, "usage": {}})
}

/// Releases 24 random answers under a random contract and checks every one;
/// returns how many were covered, and how many of those withheld.
fn check(fine_count: usize, seed: u64) -> Result<(usize, usize), TestCaseError> {
    let case = case(fine_count, seed);
    let rule = &case.contract.questions["q"];
    let spec = rule.workflows.as_ref().unwrap();
    let native_fallback = matches!(
        &rule.mechanism,
        Mechanism::Wcpq(w) if w.fallback == mechanism::Fallback::Native
    );
    let asked = check_request(&case.request, &case.contract).unwrap();
    // The same contract writing every candidate afresh: the reference for the bytes.
    let mut unkept = Contract::clone(&case.contract);
    for rule in unkept.questions.values_mut() {
        rule.codewords = Codewords::unkept();
    }
    let mut answers = Rng::new(seed ^ 0x5eed);
    let (mut covered, mut withheld) = (0, 0);
    // Twice over the same answers: the second round's covered answers go out as kept.
    let natives: Vec<Value> = (0..12).map(|_| native(&case.fine, &mut answers)).collect();
    for native in natives.iter().chain(&natives) {
        let mut rng = Rng::new(0);
        let mut options = Options {
            rng: &mut rng,
            evaluate: true,
        };
        let released = release(&case.contract, &asked, native, &mut options).unwrap();
        let mut rng = Rng::new(0);
        let mut options = Options {
            rng: &mut rng,
            evaluate: true,
        };
        let reference = release(&unkept, &asked, native, &mut options).unwrap();
        prop_assert_eq!(released.to_bytes(), reference.to_bytes());
        for (kept, fresh) in released.answers.iter().zip(&reference.answers) {
            prop_assert_eq!(&kept.mechanism, &fresh.mechanism);
            prop_assert_eq!(&kept.evaluation, &fresh.evaluation);
            prop_assert_eq!(kept.withheld, fresh.withheld);
        }
        let record = &released.answers[0];
        let Some(evaluation) = &record.evaluation else {
            // Only a denied answer (left out or `type` only) has no reading.
            prop_assert!(matches!(record.mechanism, mechanism::Outcome::Fallback(_)));
            continue;
        };
        let before = spec.plans(&evaluation.native, &Value::Null);
        let after = spec.plans(&evaluation.released, &Value::Null);
        match record.mechanism {
            mechanism::Outcome::Covered { .. } => {
                covered += 1;
                prop_assert_eq!(&before, &after);
                for t in 0..spec.class_count() {
                    prop_assert_eq!(
                        spec.realized_costs(&before, t),
                        spec.realized_costs(&after, t)
                    );
                }
                prop_assert_eq!(
                    evaluation.native.availability(),
                    evaluation.released.availability()
                );
                if record.withheld {
                    withheld += 1;
                    prop_assert_eq!(evaluation.released.probabilities.as_ref(), None);
                    prop_assert_eq!(evaluation.released.confidence, None);
                }
            }
            // The native fallback releases the native answer as the recipient reads it.
            _ if native_fallback => prop_assert_eq!(&evaluation.native, &evaluation.released),
            _ => {}
        }
    }
    Ok((covered, withheld))
}

#[test]
fn the_property_is_not_vacuous() {
    let (mut covered, mut withheld) = (0, 0);
    for seed in 0..12 {
        let (c, w) = check(3 + (seed as usize % 4), seed).unwrap();
        covered += c;
        withheld += w;
    }
    assert!(
        covered > 50 && withheld > 10,
        "{covered} covered, {withheld} withheld"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Covered answers keep every frozen plan and realized cost of the native
    /// answer as the recipient would read it (withholding and shape included);
    /// the native fallback releases exactly that reading.
    #[test]
    fn covered_answers_agree_under_coarsening_withholding_and_either_shape(
        fine_count in 3usize..7,
        seed in any::<u64>(),
    ) {
        check(fine_count, seed)?;
    }
}

/// A learned codebook's covered answers (its compact stage, then its strict stage) go out
/// as the same bytes whether their codewords' answers are kept or written afresh.
#[test]
fn a_learned_codebooks_kept_answers_go_out_as_written_afresh() {
    let mut stages = std::collections::BTreeSet::new();
    for seed in 0..16 {
        let case = case_with(3 + (seed as usize % 4), seed, true);
        let asked = check_request(&case.request, &case.contract).unwrap();
        let mut unkept = Contract::clone(&case.contract);
        for rule in unkept.questions.values_mut() {
            rule.codewords = Codewords::unkept();
        }
        let mut answers = Rng::new(seed ^ 0x1ea4);
        let natives: Vec<Value> = (0..16).map(|_| native(&case.fine, &mut answers)).collect();
        for native in natives.iter().chain(&natives) {
            let (mut one, mut two) = (Rng::new(0), Rng::new(0));
            let options = |rng| Options {
                rng,
                evaluate: true,
            };
            let kept = release(&case.contract, &asked, native, &mut options(&mut one)).unwrap();
            let fresh = release(&unkept, &asked, native, &mut options(&mut two)).unwrap();
            assert_eq!(kept.to_bytes(), fresh.to_bytes(), "seed {seed}");
            assert_eq!(kept.answers[0].mechanism, fresh.answers[0].mechanism);
            assert_eq!(kept.answers[0].evaluation, fresh.answers[0].evaluation);
            if let mechanism::Outcome::Covered { stage, .. } = kept.answers[0].mechanism {
                stages.insert(stage);
            }
        }
    }
    // Both stages covered answers.
    assert_eq!(stages.len(), 2, "{stages:?}");
}
