use std::cell::RefCell;
use std::collections::BTreeMap;

use super::*;
use crate::config::{Config, Inputs};

/// Two contracts with policies (one coarsening 5 classes into 3), a recipient holding both, and
/// one contract without a policy.
const TEXT: &str = r#"
[server]
certificates = "certs"
certification = "advisory"

[providers.p]
kind = "simulated"

[providers.q]
kind = "simulated"

[[recipients]]
name = "both"
key_sha256 = "d2aacb68b85bbdced6e4c3f176f8c2c9f0e8faa9e41842a3c426d1111a37022b"
contracts = ["coarse", "plain"]

[[recipients]]
name = "free"
key_sha256 = "ba041bbd3d5f84055d10645d916eeace5ad28692224918c320e627f95bccbd3b"
contracts = ["open"]

[contracts.coarse]
provider = "p"
usage = "drop"
policy = { keep = ["choice"], hide = ["secret"], max_recovery_gain = 0.08 }

[contracts.coarse.questions.cause]
classes = ["v", "w", "x", "y", "z"]
view = "full_probabilities"
coarsen = { w = "WX", x = "WX" }
withhold_labels = ["z"]
instructions = "Which cause?"

[contracts.plain]
provider = "p"
policy = { hide = ["secret"], max_recovery_gain = 0.05 }

[contracts.plain.questions.cause]
classes = ["v", "w", "x", "y", "z"]
view = "choice"

[contracts.open]
provider = "p"

[contracts.open.questions.other]
classes = ["a", "b", "c"]
view = "full_native"
"#;

/// The configuration `text`, its certificates read from `files` (by file name).
fn load(text: &str, files: &BTreeMap<String, Vec<u8>>) -> Config {
    let read = |path: &Path| {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        files
            .get(name)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "absent"))
    };
    Config::from_toml_with(
        text,
        "test",
        Path::new("."),
        Inputs {
            env: None,
            files: &read,
            codebooks: true,
        },
    )
    .unwrap()
}

/// A passing certificate of every subject of `config`.
fn certify(config: &Config) -> BTreeMap<String, Vec<u8>> {
    subjects(&config.contracts, &config.recipients)
        .into_iter()
        .map(|s| {
            let certificate = Certificate::new(
                s.kind,
                &s.name,
                s.release,
                s.policy,
                json!({"verdict": "pass"}),
                json!({}),
                "2026-12-05T00:00:00Z".to_string(),
            );
            (
                s.kind.file_name(&s.name).unwrap(),
                serde_json::to_vec(&certificate).unwrap(),
            )
        })
        .collect()
}

fn statuses(config: &Config) -> Vec<(Kind, String, Status)> {
    config
        .certification
        .entries()
        .iter()
        .map(|e| (e.kind, e.name.clone(), e.status.clone()))
        .collect()
}

#[test]
fn every_contract_with_a_policy_and_every_recipient_bound_by_one_needs_a_certificate() {
    let config = load(TEXT, &BTreeMap::new());
    let names: Vec<(Kind, String)> = statuses(&config)
        .into_iter()
        .map(|(k, n, s)| {
            assert_eq!(s, Status::Missing);
            (k, n)
        })
        .collect();
    assert_eq!(
        names,
        vec![
            (Kind::Contract, "coarse".to_string()),
            (Kind::Contract, "plain".to_string()),
            (Kind::Recipient, "both".to_string()),
        ]
    );
    // Their files are files the configuration names (a reload and the file watch read them).
    for file in [
        "contract-coarse.json",
        "contract-plain.json",
        "recipient-both.json",
    ] {
        assert!(
            config
                .origin
                .files
                .contains(&Path::new(".").join("certs").join(file)),
            "{file}: {:?}",
            config.origin.files
        );
    }
    // The recipient's implied budget is the strictest of its contracts'.
    let both = subjects(&config.contracts, &config.recipients)
        .pop()
        .unwrap();
    assert_eq!(both.policy["max_recovery_gain"], json!(0.05));
}

#[test]
fn a_certificate_of_the_same_release_certifies_and_any_change_is_named() {
    let clean = load(TEXT, &BTreeMap::new());
    let files = certify(&clean);
    let config = load(TEXT, &files);
    assert!(
        config
            .certification
            .entries()
            .iter()
            .all(|e| e.status.is_certified()),
        "{:?}",
        statuses(&config)
    );
    assert_eq!(config.certification.uncertified().count(), 0);

    // A changed view makes the contract and the recipient holding it stale, naming the field.
    let changed = load(
        &TEXT.replace("view = \"choice\"", "view = \"choice_confidence\""),
        &files,
    );
    let all = statuses(&changed);
    assert!(all[0].2.is_certified());
    let Status::Stale(changes) = &all[1].2 else {
        panic!("{all:?}")
    };
    assert_eq!(
        changes,
        &vec!["questions.cause.view: \"choice\" -> \"choice_confidence\"".to_string()]
    );
    let Status::Stale(changes) = &all[2].2 else {
        panic!("{all:?}")
    };
    assert_eq!(
        changes,
        &vec![
            "contracts.plain.questions.cause.view: \"choice\" -> \"choice_confidence\"".to_string()
        ]
    );

    // Each element of a release counts: usage, coarsening, withholding, the text, the budget.
    for (from, to, what) in [
        ("usage = \"drop\"", "usage = \"keep\"", "usage"),
        (
            "coarsen = { w = \"WX\", x = \"WX\" }",
            "coarsen = { w = \"WX\", x = \"WX\", y = \"WX\" }",
            "coarsen",
        ),
        (
            "withhold_labels = [\"z\"]",
            "withhold_labels = []",
            "withhold",
        ),
        ("Which cause?", "Which cause is it?", "instructions"),
        (
            "max_recovery_gain = 0.08",
            "max_recovery_gain = 0.2",
            "policy.max_recovery_gain",
        ),
        // Whose answers it releases, what callers may switch on, who shares its cache.
        (
            "provider = \"p\"\nusage = \"drop\"",
            "provider = \"q\"\nusage = \"drop\"",
            "providers",
        ),
        (
            "usage = \"drop\"",
            "usage = \"drop\"\nforward_headers = [\"TypeSafe-Danger-Zone-Long-Context\"]",
            "forward_headers",
        ),
        (
            "usage = \"drop\"",
            "usage = \"drop\"\ncache = { ttl_s = 60, max_bytes = 65536, scope = \"provider\" }",
            "shared_cache",
        ),
    ] {
        let changed = load(&TEXT.replace(from, to), &files);
        let Status::Stale(changes) = &statuses(&changed)[0].2 else {
            panic!("{what}: {:?}", statuses(&changed))
        };
        assert!(
            changes.iter().any(|c| c.contains(what)),
            "{what}: {changes:?}"
        );
    }
}

#[test]
fn a_certificate_that_is_not_a_passing_one_of_this_subject_is_invalid() {
    let clean = load(TEXT, &BTreeMap::new());
    let subject = subjects(&clean.contracts, &clean.recipients).remove(0);
    let good = Certificate::new(
        subject.kind,
        &subject.name,
        subject.release.clone(),
        subject.policy.clone(),
        json!({"verdict": "pass"}),
        json!({}),
        String::new(),
    );
    assert_eq!(judge(&subject, &good), Status::Certified);
    let invalid = |certificate: Certificate| {
        assert!(
            matches!(judge(&subject, &certificate), Status::Invalid(_)),
            "{certificate:?}"
        );
    };
    invalid(Certificate {
        gate: json!({"verdict": "inconclusive"}),
        ..good.clone()
    });
    invalid(Certificate {
        name: "plain".to_string(),
        ..good.clone()
    });
    invalid(Certificate {
        kind: Kind::Recipient,
        ..good.clone()
    });
    invalid(Certificate {
        format: "other/1".to_string(),
        ..good.clone()
    });
    // A release edited to match the configuration without its hash, and the other way round.
    let mut edited = good.clone();
    edited.release["questions"]["cause"]["view"] = json!("no_output");
    invalid(edited);
    invalid(Certificate {
        release_sha256: "0".repeat(64),
        ..good.clone()
    });

    // Files: unreadable, not JSON, or named by a name that cannot be a file.
    let read_error = |_: &Path| -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "no",
        ))
    };
    let status = |read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>| {
        check(
            Mode::Required,
            Some(PathBuf::from("d")),
            std::slice::from_ref(&subject),
            &[],
            true,
            read,
        )
        .entries()[0]
            .status
            .clone()
    };
    assert!(matches!(status(&read_error), Status::Invalid(_)));
    assert!(matches!(status(&|_| Ok(b"{".to_vec())), Status::Invalid(_)));
    assert!(matches!(
        status(&|_| Ok(vec![b' '; MAX_FILE_BYTES + 1])),
        Status::Invalid(_)
    ));
    for name in ["../x", "a/b", ".hidden", "", "a\\b"] {
        assert_eq!(Kind::Contract.file_name(name), None, "{name}");
    }
}

#[test]
fn only_required_mode_refuses_and_it_names_each_uncertified_subject() {
    let read_paths = RefCell::new(Vec::new());
    let read = |path: &Path| {
        read_paths.borrow_mut().push(path.to_path_buf());
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, "absent"))
    };
    let clean = load(TEXT, &BTreeMap::new());
    let subjects = subjects(&clean.contracts, &clean.recipients);
    let required = check(
        Mode::Required,
        Some(PathBuf::from("dir")),
        &subjects,
        &[],
        true,
        &read,
    );
    let refusal = required.refusal().unwrap();
    assert_eq!(refusal.len(), 3);
    assert!(refusal[0].starts_with("contract coarse: missing"));
    assert!(refusal[2].starts_with("recipient both: missing"));
    assert_eq!(
        read_paths.borrow()[0],
        PathBuf::from("dir").join("contract-coarse.json")
    );
    let advisory = check(
        Mode::Advisory,
        Some(PathBuf::from("dir")),
        &subjects,
        &[],
        true,
        &read,
    );
    assert_eq!(advisory.refusal(), None);
    assert_eq!(advisory.uncertified().count(), 3);
    // Without the codebooks nothing is read or judged.
    read_paths.borrow_mut().clear();
    let unchecked = check(
        Mode::Required,
        Some(PathBuf::from("dir")),
        &subjects,
        &[],
        false,
        &read,
    );
    assert!(read_paths.borrow().is_empty());
    assert!(
        unchecked
            .entries()
            .iter()
            .all(|e| e.status == Status::Unchecked)
    );
}

#[test]
fn the_release_hash_is_canonical_and_certification_needs_a_directory() {
    let a = json!({"b": 1.0, "a": [1, 2]});
    let b = json!({"a": [1, 2], "b": 1});
    assert_eq!(release_sha256(&a), release_sha256(&b));
    assert_ne!(
        release_sha256(&a),
        release_sha256(&json!({"a": [2, 1], "b": 1}))
    );
    let text = TEXT.replace("certificates = \"certs\"\n", "");
    match Config::from_toml(&text) {
        Err(crate::config::Error::Invalid(problems)) => {
            assert!(
                problems[0].contains("needs server.certificates"),
                "{problems:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_certificate_naming_the_workflows_by_their_legacy_hash_stays_valid() {
    // The shipped configuration's planner: a WCPQ question with frozen workflows.
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config"));
    let text = std::fs::read_to_string(dir.join("releasegate.toml")).unwrap();
    let read = |path: &Path| std::fs::read(path);
    let config = Config::from_toml_with(
        &text,
        "test",
        dir,
        Inputs {
            env: None,
            files: &read,
            codebooks: true,
        },
    )
    .unwrap();
    let subject = subjects(&config.contracts, &config.recipients)
        .into_iter()
        .find(|s| s.kind == Kind::Contract && s.name == "planner")
        .unwrap();
    let planner = config.contract("planner").unwrap();
    let legacy = describe_contract(planner, WorkflowsHash::Legacy);
    let hash = |release: &Value| {
        release["questions"]["coarse_cause"]["mechanism"]["workflows_sha256"].clone()
    };
    let spec = planner.questions["coarse_cause"]
        .workflows
        .as_ref()
        .unwrap();
    assert_eq!(hash(&subject.release), json!(spec.sha256()));
    assert_eq!(
        hash(&legacy),
        json!(crate::workflow::legacy_sha256(&spec.canonical_json()))
    );
    assert_eq!(subject.legacy_release_sha256, Some(release_sha256(&legacy)));
    let certificate = |release: Value| {
        Certificate::new(
            Kind::Contract,
            "planner",
            release,
            subject.policy.clone(),
            json!({"verdict": "pass"}),
            json!({}),
            "2026-12-05T00:00:00Z".to_string(),
        )
    };
    assert_eq!(
        judge(&subject, &certificate(subject.release.clone())),
        Status::Certified
    );
    assert_eq!(
        judge(&subject, &certificate(legacy.clone())),
        Status::Certified
    );
    // Of other workflows, under either hash, it is stale and says so.
    for mut other in [legacy, subject.release.clone()] {
        other["questions"]["coarse_cause"]["mechanism"]["workflows_sha256"] = json!("0".repeat(64));
        match judge(&subject, &certificate(other)) {
            Status::Stale(changes) => assert!(
                changes.iter().any(|c| c.contains("workflows_sha256")),
                "{changes:?}"
            ),
            status => panic!("{status:?}"),
        }
    }
    // A contract without WCPQ workflows has a single description.
    let plain = load(TEXT, &BTreeMap::new());
    assert!(
        subjects(&plain.contracts, &plain.recipients)
            .iter()
            .all(|s| s.legacy_release_sha256.is_none())
    );
}

#[test]
fn a_certificate_of_what_the_configuration_no_longer_gates_is_ungated() {
    let clean = load(TEXT, &BTreeMap::new());
    let mut files = certify(&clean);
    // The policy taken off `plain`: its certificate is still there. `both` still holds
    // `coarse`, which hides something, so it still needs its own.
    let text = TEXT.replace(
        "policy = { hide = [\"secret\"], max_recovery_gain = 0.05 }\n",
        "",
    );
    let dropped = load(&text, &files);
    let plain = statuses(&dropped)
        .into_iter()
        .find(|(k, n, _)| *k == Kind::Contract && n == "plain")
        .unwrap();
    assert_eq!(plain.2, Status::Ungated);
    assert!(
        dropped
            .origin
            .files
            .contains(&Path::new(".").join("certs").join("contract-plain.json"))
    );
    let required = load(
        &text.replace(
            "certification = \"advisory\"",
            "certification = \"required\"",
        ),
        &files,
    );
    let refusal = required.certification.refusal().unwrap();
    assert!(
        refusal
            .iter()
            .any(|line| line.starts_with("contract plain: ungated") && !line.contains("certify it")),
        "{refusal:?}"
    );
    // Removing the certificate confirms it: `plain` is no longer an entry.
    files.remove("contract-plain.json");
    let confirmed = load(&text, &files);
    assert!(
        statuses(&confirmed).iter().all(|(_, n, _)| n != "plain"),
        "{:?}",
        statuses(&confirmed)
    );
    // A recipient that needs no certificate of its own, holding one.
    files.insert(
        "recipient-free.json".to_string(),
        files["recipient-both.json"].clone(),
    );
    let free = load(TEXT, &files);
    assert!(
        statuses(&free).contains(&(Kind::Recipient, "free".to_string(), Status::Ungated)),
        "{:?}",
        statuses(&free)
    );
    // A contract without a policy and no certificate is no entry at all.
    assert!(statuses(&clean).iter().all(|(_, n, _)| n != "open"));
}
