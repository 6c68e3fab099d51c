use super::*;
use crate::workflow::Spec;

#[test]
fn views_parse_and_expose_fields_as_documented() {
    let fields: Vec<(bool, bool, bool)> = View::ALL
        .iter()
        .map(|v| (v.has_choice(), v.has_probabilities(), v.has_confidence()))
        .collect();
    assert_eq!(
        fields,
        vec![
            (false, false, false),
            (true, false, false),
            (true, false, true),
            (true, true, false),
            (true, true, true),
        ]
    );
    for view in View::ALL {
        assert_eq!(View::parse(view.as_str()), Some(view));
    }
    assert_eq!(View::parse("everything"), None);
}

/// A contract of two WCPQ questions over other labels (codebooks built into `dir`) and a
/// box question.
fn wcpq_contract(dir: &std::path::Path) -> std::sync::Arc<Contract> {
    let mut text =
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n".to_string();
    for (id, labels) in [
        ("q4", &["A", "B", "C", "D"][..]),
        ("r4", &["W", "X", "Y", "Z"][..]),
    ] {
        let classes: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        let spec = Spec::standard(classes.clone()).unwrap();
        let built = crate::codebook::build(&classes, 10, &spec, &[], "test".into()).unwrap();
        std::fs::write(
            dir.join(format!("{id}.json")),
            built.codebook.to_json_bytes(),
        )
        .unwrap();
        text.push_str(&format!(
            "[contracts.c.questions.{id}]\nclasses = {classes:?}\nview = \"full_native\"\n\
             mechanism = {{ kind = \"wcpq\", codebook = \"{id}.json\", fallback = \"native\" }}\n\
             workflows = {{ preset = \"tuple-bench\" }}\n"
        ));
    }
    text.push_str("[contracts.c.questions.b]\ntype = \"box\"\nview = \"full_native\"\n");
    let inputs = crate::config::Inputs {
        env: None,
        files: &|path| std::fs::read(path),
        codebooks: true,
    };
    let config = crate::config::Config::from_toml_with(&text, "test", dir, inputs).unwrap();
    config.contract("c").unwrap().clone()
}

#[test]
fn a_derived_release_passes_the_rules_of_a_configured_one() {
    use crate::mechanism::ConfidenceSource;
    let dir = tempfile::tempdir().unwrap();
    let contract = wcpq_contract(dir.path());
    // The audit's no_output reference and a box-compatible baseline derive.
    let reference = contract.with_release(View::NoOutput, None).unwrap();
    assert!(
        reference
            .questions()
            .values()
            .all(|r| r.view() == View::NoOutput)
    );
    let quantize = Mechanism::Quantize {
        step: 0.1,
        confidence: ConfidenceSource::Derived,
    };
    assert!(
        contract
            .with_release(View::FullNative, Some(&quantize))
            .is_ok()
    );
    // A candidate no configuration could hold is refused, naming the question.
    let top_k = Mechanism::TopK {
        k: 2,
        confidence: ConfidenceSource::Derived,
    };
    let error = contract
        .with_release(View::FullNative, Some(&top_k))
        .unwrap_err();
    assert_eq!(
        (error.contract.as_str(), error.question.as_str()),
        ("c", "b")
    );
    let error = contract
        .with_release(View::ChoiceConfidence, None)
        .unwrap_err();
    assert_eq!(error.question, "b", "{error}");
    let fine = Mechanism::Quantize {
        step: 0.1234567891,
        confidence: ConfidenceSource::Native,
    };
    let error = contract
        .derive(|id, _| Rerelease {
            view: None,
            mechanism: (id == "q4").then(|| fine.clone()),
        })
        .unwrap_err();
    assert!(error.reason.contains("step"), "{error}");
    // One question's WCPQ mapper on another question: refused.
    let other = contract.questions()["r4"].mechanism().clone();
    let error = contract
        .derive(|id, _| Rerelease {
            view: None,
            mechanism: (id == "q4").then(|| other.clone()),
        })
        .unwrap_err();
    assert_eq!(error.question, "q4");
    assert!(error.reason.contains("workflows"), "{error}");
    // Each question keeps its own otherwise: deriving nothing changes nothing.
    let same = contract.derive(|_, _| Rerelease::default()).unwrap();
    assert_eq!(
        crate::certificate::contract_release(&same),
        crate::certificate::contract_release(&contract)
    );
}
