//! Private diagnostic reports: how the generator writes them and how the
//! simulated provider reads them.
//!
//! A report mixes neutral filler, one to three cue phrases of the true
//! mechanism and, sometimes, a hedged mention of a different mechanism (an
//! early theory, an unconfirmed claim). The provider reads reports the way a
//! shallow model would: it counts cue phrases and cannot tell a hedge from a
//! finding, so distractors blur what it infers. That is the report noise.

use crate::simulate::ontology::{self, Located};
use releasegate_core::rng::Rng;

/// Longest prefix of a text, in bytes, that the provider scans for cues.
pub(super) const MAX_SCAN_BYTES: usize = 64 * 1024;

/// Templates stating a finding; `{}` is replaced by a cue phrase.
const FINDINGS: [&str; 5] = [
    "The diagnostic cohort shows that {}.",
    "Re-testing confirms that {}.",
    "Investigators found that {}.",
    "The internal log records that {}.",
    "On inspection, {}.",
];

/// Templates mentioning a mechanism without confirming it.
const HEDGES: [&str; 3] = [
    "An early theory that {} was considered but not confirmed.",
    "The intake form claimed that {}, which the review could not reproduce.",
    "A similar case last month found that {}.",
];

/// Writes the private report of one world whose true mechanism is `truth`.
///
/// `context` is the public case context shared by the pair; it opens the report.
pub(super) fn compose(rng: &mut Rng, truth: Located, context: &str) -> String {
    let mut sentences: Vec<String> = Vec::new();
    let fillers = truth.domain.fillers;
    sentences.push(fillers[rng.below(fillers.len())].to_string());
    let n_cues = match rng.uniform() {
        u if u < 0.2 => 1,
        u if u < 0.65 => 2,
        _ => 3,
    };
    let mut cues = truth.mechanism.cues;
    rng.shuffle(&mut cues);
    for cue in &cues[..n_cues] {
        sentences.push(fill(FINDINGS[rng.below(FINDINGS.len())], cue));
    }
    if rng.uniform() < 0.45 {
        let other = distractor(rng, truth);
        let cue = other.mechanism.cues[rng.below(3)];
        sentences.push(fill(HEDGES[rng.below(HEDGES.len())], cue));
    }
    if rng.uniform() < 0.5 {
        sentences.push(fillers[rng.below(fillers.len())].to_string());
    }
    rng.shuffle(&mut sentences);
    let mut report = context.to_string();
    for sentence in sentences {
        report.push(' ');
        report.push_str(&sentence);
    }
    report
}

/// Counts, per mechanism, how many of its cue phrases occur in `text`
/// (ASCII case-insensitive, first [`MAX_SCAN_BYTES`] only). Only mechanisms
/// with at least one hit are returned, in ontology order.
pub(super) fn detect(text: &str) -> Vec<(Located, u32)> {
    let mut end = text.len().min(MAX_SCAN_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let lower = text[..end].to_ascii_lowercase();
    ontology::all_mechanisms()
        .filter_map(|located| {
            let hits = located
                .mechanism
                .cues
                .iter()
                .filter(|cue| lower.contains(*cue))
                .count() as u32;
            (hits > 0).then_some((located, hits))
        })
        .collect()
}

/// A mechanism other than `truth`: usually from the same class, sometimes
/// from another class of the same domain.
fn distractor(rng: &mut Rng, truth: Located) -> Located {
    let domain = truth.domain;
    let same_class = rng.uniform() < 0.7;
    let class = if same_class {
        truth.class
    } else {
        let others: Vec<_> = domain
            .classes
            .iter()
            .filter(|c| c.label != truth.class.label)
            .collect();
        others[rng.below(others.len())]
    };
    let candidates: Vec<_> = class
        .mechanisms
        .iter()
        .filter(|m| m.id != truth.mechanism.id)
        .collect();
    Located {
        domain,
        class,
        mechanism: candidates[rng.below(candidates.len())],
    }
}

fn fill(template: &str, cue: &str) -> String {
    let sentence = template.replacen("{}", cue, 1);
    let mut chars = sentence.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => sentence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_contain_the_truth_and_detection_finds_it() {
        let mut rng = Rng::new(3);
        for located in ontology::all_mechanisms() {
            for _ in 0..5 {
                let report = compose(&mut rng, located, located.class.contexts[0]);
                assert!(report.starts_with(located.class.contexts[0]));
                let hits = detect(&report);
                let truth = hits
                    .iter()
                    .find(|(l, _)| l.mechanism.id == located.mechanism.id)
                    .map(|(_, n)| *n);
                assert!(matches!(truth, Some(1..=3)), "{report}");
                assert!(hits.len() <= 2, "at most one distractor: {report}");
                let others: u32 = hits
                    .iter()
                    .filter(|(l, _)| l.mechanism.id != located.mechanism.id)
                    .map(|(_, n)| n)
                    .sum();
                assert!(others <= 1);
            }
        }
    }

    #[test]
    fn templates_carry_no_cue_and_detection_is_case_insensitive() {
        for template in FINDINGS.iter().chain(HEDGES.iter()) {
            assert!(detect(template).is_empty(), "{template}");
        }
        let hits = detect("LOG: Thread dumps show a lock cycle.");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0.mechanism.id, "deadlock_under_retry");
        assert!(detect("").is_empty());
        assert!(detect(&"é".repeat(MAX_SCAN_BYTES)).is_empty());
    }
}
