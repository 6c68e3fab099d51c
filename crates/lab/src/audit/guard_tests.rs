//! Tests of the guard: the relabelling, the record and real comparisons on simulated worlds.

use super::*;
use releasegate_core::config::{Config, Inputs};
use releasegate_core::mechanism;
use releasegate_sim::simulate;

fn quick() -> Settings {
    Settings {
        seed: 7,
        n_bootstrap: 300,
        threads: 0,
    }
}

fn learned() -> Learned {
    Learned {
        budget: 0.2,
        max_codewords: 64,
        pair_weight: 4,
    }
}

/// The shipped offline configuration's three contracts and simulated worlds.
fn setup(pairs_per_domain: usize) -> (Vec<Arc<Contract>>, Vec<World>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let text = std::fs::read_to_string(dir.join("tuple-bench.toml")).unwrap();
    let config = Config::from_toml_with(
        &text,
        "tuple-bench",
        &dir,
        Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        },
    )
    .unwrap();
    let worlds = simulate::generate(&simulate::Options {
        pairs_per_domain,
        seed: 5,
    })
    .unwrap();
    (config.contracts().values().cloned().collect(), worlds)
}

/// Every contract's own mechanism of the question, or `replace` for all.
fn mechanisms(
    contracts: &[Arc<Contract>],
    replace: Option<&Mechanism>,
) -> BTreeMap<String, Mechanism> {
    contracts
        .iter()
        .map(|c| {
            let own = &c.questions()[simulate::COARSE_QUESTION].mechanism();
            (c.name().to_string(), replace.unwrap_or(own).clone())
        })
        .collect()
}

#[test]
fn the_test_split_is_never_read_and_validation_is_what_is_scored() {
    let (_, worlds) = setup(40);
    let relabelled = relabel(&worlds, simulate::COARSE_QUESTION);
    let count = |list: &[World], split: Split| list.iter().filter(|w| w.split == split).count();
    // Validation becomes the scored split; test worlds are dropped.
    assert_eq!(
        count(&relabelled, Split::Test),
        count(&worlds, Split::Validation)
    );
    let ids = |list: &[World], split: Split| -> BTreeSet<String> {
        list.iter()
            .filter(|w| w.split == split)
            .map(|w| w.world_id.clone())
            .collect()
    };
    assert_eq!(
        ids(&relabelled, Split::Test),
        ids(&worlds, Split::Validation)
    );
    let test_ids = ids(&worlds, Split::Test);
    assert!(relabelled.iter().all(|w| !test_ids.contains(&w.world_id)));
    // The train split is divided by pair, about a quarter for selection.
    let train = count(&worlds, Split::Train);
    let selection = count(&relabelled, Split::Validation);
    assert_eq!(count(&relabelled, Split::Train) + selection, train);
    assert!(
        selection > train / 8 && selection < train / 2,
        "{selection} of {train}"
    );
    for world in relabelled.iter().filter(|w| w.split == Split::Validation) {
        assert!(selection_pair(&world.pair_id));
    }
    // Another question's worlds are not read.
    assert!(relabel(&worlds, "another_question").is_empty());
}

#[test]
fn too_few_validation_pairs_record_strict_without_figures() {
    let (contracts, worlds) = setup(20);
    let own = mechanisms(&contracts, None);
    let outcome = compare(
        &contracts,
        simulate::COARSE_QUESTION,
        &worlds,
        &own,
        &own,
        &quick(),
    );
    assert!(
        matches!(outcome, Err(Error::TooFewPairs { needed: MIN_VALIDATION_PAIRS, found }) if found < MIN_VALIDATION_PAIRS),
        "{outcome:?}"
    );
    let guard = record(learned(), &outcome, &quick());
    assert_eq!(guard.chosen, Chosen::Strict);
    assert!(
        guard.reason.contains("fewer than the 30"),
        "{}",
        guard.reason
    );
    assert!(guard.difference.is_none() && guard.strict_recovery.is_none());
}

#[test]
fn the_guard_keeps_only_a_release_shown_to_leak_less() {
    let (contracts, worlds) = setup(80);
    let question = simulate::COARSE_QUESTION;
    let native = mechanisms(&contracts, Some(&Mechanism::None));
    let choice = mechanism::Raw::from_spec("quantize=1", 1).unwrap();
    let no_files = |_: &std::path::Path| Err(std::io::Error::other("no files"));
    let choice =
        Mechanism::from_raw(choice, &[], None, std::path::Path::new("."), &no_files).unwrap();
    let one_hot = mechanisms(&contracts, Some(&choice));
    // The same release on both sides: a difference of exactly 0 is not shown to be below 0.
    let same = compare(&contracts, question, &worlds, &native, &native, &quick()).unwrap();
    assert_eq!((same.difference.mean, same.difference.upper), (0.0, 0.0));
    assert!(same.difference.n_pairs >= MIN_VALIDATION_PAIRS);
    let guard = record(learned(), &Ok(same), &quick());
    assert_eq!(guard.chosen, Chosen::Strict);
    assert!(guard.reason.contains("not shown"), "{}", guard.reason);
    // Both figures recorded, over the same pairs.
    let (Some(strict), Some(bounded)) = (guard.strict_recovery, guard.bounded_recovery) else {
        panic!("{guard:?}");
    };
    assert_eq!((strict.point, strict.pairs), (bounded.point, bounded.pairs));
    assert_eq!(strict.pairs, guard.difference.unwrap().pairs);
    // The full native answer against the choice alone, on the same pairs: the choice leaks
    // less, by the same amount whichever side it is on.
    let less = compare(&contracts, question, &worlds, &native, &one_hot, &quick()).unwrap();
    let more = compare(&contracts, question, &worlds, &one_hot, &native, &quick()).unwrap();
    assert!(less.difference.mean < 0.0, "{less:?}");
    assert_eq!(less.difference.mean, -more.difference.mean);
    assert_eq!(
        (less.strict.mean, less.bounded.mean),
        (more.bounded.mean, more.strict.mean)
    );
    // The rule on the figures: an upper bound below 0 keeps the bounded codebook.
    for (upper, chosen) in [
        (-0.01, Chosen::Bounded),
        (0.0, Chosen::Strict),
        (0.02, Chosen::Strict),
    ] {
        let difference = Estimate {
            upper,
            lower: upper - 0.1,
            mean: upper - 0.05,
            ..less.difference
        };
        let guard = record(learned(), &Ok(Comparison { difference, ..less }), &quick());
        assert_eq!(guard.chosen, chosen, "{guard:?}");
        assert_eq!(guard.difference.unwrap().upper, upper);
        assert!(guard.reason.starts_with(if chosen == Chosen::Bounded {
            "bounded"
        } else {
            "strict"
        }));
    }
}
