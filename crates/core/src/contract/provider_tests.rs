//! A WCPQ codebook per provider: the configuration's rules, `Contract::for_provider`, derived
//! contracts and the release description a certificate binds.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::config::{Config, Inputs};
use crate::mechanism::ConfidenceSource;
use crate::workflow::Spec;

const CLASSES: [&str; 4] = ["A", "B", "C", "D"];

/// Writes a strict codebook of the four classes over the grid of `denominator` to `dir/name`;
/// returns its SHA-256 (hex).
fn write_codebook(dir: &Path, name: &str, denominator: u32) -> String {
    let classes: Vec<String> = CLASSES.iter().map(|c| c.to_string()).collect();
    let spec = Spec::standard(classes.clone()).unwrap();
    let built = crate::codebook::build(&classes, denominator, &spec, &[], name.into()).unwrap();
    let bytes = built.codebook.to_json_bytes();
    std::fs::write(dir.join(name), &bytes).unwrap();
    crate::workflow::sha256_hex(&bytes)
}

/// A configuration of the providers `one` and `two` and the contract `c` (`providers` its
/// provider line, `mechanism` the WCPQ table's further keys) with the WCPQ question `q` and
/// the plain question `p`.
fn text(providers: &str, mechanism: &str) -> String {
    format!(
        "[providers.one]\nkind = \"simulated\"\n[providers.two]\nkind = \"simulated\"\n\
         [contracts.c]\n{providers}\n\
         [contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\", \"D\"]\nview = \"full_native\"\n\
         mechanism = {{ kind = \"wcpq\", fallback = \"native\"{mechanism} }}\n\
         workflows = {{ preset = \"tuple-bench\" }}\n\
         [contracts.c.questions.p]\nclasses = [\"X\", \"Y\"]\nview = \"full_native\"\n"
    )
}

fn load(dir: &Path, text: &str, codebooks: bool) -> Result<Config, crate::config::Error> {
    let inputs = Inputs {
        env: None,
        files: &|path| std::fs::read(path),
        codebooks,
    };
    Config::from_toml_with(text, "test", dir, inputs)
}

fn contract(dir: &Path, text: &str) -> Arc<Contract> {
    load(dir, text, true)
        .unwrap()
        .contract("c")
        .unwrap()
        .clone()
}

fn problems(dir: &Path, text: &str, codebooks: bool) -> Vec<String> {
    match load(dir, text, codebooks) {
        Err(crate::config::Error::Invalid(problems)) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

fn codebook_sha256(contract: &Contract, question: &str) -> Option<String> {
    match contract.questions()[question].mechanism() {
        Mechanism::Wcpq(wcpq) => Some(wcpq.codebook_sha256.clone()),
        _ => None,
    }
}

#[test]
fn each_provider_releases_with_its_own_codebook() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_codebook(dir.path(), "one.json", 10);
    let second = write_codebook(dir.path(), "two.json", 8);
    let contract = contract(
        dir.path(),
        &text(
            "providers = [\"one\", \"two\"]",
            ", codebook = \"one.json\", codebooks = { two = \"two.json\" }",
        ),
    );
    assert!(contract.releases_per_provider());
    let one = contract.for_provider("one").unwrap();
    assert!(
        std::ptr::eq(one, &*contract),
        "the first provider's is the contract"
    );
    assert_eq!(codebook_sha256(one, "q"), Some(first.clone()));
    let two = contract.for_provider("two").unwrap();
    assert_eq!(codebook_sha256(two, "q"), Some(second));
    assert_eq!((two.name(), two.released_for()), ("c", "two"));
    assert_eq!(contract.released_for(), "one");
    // Everything but the WCPQ codebook is the contract's.
    assert_eq!(two.providers(), contract.providers());
    assert_eq!(
        two.questions().keys().collect::<Vec<_>>(),
        contract.questions().keys().collect::<Vec<_>>()
    );
    assert!(matches!(two.questions()["p"].mechanism(), Mechanism::None));
    assert_eq!(two.questions()["q"].view(), View::FullNative);
    assert!(contract.for_provider("three").is_none());
    assert!(
        two.for_provider("one").is_none(),
        "a variant is one provider's"
    );
    assert!(std::ptr::eq(two.for_provider("two").unwrap(), two));

    // `codebooks` may name the first provider instead of `codebook`, and share a file.
    let shared = contract_of_shared(dir.path());
    assert_eq!(codebook_sha256(&shared, "q"), Some(first.clone()));
    assert_eq!(
        codebook_sha256(shared.for_provider("two").unwrap(), "q"),
        Some(first)
    );
}

fn contract_of_shared(dir: &Path) -> Arc<Contract> {
    contract(
        dir,
        &text(
            "providers = [\"one\", \"two\"]",
            ", codebooks = { one = \"one.json\", two = \"one.json\" }",
        ),
    )
}

#[test]
fn one_provider_or_no_wcpq_releases_every_answer_alike() {
    let dir = tempfile::tempdir().unwrap();
    write_codebook(dir.path(), "one.json", 10);
    let single = contract(
        dir.path(),
        &text("provider = \"one\"", ", codebook = \"one.json\""),
    );
    assert!(!single.releases_per_provider());
    assert!(std::ptr::eq(single.for_provider("one").unwrap(), &*single));
    assert!(single.for_provider("two").is_none());
    let plain = "[providers.one]\nkind = \"simulated\"\n[providers.two]\nkind = \"simulated\"\n\
                 [contracts.c]\nproviders = [\"one\", \"two\"]\n\
                 [contracts.c.questions.p]\nclasses = [\"X\", \"Y\"]\nview = \"full_native\"\n";
    let plain = contract(dir.path(), plain);
    assert!(!plain.releases_per_provider());
    assert!(std::ptr::eq(plain.for_provider("two").unwrap(), &*plain));
}

#[test]
fn a_provider_without_a_codebook_or_a_codebook_without_a_provider_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_codebook(dir.path(), "one.json", 10);
    write_codebook(dir.path(), "two.json", 8);
    let two = "providers = [\"one\", \"two\"]";
    for (providers, mechanism, expected) in [
        (
            two,
            ", codebook = \"one.json\"",
            "contracts.c.questions.q.mechanism.codebooks: provider `two` of the contract has no codebook",
        ),
        (
            two,
            ", codebooks = { two = \"two.json\" }",
            "contracts.c.questions.q.mechanism.codebooks: provider `one` of the contract has no codebook",
        ),
        (
            "provider = \"one\"",
            ", codebook = \"one.json\", codebooks = { two = \"two.json\" }",
            "contracts.c.questions.q.mechanism.codebooks.two: `two` is not one of the contract's providers (one)",
        ),
        (
            two,
            ", codebook = \"one.json\", codebooks = { one = \"one.json\", two = \"two.json\" }",
            "contracts.c.questions.q.mechanism.codebook: serves the first provider `one`",
        ),
        (
            "provider = \"one\"",
            "",
            "contracts.c.questions.q.mechanism: wcpq needs a `codebook`",
        ),
    ] {
        // Which provider has which codebook is checked whether codebooks are loaded or not.
        for loaded in [true, false] {
            let problems = problems(dir.path(), &text(providers, mechanism), loaded);
            assert!(
                problems.iter().any(|p| p.starts_with(expected)),
                "{expected}: {problems:?}"
            );
        }
    }
    // Every provider's codebook file is read and checked as `codebook` is.
    let checked = [
        (
            ", codebooks = { one = \"one.json\", two = \"gone.json\" }",
            "cannot read codebook",
        ),
        (
            ", codebooks = { one = \"one.json\", two = \"bad.json\" }",
            "does not match this question",
        ),
    ];
    let classes: Vec<String> = ["A", "B", "C", "E"].iter().map(|c| c.to_string()).collect();
    let spec = Spec::standard(classes.clone()).unwrap();
    let other = crate::codebook::build(&classes, 10, &spec, &[], "x".into()).unwrap();
    std::fs::write(dir.path().join("bad.json"), other.codebook.to_json_bytes()).unwrap();
    for (mechanism, expected) in checked {
        let problems = problems(dir.path(), &text(two, mechanism), true);
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("contracts.c.questions.q.mechanism: ")
                    && p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
    // Without codebooks loaded the files are not read (build-codebook writes them).
    assert!(
        load(
            dir.path(),
            &text(
                two,
                ", codebooks = { one = \"gone.json\", two = \"gone.json\" }"
            ),
            false
        )
        .is_ok()
    );
}

#[test]
fn a_configuration_reload_watches_every_codebook() {
    let dir = tempfile::tempdir().unwrap();
    write_codebook(dir.path(), "one.json", 10);
    write_codebook(dir.path(), "two.json", 8);
    let config = load(
        dir.path(),
        &text(
            "providers = [\"one\", \"two\"]",
            ", codebook = \"one.json\", codebooks = { two = \"two.json\" }",
        ),
        true,
    )
    .unwrap();
    let files = &config.origin().files;
    for name in ["one.json", "two.json"] {
        assert!(files.contains(&dir.path().join(name)), "{name}: {files:?}");
    }
}

#[test]
fn derived_contracts_keep_each_provider_codebook_unless_the_mechanism_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    write_codebook(dir.path(), "one.json", 10);
    let second = write_codebook(dir.path(), "two.json", 8);
    let contract = contract(
        dir.path(),
        &text(
            "providers = [\"one\", \"two\"]",
            ", codebook = \"one.json\", codebooks = { two = \"two.json\" }",
        ),
    );
    let choice = contract.with_release(View::Choice, None).unwrap();
    let two = choice.for_provider("two").unwrap();
    assert_eq!(two.questions()["q"].view(), View::Choice);
    assert_eq!(codebook_sha256(two, "q"), Some(second));
    let quantize = Mechanism::Quantize {
        step: 0.1,
        confidence: ConfidenceSource::Derived,
    };
    let baseline = contract
        .with_release(View::FullNative, Some(&quantize))
        .unwrap();
    for provider in ["one", "two"] {
        let rule = &baseline.for_provider(provider).unwrap().questions()["q"];
        assert!(
            matches!(rule.mechanism(), Mechanism::Quantize { .. }),
            "{provider}"
        );
    }
    let minimal = contract.with_shape(Shape::Minimal);
    assert_eq!(minimal.for_provider("two").unwrap().shape(), Shape::Minimal);
    assert_eq!(
        codebook_sha256(minimal.for_provider("two").unwrap(), "q"),
        codebook_sha256(contract.for_provider("two").unwrap(), "q")
    );
}

#[test]
fn a_certificate_binds_every_provider_codebook() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_codebook(dir.path(), "one.json", 10);
    let second = write_codebook(dir.path(), "two.json", 8);
    let describe = |providers: &str, mechanism: &str| {
        crate::certificate::contract_release(&contract(dir.path(), &text(providers, mechanism)))
    };
    // One provider: the description has no per-provider codebooks.
    let single = describe("provider = \"one\"", ", codebook = \"one.json\"");
    let mechanism = &single["questions"]["q"]["mechanism"];
    assert_eq!(mechanism["codebook_sha256"], first.as_str());
    assert!(mechanism.get("codebooks_sha256").is_none(), "{mechanism}");
    let mut keys: Vec<&String> = mechanism.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "admissibility",
            "codebook_sha256",
            "confidence",
            "fallback",
            "kind",
            "workflows_sha256"
        ]
    );
    // Two providers: both codebooks, by provider; another second codebook is another release.
    let two = "providers = [\"one\", \"two\"]";
    let both = describe(
        two,
        ", codebook = \"one.json\", codebooks = { two = \"two.json\" }",
    );
    let mechanism = &both["questions"]["q"]["mechanism"];
    assert_eq!(mechanism["codebook_sha256"], first.as_str());
    assert_eq!(
        mechanism["codebooks_sha256"],
        serde_json::json!({"one": first, "two": second})
    );
    assert!(
        both["questions"]["p"]["mechanism"]
            .get("codebooks_sha256")
            .is_none()
    );
    let shared = describe(
        two,
        ", codebook = \"one.json\", codebooks = { two = \"one.json\" }",
    );
    assert_ne!(
        crate::certificate::release_sha256(&shared),
        crate::certificate::release_sha256(&both)
    );
    assert_eq!(
        shared["questions"]["q"]["mechanism"]["codebooks_sha256"]["two"],
        first.as_str()
    );
}
