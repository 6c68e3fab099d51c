//! The audit report (deterministic, serializable) and its plain-text rendering.

use std::fmt::Write as _;

use serde::Serialize;

use super::bootstrap::Estimate;
use super::ensemble::Kind;
use super::representation::FieldSet;

/// The whole audit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Seed of the bootstrap streams.
    pub seed: u64,
    /// Bootstrap resamples per interval.
    pub n_bootstrap: usize,
    /// Grouped training folds.
    pub n_folds: usize,
    /// Always false: the test split is never used for fitting or selection.
    pub test_used_for_selection: bool,
    /// Whether the hypothesis-order check passed for every release and domain.
    pub equivariance_passed: bool,
    /// One entry per release, in input order.
    pub releases: Vec<ReleaseReport>,
}

/// Results for one release.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleaseReport {
    /// Release name.
    pub release: String,
    /// Fields present in the release.
    pub fields: FieldSet,
    /// Per-domain results, sorted by domain.
    pub domains: Vec<DomainReport>,
    /// All domains pooled (per-domain frozen strategies, pairs resampled across domains).
    pub pooled: Recovery,
    /// Unweighted mean of the domain test accuracies.
    pub macro_accuracy: f64,
    /// Whether the hypothesis-order check passed in every domain.
    pub equivariance_passed: bool,
    /// Mean realized cost per workflow (empty when no costs were supplied).
    pub utility: Vec<UtilityReport>,
    /// Recovery minus each reference release's, paired over the same test pairs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paired: Vec<Paired>,
}

/// A release's recovery minus a reference release's, world by world over the same test
/// pairs, with its pair-clustered interval: the comparison that decides between two releases
/// (two intervals of their own may overlap where the paired difference does not).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    /// The reference release.
    pub reference: String,
    /// Recovery of this release minus the reference's.
    pub difference: super::bootstrap::Estimate,
}

/// Results for one (release, domain).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DomainReport {
    /// Domain name.
    pub domain: String,
    /// Training worlds.
    pub n_train: usize,
    /// Validation worlds.
    pub n_validation: usize,
    /// Test worlds.
    pub n_test: usize,
    /// The frozen validation-selected strategy.
    pub strategy: Strategy,
    /// The strategy selected for the no-output baseline (no prediction field).
    pub no_output_strategy: Strategy,
    /// Test recovery of the frozen strategy.
    pub recovery: Recovery,
    /// Hypothesis-order equivariance check on the test worlds.
    pub equivariance: Equivariance,
    /// Per-world test predictions (empty unless requested).
    pub predictions: Vec<WorldPrediction>,
}

/// A frozen strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strategy {
    /// Candidate name (`subview/decoder`).
    pub name: String,
    /// The subview it reads.
    pub subview: String,
    /// What it is.
    pub kind: Kind,
    /// Base configurations and weights.
    pub members: Vec<(String, f64)>,
    /// Validation accuracy.
    pub validation_accuracy: f64,
    /// Validation log loss.
    pub validation_log_loss: f64,
    /// Number of candidates compared on validation.
    pub n_candidates: usize,
}

/// Test recovery with 95% pair-clustered intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Recovery {
    /// Accuracy of identifying the secret (mean of per-world correctness).
    pub accuracy: Estimate,
    /// Mean log loss.
    pub log_loss: Estimate,
    /// Accuracy of the no-output baseline on the same worlds.
    pub no_output_accuracy: Estimate,
    /// Accuracy minus no-output accuracy (paired per world).
    pub gain: Estimate,
}

/// Outcome of the hypothesis-order check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Equivariance {
    /// Whether every swapped prediction matched within tolerance.
    pub passed: bool,
    /// Largest `|p(swapped) - (1 - p(original))|`.
    pub max_deviation: f64,
    /// Worlds checked.
    pub n_checked: usize,
}

/// One test world's frozen prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorldPrediction {
    /// Index of the example in the caller's release list.
    pub example: usize,
    /// Pair id.
    pub pair_id: String,
    /// `P(hypothesis index 1 is the secret)` in the caller's order.
    pub p_index1: f64,
    /// Predicted hypothesis index.
    pub predicted: usize,
    /// Whether it is the secret.
    pub correct: bool,
}

/// Mean realized cost of one workflow under one release.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UtilityReport {
    /// Workflow name.
    pub workflow: String,
    /// All domains pooled.
    pub pooled: Estimate,
    /// Per domain, sorted by domain.
    pub domains: Vec<(String, Estimate)>,
}

// === impl Report ===

impl Report {
    /// Plain-text tables: recovery per release and domain, then utility.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let widths = Widths::of(self);
        self.write_recovery(&mut out, &widths);
        self.write_strategies(&mut out, &widths);
        if self.releases.iter().any(|r| !r.utility.is_empty()) {
            self.write_utility(&mut out, &widths);
        }
        if self.releases.iter().any(|r| !r.paired.is_empty()) {
            self.write_paired(&mut out);
        }
        out
    }

    /// The recovery table: a row per release and domain, then the release pooled.
    fn write_recovery(&self, out: &mut String, widths: &Widths) {
        let Widths { rw, dw, .. } = *widths;
        let _ = writeln!(
            out,
            "Secret recovery (test; 95% pair-clustered intervals, {} resamples; equivariance {})",
            self.n_bootstrap,
            if self.equivariance_passed {
                "passed"
            } else {
                "FAILED"
            }
        );
        let header = format!(
            "{:<rw$} {:<dw$} {:>5} {:<26} {:<22} {:<22} {:<22} {:>5}",
            "release",
            "domain",
            "n",
            "accuracy [95% CI]",
            "log loss [95% CI]",
            "no output",
            "gain [95% CI]",
            "equiv"
        );
        let _ = writeln!(out, "{header}");
        let _ = writeln!(out, "{}", "-".repeat(header.len()));
        for rel in &self.releases {
            for d in &rel.domains {
                let _ = writeln!(
                    out,
                    "{:<rw$} {:<dw$} {:>5} {:<26} {:<22} {:<22} {:<22} {:>5}",
                    rel.release,
                    d.domain,
                    d.n_test,
                    pct(&d.recovery.accuracy),
                    num(&d.recovery.log_loss),
                    pct(&d.recovery.no_output_accuracy),
                    points(&d.recovery.gain),
                    if d.equivariance.passed { "ok" } else { "FAIL" }
                );
            }
            let _ = writeln!(
                out,
                "{:<rw$} {:<dw$} {:>5} {:<26} {:<22} {:<22} {:<22} {:>5}",
                rel.release,
                "pooled",
                rel.pooled.accuracy.n,
                pct(&rel.pooled.accuracy),
                num(&rel.pooled.log_loss),
                pct(&rel.pooled.no_output_accuracy),
                points(&rel.pooled.gain),
                if rel.equivariance_passed {
                    "ok"
                } else {
                    "FAIL"
                }
            );
        }
    }

    /// The strategy each release and domain selected on the validation split.
    fn write_strategies(&self, out: &mut String, widths: &Widths) {
        let Widths { rw, dw, sw, .. } = *widths;
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Selected strategies (validation accuracy, then log loss, then fixed order)"
        );
        for rel in &self.releases {
            for d in &rel.domains {
                let _ = writeln!(
                    out,
                    "{:<rw$} {:<dw$} {:<sw$} val acc {:>6.2}%  val loss {:.4}",
                    rel.release,
                    d.domain,
                    d.strategy.name,
                    100.0 * d.strategy.validation_accuracy,
                    d.strategy.validation_log_loss
                );
            }
        }
    }

    /// The mean realized cost per release and workflow.
    fn write_utility(&self, out: &mut String, widths: &Widths) {
        let Widths { rw, ww, .. } = *widths;
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Mean realized cost (test; 95% pair-clustered intervals)"
        );
        let _ = writeln!(
            out,
            "{:<rw$} {:<ww$} {:>5} {:<28}",
            "release", "workflow", "n", "mean cost [95% CI]"
        );
        for rel in &self.releases {
            for u in &rel.utility {
                let _ = writeln!(
                    out,
                    "{:<rw$} {:<ww$} {:>5} {:<28}",
                    rel.release,
                    u.workflow,
                    u.pooled.n,
                    num(&u.pooled)
                );
            }
        }
    }

    /// Each release's recovery minus its references', over the same test pairs.
    fn write_paired(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nPaired differences (recovery minus the reference's, same test pairs; 95% pair-clustered intervals)"
        );
        for rel in &self.releases {
            for paired in &rel.paired {
                let d = &paired.difference;
                let _ = writeln!(
                    out,
                    "{} - {}: {:+.2} [{:+.2}, {:+.2}] points on {} pairs",
                    rel.release,
                    paired.reference,
                    100.0 * d.mean,
                    100.0 * d.lower,
                    100.0 * d.upper,
                    d.n_pairs
                );
            }
        }
    }
}

/// The text tables' column widths: each as wide as its longest name, so nothing is truncated.
#[derive(Debug, Clone, Copy)]
struct Widths {
    /// Release names.
    rw: usize,
    /// Domain names.
    dw: usize,
    /// Strategy names.
    sw: usize,
    /// Workflow names.
    ww: usize,
}

// === impl Widths ===

impl Widths {
    /// The widths `report`'s names need.
    fn of(report: &Report) -> Widths {
        let releases = &report.releases;
        Widths {
            rw: releases
                .iter()
                .map(|r| r.release.chars().count())
                .fold(24, usize::max),
            dw: releases
                .iter()
                .flat_map(|r| r.domains.iter().map(|d| d.domain.chars().count()))
                .fold(12, usize::max),
            sw: releases
                .iter()
                .flat_map(|r| r.domains.iter().map(|d| d.strategy.name.chars().count()))
                .fold(44, usize::max),
            ww: releases
                .iter()
                .flat_map(|r| r.utility.iter().map(|u| u.workflow.chars().count()))
                .fold(20, usize::max),
        }
    }
}

fn pct(e: &Estimate) -> String {
    format!(
        "{:.2}% [{:.2}, {:.2}]",
        100.0 * e.mean,
        100.0 * e.lower,
        100.0 * e.upper
    )
}

fn points(e: &Estimate) -> String {
    format!(
        "{:+.2} [{:+.2}, {:+.2}]",
        100.0 * e.mean,
        100.0 * e.lower,
        100.0 * e.upper
    )
}

fn num(e: &Estimate) -> String {
    format!("{:.4} [{:.4}, {:.4}]", e.mean, e.lower, e.upper)
}
