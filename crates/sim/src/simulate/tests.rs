use std::collections::BTreeMap;

use super::*;
use crate::worlds::{Split, World};

fn small() -> Options {
    Options {
        pairs_per_domain: 60,
        seed: 11,
    }
}

fn answer(world: &World) -> &Value {
    &world.response["answers"][COARSE_QUESTION]
}

/// Probabilities in the domain's canonical class order.
fn canonical_probabilities(world: &World) -> Vec<f64> {
    let domain = ontology::domain(&world.domain).expect("known domain");
    domain
        .classes
        .iter()
        .map(|c| {
            answer(world)["probabilities"][c.label]
                .as_f64()
                .unwrap_or(f64::NAN)
        })
        .collect()
}

fn labels(world: &World) -> &crate::worlds::Labels {
    world
        .labels
        .as_ref()
        .expect("generated worlds carry labels")
}

/// Recovery of a pair-aware nearest-centroid attacker that sees `features`,
/// trained on train + validation, scored on test.
fn recovery(worlds: &[World], features: impl Fn(&World) -> Vec<f64>) -> f64 {
    let mut sums: BTreeMap<&str, (Vec<f64>, f64)> = BTreeMap::new();
    for w in worlds.iter().filter(|w| w.split != Split::Test) {
        let f = features(w);
        let entry = sums
            .entry(labels(w).s.as_str())
            .or_insert_with(|| (vec![0.0; f.len()], 0.0));
        for (acc, x) in entry.0.iter_mut().zip(&f) {
            *acc += x;
        }
        entry.1 += 1.0;
    }
    let centroid = |s: &str| -> Option<Vec<f64>> {
        let (sum, n) = sums.get(s)?;
        Some(sum.iter().map(|x| x / n).collect())
    };
    let distance =
        |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum() };
    let test: Vec<&World> = worlds.iter().filter(|w| w.split == Split::Test).collect();
    let correct = test
        .iter()
        .filter(|w| {
            let l = labels(w);
            let f = features(w);
            let (Some(c0), Some(c1)) = (centroid(&l.hypotheses[0]), centroid(&l.hypotheses[1]))
            else {
                return false;
            };
            let guess = if distance(&f, &c1) < distance(&f, &c0) {
                &l.hypotheses[1]
            } else {
                &l.hypotheses[0]
            };
            *guess == l.s
        })
        .count();
    correct as f64 / test.len() as f64
}

/// Recovery of a pair-aware attacker that sees only the choice: it picks the
/// hypothesis under which the observed choice was more frequent in training
/// (Laplace-smoothed), the first hypothesis on ties.
fn choice_recovery(worlds: &[World]) -> f64 {
    let mut counts: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for w in worlds.iter().filter(|w| w.split != Split::Test) {
        let choice = answer(w)["choice"].as_str().unwrap_or("");
        *counts.entry((labels(w).s.as_str(), choice)).or_default() += 1.0;
        *totals.entry(labels(w).s.as_str()).or_default() += 1.0;
    }
    let rate = |s: &str, c: &str| {
        (counts.get(&(s, c)).copied().unwrap_or(0.0) + 1.0)
            / (totals.get(s).copied().unwrap_or(0.0) + 4.0)
    };
    let test: Vec<&World> = worlds.iter().filter(|w| w.split == Split::Test).collect();
    let correct = test
        .iter()
        .filter(|w| {
            let l = labels(w);
            let c = answer(w)["choice"].as_str().unwrap_or("");
            let guess = if rate(&l.hypotheses[1], c) > rate(&l.hypotheses[0], c) {
                &l.hypotheses[1]
            } else {
                &l.hypotheses[0]
            };
            *guess == l.s
        })
        .count();
    correct as f64 / test.len() as f64
}

fn coarse_accuracy(worlds: &[World]) -> f64 {
    let correct = worlds
        .iter()
        .filter(|w| answer(w)["choice"].as_str() == Some(labels(w).t.as_str()))
        .count();
    correct as f64 / worlds.len() as f64
}

#[test]
fn full_probabilities_leak_more_than_the_choice_alone() {
    let worlds = generate(&small()).expect("generates");
    let choice = choice_recovery(&worlds);
    let full = recovery(&worlds, canonical_probabilities);
    assert!(
        full > choice + 0.04,
        "full {full:.3} should beat choice {choice:.3}"
    );
    assert!(full > 0.56, "full {full:.3}");
    assert!(choice < 0.62, "choice {choice:.3}");
    let coarse = coarse_accuracy(&worlds);
    assert!((0.8..0.98).contains(&coarse), "coarse accuracy {coarse:.3}");
}

#[test]
fn same_seed_gives_identical_bytes_and_another_seed_differs() {
    let to_bytes = |options: &Options| {
        let worlds = generate(options).expect("generates");
        let mut out = Vec::new();
        crate::worlds::write_all(&mut out, &worlds).expect("writes");
        out
    };
    let options = Options {
        pairs_per_domain: 8,
        seed: 5,
    };
    let a = to_bytes(&options);
    assert_eq!(a, to_bytes(&options));
    assert_ne!(
        a,
        to_bytes(&Options {
            seed: 6,
            ..options.clone()
        })
    );
    let back = crate::worlds::read_all(a.as_slice()).expect("reads back");
    assert_eq!(back.len(), options.total_worlds());
}

#[test]
fn default_options_give_the_paper_split_sizes() {
    let options = Options::default();
    assert_eq!(options.total_pairs(), 720);
    let mut per_split: BTreeMap<Split, usize> = BTreeMap::new();
    let mut generator = Generator::new(&options);
    assert_eq!(generator.remaining(), 720);
    // Registration alone fixes the splits; check them through the first pairs
    // of the stream and the full plan counts.
    let first = generator.next().expect("a pair").expect("builds");
    assert_eq!(first[0].pair_id, "delivery-p0000");
    for pair in Generator::new(&Options {
        pairs_per_domain: 240,
        seed: 3,
    }) {
        let pair = pair.expect("builds");
        *per_split.entry(pair[0].split).or_default() += 1;
    }
    assert_eq!(per_split[&Split::Train], 432);
    assert_eq!(per_split[&Split::Validation], 144);
    assert_eq!(per_split[&Split::Test], 144);
}

#[test]
fn pairs_are_counterfactual_and_balanced() {
    let worlds = generate(&small()).expect("generates");
    assert_eq!(worlds.len(), small().total_worlds());
    let mut balance: BTreeMap<(String, String, Split), usize> = BTreeMap::new();
    let mut mechanism_use: BTreeMap<String, usize> = BTreeMap::new();
    for pair in worlds.chunks(2) {
        let (w0, w1) = (&pair[0], &pair[1]);
        assert_eq!(w0.pair_id, w1.pair_id);
        assert_eq!(w0.world_id, format!("{}-w0", w0.pair_id));
        assert_eq!(w1.world_id, format!("{}-w1", w1.pair_id));
        assert!(w0.pair_id.starts_with(&format!("{}-p", w0.domain)));
        assert_eq!(w0.split, w1.split, "pairs stay in one split");
        assert_eq!(w0.domain, w1.domain);
        let (l0, l1) = (labels(w0), labels(w1));
        assert_eq!(l0.question, COARSE_QUESTION);
        assert_eq!(l0.t, l1.t);
        assert_ne!(l0.s, l1.s);
        assert_eq!(l0.hypotheses, l1.hypotheses);
        assert!(l0.hypotheses[0] < l0.hypotheses[1]);
        assert!(l0.hypotheses.contains(&l0.s) && l0.hypotheses.contains(&l1.s));
        for l in [l0, l1] {
            let located = ontology::mechanism(&l.s).expect("known mechanism");
            assert_eq!(located.class.label, l.t);
            assert_eq!(located.domain.id, w0.domain);
            *mechanism_use.entry(l.s.clone()).or_default() += 1;
        }
        // Shared public context, recipient and question (text and order).
        let (s0, s1) = (&w0.request["state"], &w1.request["state"]);
        assert_eq!(s0["public"], s1["public"]);
        assert_eq!(s0["recipient"], s1["recipient"]);
        assert_eq!(w0.request["questions"], w1.request["questions"]);
        let order = |w: &World| -> Vec<String> {
            w.request["questions"][COARSE_QUESTION]["criteria"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(order(w0), order(w1));
        assert_eq!(order(w0).len(), 4);
        assert_ne!(
            s0["internal_report"], s1["internal_report"],
            "private reports differ"
        );
        *balance
            .entry((w0.domain.clone(), l0.t.clone(), w0.split))
            .or_default() += 1;
    }
    // 60 pairs per domain: 15 per class, split 9/3/3.
    assert_eq!(balance.len(), 3 * 4 * 3);
    for ((_, _, split), n) in &balance {
        let expected = match split {
            Split::Train => 9,
            Split::Validation | Split::Test => 3,
        };
        assert_eq!(*n, expected);
    }
    // 15 pairs per class: two full cycles of the six mechanism pairs (6 uses
    // per mechanism) plus three pairs of a third cycle.
    assert_eq!(mechanism_use.len(), 48);
    assert!(mechanism_use.values().all(|n| (6..=9).contains(n)));
    assert_eq!(mechanism_use.values().sum::<usize>(), 2 * worlds.len() / 2);
}

#[test]
fn responses_are_exactly_the_provider_answers_to_the_requests() {
    let worlds = generate(&Options {
        pairs_per_domain: 4,
        seed: 9,
    })
    .expect("generates");
    for w in &worlds {
        assert_eq!(respond(&w.request).expect("valid request"), w.response);
        assert_eq!(w.response["model"], LATEST_MODEL);
        assert!(w.request["state"]["internal_report"]["diagnostic_note"].is_string());
    }
}

#[test]
fn zero_pairs_and_odd_counts_work() {
    assert!(
        generate(&Options {
            pairs_per_domain: 0,
            seed: 1
        })
        .expect("generates")
        .is_empty()
    );
    let worlds = generate(&Options {
        pairs_per_domain: 7,
        seed: 1,
    })
    .expect("generates");
    assert_eq!(worlds.len(), 42);
}
