//! Synthetic paired worlds for benchmarks and tests: a paper-sized layout
//! (three domains, four classes, sixteen mechanisms, 720 pairs split
//! 432/144/144) whose native responses leak the mechanism through the
//! probability vector and confidence, plus release views derived from them.

use super::{
    CostObservation, Example, Input, ReleaseExamples, ReleasedFeatures, Split, WorkflowCosts,
};
use releasegate_core::rng::Rng;

/// Classes per domain.
pub const CLASSES: usize = 4;
/// Mechanisms per class.
pub const MECHANISMS_PER_CLASS: usize = 4;

/// One native response before any release view.
#[derive(Debug, Clone, PartialEq)]
pub struct Native {
    /// Example skeleton (release left empty).
    pub example: Example,
    /// Native probabilities.
    pub probabilities: Vec<f64>,
    /// Native choice.
    pub choice: usize,
    /// Native confidence.
    pub confidence: f64,
}

/// Generates `pairs_per_domain` pairs in each of `domains` domains. `signal`
/// scales how strongly a mechanism shifts the probability vector (0 = no leak).
pub fn natives(seed: u64, domains: usize, pairs_per_domain: usize, signal: f64) -> Vec<Native> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(domains * pairs_per_domain * 2);
    for d in 0..domains {
        let domain = format!("domain{d}");
        // A fixed leak direction per mechanism.
        let directions: Vec<Vec<f64>> = (0..CLASSES * MECHANISMS_PER_CLASS)
            .map(|_| (0..CLASSES).map(|_| rng.normal()).collect())
            .collect();
        for p in 0..pairs_per_domain {
            let t = rng.below(CLASSES);
            let a = rng.below(MECHANISMS_PER_CLASS);
            let mut b = rng.below(MECHANISMS_PER_CLASS - 1);
            if b >= a {
                b += 1;
            }
            let mut hyps = [format!("{domain}-c{t}-m{a}"), format!("{domain}-c{t}-m{b}")];
            hyps.sort();
            let ids = [
                t * MECHANISMS_PER_CLASS + a.min(b),
                t * MECHANISMS_PER_CLASS + a.max(b),
            ];
            let split = match p * 10 / pairs_per_domain.max(1) {
                0..=5 => Split::Train,
                6 | 7 => Split::Validation,
                _ => Split::Test,
            };
            let public: Vec<f64> = (0..4).map(|_| rng.normal()).collect();
            for (s, &mech) in ids.iter().enumerate() {
                let mut logits: Vec<f64> = (0..CLASSES)
                    .map(|c| if c == t { 2.0 } else { 0.0 })
                    .collect();
                for (c, l) in logits.iter_mut().enumerate() {
                    *l += signal * directions[mech][c] + 0.6 * rng.normal();
                }
                let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                let probabilities: Vec<f64> = exps.iter().map(|e| e / total).collect();
                let choice = (0..CLASSES)
                    .max_by(|&i, &j| probabilities[i].total_cmp(&probabilities[j]))
                    .unwrap_or(0);
                let confidence = (probabilities[choice] + 0.05 * rng.normal()).clamp(0.0, 1.0);
                out.push(Native {
                    example: Example {
                        pair_id: format!("{domain}-p{p:04}"),
                        split,
                        domain: domain.clone(),
                        t: format!("C{t}"),
                        t_index: t,
                        hypotheses: hyps.clone(),
                        s_index: Some(s),
                        release: ReleasedFeatures::default(),
                        public: public.clone(),
                        class_count: CLASSES,
                    },
                    probabilities,
                    choice,
                    confidence,
                });
            }
        }
    }
    out
}

/// Release view names produced by [`views`], in order.
pub const VIEW_NAMES: [&str; 7] = [
    "no_output",
    "choice",
    "choice_confidence",
    "choice_probabilities",
    "full",
    "top2",
    "quantized",
];

/// Derives the seven release views of [`VIEW_NAMES`] from native responses.
pub fn views(natives: &[Native]) -> Vec<ReleaseExamples> {
    VIEW_NAMES
        .iter()
        .map(|&name| ReleaseExamples {
            name: name.to_string(),
            examples: natives
                .iter()
                .map(|n| {
                    let probs = |f: &dyn Fn(usize, f64) -> Option<f64>| {
                        Some(
                            n.probabilities
                                .iter()
                                .enumerate()
                                .map(|(i, &p)| f(i, p))
                                .collect(),
                        )
                    };
                    let mut order: Vec<usize> = (0..n.probabilities.len()).collect();
                    order.sort_by(|&i, &j| n.probabilities[j].total_cmp(&n.probabilities[i]));
                    let release = match name {
                        "no_output" => ReleasedFeatures::default(),
                        "choice" => ReleasedFeatures {
                            choice: Some(n.choice),
                            ..ReleasedFeatures::default()
                        },
                        "choice_confidence" => ReleasedFeatures {
                            choice: Some(n.choice),
                            confidence: Some(n.confidence),
                            ..ReleasedFeatures::default()
                        },
                        "choice_probabilities" => ReleasedFeatures {
                            choice: Some(n.choice),
                            probabilities: probs(&|_, p| Some(p)),
                            confidence: None,
                            usage: Default::default(),
                            joint: Vec::new(),
                        },
                        "top2" => ReleasedFeatures {
                            choice: Some(n.choice),
                            probabilities: probs(&|i, p| order[..2].contains(&i).then_some(p)),
                            confidence: Some(n.confidence),
                            usage: Default::default(),
                            joint: Vec::new(),
                        },
                        "quantized" => ReleasedFeatures {
                            choice: Some(n.choice),
                            probabilities: probs(&|_, p| Some((p * 10.0).round() / 10.0)),
                            confidence: Some(n.confidence),
                            usage: Default::default(),
                            joint: Vec::new(),
                        },
                        _ => ReleasedFeatures {
                            choice: Some(n.choice),
                            probabilities: probs(&|_, p| Some(p)),
                            confidence: Some(n.confidence),
                            usage: Default::default(),
                            joint: Vec::new(),
                        },
                    };
                    Example {
                        release,
                        ..n.example.clone()
                    }
                })
                .collect(),
        })
        .collect()
}

/// Illustrative per-world test costs of three workflows for each view (a wrong
/// route costs 10, review 2; richer views review less often).
pub fn costs(releases: &[ReleaseExamples]) -> Vec<WorkflowCosts> {
    let mut out = Vec::new();
    for release in releases {
        for (w, workflow) in ["asymmetric", "clarification", "selective"]
            .iter()
            .enumerate()
        {
            let observations = release
                .examples
                .iter()
                .filter(|e| e.split == Split::Test)
                .map(|e| {
                    let r = &e.release;
                    let top = r
                        .probabilities
                        .as_ref()
                        .and_then(|p| p.iter().flatten().copied().reduce(f64::max))
                        .or(r.confidence);
                    let cost =
                        match (r.choice, top) {
                            (None, _) => 2.0,
                            (Some(c), Some(top)) if top < 0.5 + 0.1 * w as f64 => {
                                if c == e.t_index { 0.4 } else { 2.0 }
                            }
                            (Some(c), _) => {
                                if c == e.t_index {
                                    0.0
                                } else {
                                    10.0
                                }
                            }
                        };
                    CostObservation {
                        pair_id: e.pair_id.clone(),
                        domain: e.domain.clone(),
                        cost,
                    }
                })
                .collect();
            out.push(WorkflowCosts {
                release: release.name.clone(),
                workflow: workflow.to_string(),
                observations,
            });
        }
    }
    out
}

/// A paper-sized input: 3 domains x 240 pairs (1,440 worlds), seven views, costs.
pub fn paper_sized(seed: u64, signal: f64) -> Input {
    let natives = natives(seed, 3, 240, signal);
    let releases = views(&natives);
    let costs = costs(&releases);
    Input { releases, costs }
}
