//! Tests of the frontier: one codebook per contract question, the worst relative
//! increase, and the errors naming a contract.

use std::collections::BTreeMap;

use super::*;
use releasegate_core::config::{Config, Inputs};
use releasegate_core::workflow::Spec;
use releasegate_sim::simulate;
use serde_json::Value;

/// A cost matrix for `n` classes: n + 1 rows (the last is review), 0 on the diagonal.
fn matrix(n: usize) -> String {
    let rows: Vec<String> = (0..=n)
        .map(|r| {
            let row: Vec<String> = (0..n)
                .map(|c| match (r, c) {
                    (r, _) if r == n => "1.8".to_string(),
                    (r, c) if r == c => "0.0".to_string(),
                    (r, c) => format!("{}.0", 4 + (r + 2 * c) % 7),
                })
                .collect();
            format!("[{}]", row.join(", "))
        })
        .collect();
    format!("[{}]", rows.join(", "))
}

/// Three contracts over one question id with 3, 4 and 5 classes, each with a strict
/// codebook built from its own training worlds, and the worlds (the simulator's delivery
/// cases, a third per contract, asked with that contract's labels and answered by the
/// simulated provider).
fn setup() -> (Vec<Arc<Contract>>, Vec<World>, tempfile::TempDir) {
    let label_sets: [&[&str]; 3] = [
        &["DELAY", "ADDRESS", "DAMAGE"],
        &["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"],
        &["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD", "OTHER"],
    ];
    let generated = simulate::generate(&simulate::Options {
        pairs_per_domain: 60,
        seed: 3,
    })
    .unwrap();
    let mut worlds = Vec::new();
    for (index, world) in generated
        .into_iter()
        .filter(|w| w.domain == "delivery")
        .enumerate()
    {
        let labels = label_sets[(index / 2) % 3];
        let mut world = world;
        let criteria: serde_json::Map<String, Value> = labels
            .iter()
            .map(|l| (l.to_string(), Value::Null))
            .collect();
        world.request["questions"][simulate::COARSE_QUESTION] =
            serde_json::json!({"type": "choice", "criteria": criteria});
        world.response = simulate::respond(&world.request).unwrap();
        worlds.push(world);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut text = "[providers.p]\nkind = \"simulated\"\n".to_string();
    for labels in label_sets {
        let n = labels.len();
        let quoted: Vec<String> = labels.iter().map(|l| format!("\"{l}\"")).collect();
        text.push_str(&format!(
            "[contracts.c{n}]\nprovider = \"p\"\n[contracts.c{n}.questions.coarse_cause]\n\
             classes = [{}]\nview = \"full_native\"\n\
             mechanism = {{ kind = \"wcpq\", codebook = \"c{n}.json\", fallback = \"native\" }}\n\
             workflows = {{ families = [\"selective\", \"clarification\", \"asymmetric\"], profiles = [\"authored\", \"review_half\", \"review_double\", \"check_quarter\", \"error_double\", \"asymmetric_class0_double\"], costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = {} }} }}\n",
            quoted.join(", "),
            matrix(n)
        ));
    }
    let load = |codebooks: bool| {
        Config::from_toml_with(
            &text,
            "test",
            dir.path(),
            Inputs {
                env: None,
                files: &|path| std::fs::read(path),
                codebooks,
            },
        )
        .unwrap()
    };
    // Strict codebooks from each contract's own training answers.
    let bare = load(false);
    for (name, contract) in bare.contracts() {
        let rule = &contract.questions()[simulate::COARSE_QUESTION];
        let spec: &Spec = rule.workflows().unwrap();
        let training: Vec<codebook::TrainingAnswer> = worlds
            .iter()
            .filter(|w| w.split == Split::Train)
            .filter_map(|w| {
                dataset::training_answer(contract, simulate::COARSE_QUESTION, w, spec).ok()
            })
            .map(|(_, answer)| answer)
            .collect();
        assert!(!training.is_empty(), "{name}");
        let built = codebook::build(rule.classes(), 10, spec, &training, "test".into()).unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            built.codebook.to_json_bytes(),
        )
        .unwrap();
    }
    let config = load(true);
    (config.contracts().values().cloned().collect(), worlds, dir)
}

#[test]
fn every_contract_question_gets_its_own_codebook_whatever_its_class_count() {
    let (contracts, worlds, _dir) = setup();
    let settings = candidates(&contracts, &worlds, &[0.04, 0.2], &[16]).unwrap();
    assert_eq!(settings.len(), 2);
    for (candidate, point) in &settings {
        assert_eq!(point.questions.len(), 3, "{point:?}");
        assert_eq!(candidate.mechanisms.len(), 3);
        // Three class counts: three codebooks, none pooled across specs.
        assert_eq!(point.codebooks.len(), 3, "{point:?}");
        for codebook in &point.codebooks {
            assert_eq!(codebook.serves.len(), 1, "{codebook:?}");
            assert!(
                codebook.codewords > 0 && codebook.codewords <= 16,
                "{codebook:?}"
            );
        }
        for question in &point.questions {
            // Served: answers of every class count are covered by their own codebook.
            assert!(question.test_answers > 0, "{question:?}");
            assert!(question.covered_test_answers > 0, "{question:?}");
        }
        // The larger budget moves some answers of some family; none moves more answers
        // than were released; the assignment was chosen on the validation split.
        if point.budget > 0.1 {
            assert!(point.moved.values().any(|&m| m > 0), "{point:?}");
        }
        assert!(point.moved.values().all(|&m| m <= point.test_answers));
        for codebook in &point.codebooks {
            assert!(codebook.assignment.is_some() && !codebook.trials.is_empty());
        }
        // The per-output bound holds for every workflow of every question.
        for (workflow, worst) in &point.worst_relative_increase {
            assert!(
                *worst <= point.budget + 1e-9,
                "{workflow}: {worst} > {}",
                point.budget
            );
        }
    }
}

#[test]
fn the_worst_relative_increase_is_the_largest_over_workflows() {
    let mut point = Point {
        release: "wcpq a=0.04 K=16".into(),
        budget: 0.04,
        max_codewords: 16,
        codebooks: Vec::new(),
        questions: Vec::new(),
        recovery: None,
        recovery_gain: None,
        paired: BTreeMap::new(),
        mean_cost_increase: BTreeMap::new(),
        worst_increase: BTreeMap::new(),
        worst_relative_increase: BTreeMap::new(),
        moved: BTreeMap::new(),
        test_answers: 0,
        covered_test_answers: 0,
    };
    assert_eq!(point.worst_relative_over_workflows(), 0.0);
    point.worst_relative_increase = [("a/p", 0.01), ("b/p", 0.03), ("c/p", 0.02)]
        .into_iter()
        .map(|(workflow, worst)| (workflow.to_string(), worst))
        .collect();
    assert_eq!(point.worst_relative_over_workflows(), 0.03);
}

#[test]
fn a_contract_the_frontier_cannot_serve_is_an_error_naming_it() {
    let (mut contracts, worlds, _dir) = setup();
    let text = "[providers.p]\nkind = \"simulated\"\n[contracts.plain]\nprovider = \"p\"\n\
         [contracts.plain.questions.coarse_cause]\nclasses = [\"DELAY\", \"ADDRESS\", \"DAMAGE\"]\n\
         view = \"choice\"\n";
    let inputs = Inputs {
        env: None,
        files: &|path| std::fs::read(path),
        codebooks: true,
    };
    let config = Config::from_toml_with(text, "test", std::path::Path::new("."), inputs);
    contracts.push(config.unwrap().contract("plain").unwrap().clone());
    let error = candidates(&contracts, &worlds, &[0.04], &[16]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("contract `plain` has no wcpq question"),
        "{error}"
    );
    // A contract no training world fits.
    let (contracts, worlds, _dir) = setup();
    let test_only: Vec<World> = worlds
        .into_iter()
        .filter(|w| w.split != Split::Train)
        .collect();
    let error = candidates(&contracts, &test_only, &[0.04], &[16]).unwrap_err();
    assert!(
        error.to_string().contains("no training world fits it"),
        "{error}"
    );
}
