//! Leakage audit core: the TUPLE-Bench secret-recovery measurement (paper §5.4,
//! Appendix D) and pair-clustered utility summaries, as a pure library.
//!
//! For every release and domain a supervised, defense-aware attacker is fitted on
//! that release's own training worlds: it sees the released fields, the public
//! request features, the authorized class `T` and the two sorted hypotheses, and
//! predicts which hypothesis is the secret `S`. A library of base decoders is
//! fitted with four-fold grouped out-of-fold predictions (pairs kept together),
//! ensembles are built from those predictions, one strategy is chosen on
//! validation (accuracy, then log loss, then a fixed order), frozen, and scored
//! on test with 95% intervals from pair-clustered bootstrap resamples. Reading
//! worlds, running contracts and computing workflow costs happen elsewhere; this
//! module receives plain [`Example`]s and per-world costs and does no IO.
//! Method and paper mapping: `docs/audit.md`.

pub mod bootstrap;
pub mod checks;
pub mod decoders;
pub mod ensemble;
pub mod floor;
pub mod frontier;
pub mod gate;
pub mod group;
pub mod guard;
pub mod intake;
pub mod logistic;
pub mod report;
pub mod representation;
pub mod svg;
#[cfg(any(test, feature = "test-support"))]
pub mod synthetic;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use bootstrap::{Clusters, Estimate};
use ensemble::{Candidate, SubviewFit};
use group::Group;
use releasegate_core::rng::Rng;
use report::{
    DomainReport, Equivariance, Recovery, ReleaseReport, Report, Strategy, UtilityReport,
    WorldPrediction,
};
use representation::FieldSet;

/// Absolute and relative tolerance of the hypothesis-order check (paper F.1).
pub const EQUIVARIANCE_TOLERANCE: f64 = 1e-12;

/// Errors of the audit core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Nothing to audit.
    #[error("no releases to audit")]
    NoReleases,
    /// Two releases share a name.
    #[error("duplicate release name {0:?}")]
    DuplicateRelease(String),
    /// A release without worlds.
    #[error("release {0:?} has no examples")]
    EmptyRelease(String),
    /// An example fails validation.
    #[error("example {index} of release {release:?} is invalid: {reason}")]
    InvalidExample {
        /// Release name.
        release: String,
        /// Index in the release's example list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A (release, domain) group lacks a split.
    #[error("release {release:?} domain {domain:?} has no {split} examples")]
    EmptySplit {
        /// Release name.
        release: String,
        /// Domain name.
        domain: String,
        /// The empty split.
        split: Split,
    },
    /// Grouped cross-fitting needs two training pairs.
    #[error("release {release:?} domain {domain:?} needs at least two training pairs")]
    TooFewTrainingPairs {
        /// Release name.
        release: String,
        /// Domain name.
        domain: String,
    },
    /// A bootstrap over no observations.
    #[error("bootstrap needs at least one observation")]
    EmptySample,
    /// Values and pair ids of different lengths.
    #[error("values and pair ids differ in length")]
    LengthMismatch,
    /// A NaN or infinite cost.
    #[error("costs must be finite")]
    NonFinite,
    /// Costs name a release that is not audited.
    #[error("costs refer to unknown release {0:?}")]
    UnknownRelease(String),
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A fitting thread failed.
    #[error("a fitting worker failed")]
    Worker,
}

/// Dataset split of a world (the worlds format's own type).
pub use releasegate_sim::worlds::Split;

/// The release fields the recipient (and so the attacker) received for one world.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleasedFeatures {
    /// Selected class index in canonical class order, if released.
    pub choice: Option<usize>,
    /// Probabilities in canonical class order, if released; `None` entries are
    /// classes the release omitted (e.g. top-k). Non-finite values count as omitted.
    pub probabilities: Option<Vec<Option<f64>>>,
    /// Native confidence, if released.
    pub confidence: Option<f64>,
    /// The token counts the release carried, where the contract releases them (`usage`).
    #[serde(default, skip_serializing_if = "ReleasedUsage::is_empty")]
    pub usage: ReleasedUsage,
    /// What the same recipient received for the same world under its other contracts
    /// (`audit --recipient`): the attacker reads them together with this release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joint: Vec<JointPart>,
}

/// One more release of the same world to the same recipient, under another of its contracts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JointPart {
    /// Selected class index in that contract's label order, if released.
    pub choice: Option<usize>,
    /// Probabilities in that contract's label order, if released (`None`: omitted).
    pub probabilities: Option<Vec<Option<f64>>>,
    /// Confidence, if released.
    pub confidence: Option<f64>,
    /// The token counts that contract releases.
    #[serde(default, skip_serializing_if = "ReleasedUsage::is_empty")]
    pub usage: ReleasedUsage,
    /// Index of the authorized class among that contract's labels.
    pub t_index: usize,
    /// That contract's label count.
    pub class_count: usize,
}

/// A release's `usage` as the attacker reads it: each count the contract releases as
/// received (`None`: not released, or a count that carries nothing, such as the 0 of
/// `usage = "drop"` and the `output_tokens` 0 of `"input"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleasedUsage {
    /// `usage.input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<f64>,
    /// `usage.output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<f64>,
}

impl ReleasedUsage {
    /// Whether no count is released.
    pub fn is_empty(&self) -> bool {
        self.input_tokens.is_none() && self.output_tokens.is_none()
    }

    /// The counts, each finite or `None`.
    pub fn finite(&self) -> ReleasedUsage {
        ReleasedUsage {
            input_tokens: self.input_tokens.filter(|v| v.is_finite()),
            output_tokens: self.output_tokens.filter(|v| v.is_finite()),
        }
    }
}

/// One world as seen by the attacker, plus its label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// Pair id: grouping, folds and resampling only, never a feature.
    pub pair_id: String,
    /// Split.
    pub split: Split,
    /// Domain; everything is fitted and reported per domain.
    pub domain: String,
    /// Authorized class label (informational; `t_index` is what is used).
    pub t: String,
    /// Index of the authorized class in canonical class order.
    pub t_index: usize,
    /// The two registered hypotheses (any order; the library canonicalizes).
    pub hypotheses: [String; 2],
    /// Which hypothesis is the secret (0 or 1); required for audited worlds.
    pub s_index: Option<usize>,
    /// Released fields.
    pub release: ReleasedFeatures,
    /// Public request features extracted by the caller (shared within a pair).
    pub public: Vec<f64>,
    /// Number of classes of the question (2..=255).
    pub class_count: usize,
}

/// All worlds of one release (one per world, any domain mix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Release name (e.g. contract or view name); must be unique.
    pub name: String,
    /// The worlds.
    pub examples: Vec<Example>,
}

/// One world's realized cost of one frozen workflow (test worlds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostObservation {
    /// Pair id (resampling unit).
    pub pair_id: String,
    /// Domain.
    pub domain: String,
    /// Realized cost.
    pub cost: f64,
}

/// Realized costs of one workflow under one release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCosts {
    /// Release name (must match a [`Release`]).
    pub release: String,
    /// Workflow name.
    pub workflow: String,
    /// Per-world costs.
    pub observations: Vec<CostObservation>,
}

/// Everything the audit needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Releases, reported in this order.
    pub releases: Vec<Release>,
    /// Workflow costs (optional).
    pub costs: Vec<WorkflowCosts>,
}

/// Audit settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Seed of the bootstrap streams.
    pub seed: u64,
    /// Bootstrap resamples per interval (paper: 2,000).
    pub n_bootstrap: usize,
    /// Grouped training folds (paper: 4).
    pub n_folds: usize,
    /// Fitting threads; 0 uses the available parallelism. Results do not depend on it.
    pub threads: usize,
    /// Keep per-world test predictions in the report.
    pub keep_predictions: bool,
    /// Releases every other release is compared with, paired over the same test pairs
    /// (`ReleaseReport::paired`); names not audited are skipped.
    pub references: Vec<String>,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Config {
        Config {
            seed: 20261009,
            n_bootstrap: 2000,
            n_folds: 4,
            threads: 0,
            keep_predictions: false,
            references: vec!["no_output".to_string(), "wcpq (contract)".to_string()],
        }
    }
}

/// Compares predictions for original and hypothesis-swapped worlds (both as
/// `P(hypothesis index 1)` in their own order): each swapped value must equal
/// `1 - original` within absolute and relative tolerance 1e-12.
pub fn check_equivariance(original: &[f64], swapped: &[f64]) -> Equivariance {
    let mut max_deviation: f64 = 0.0;
    let mut passed = original.len() == swapped.len();
    for (p, s) in original.iter().zip(swapped) {
        let expected = 1.0 - p;
        let dev = (s - expected).abs();
        let within = dev <= EQUIVARIANCE_TOLERANCE + EQUIVARIANCE_TOLERANCE * expected.abs();
        if !within {
            passed = false;
        }
        max_deviation = if dev.is_nan() {
            f64::INFINITY
        } else {
            max_deviation.max(dev)
        };
    }
    Equivariance {
        passed,
        max_deviation,
        n_checked: original.len().min(swapped.len()),
    }
}

/// Runs the full audit: attacker fitting, selection and test scoring for every
/// release and domain, pooled results, equivariance checks and utility intervals.
pub fn run(input: &Input, config: &Config) -> Result<Report, Error> {
    if input.releases.is_empty() {
        return Err(Error::NoReleases);
    }
    if config.n_folds < 2 {
        return Err(Error::InvalidConfig(
            "at least two folds are needed".to_string(),
        ));
    }
    let mut names = BTreeSet::new();
    for release in &input.releases {
        if !names.insert(release.name.as_str()) {
            return Err(Error::DuplicateRelease(release.name.clone()));
        }
        if release.examples.is_empty() {
            return Err(Error::EmptyRelease(release.name.clone()));
        }
    }
    for costs in &input.costs {
        if !names.contains(costs.release.as_str()) {
            return Err(Error::UnknownRelease(costs.release.clone()));
        }
    }
    // 1. Groups per release and domain.
    let mut groups: Vec<Vec<Group>> = Vec::new();
    for release in &input.releases {
        let mut by_domain: BTreeMap<&str, Vec<(usize, &Example)>> = BTreeMap::new();
        for (i, ex) in release.examples.iter().enumerate() {
            by_domain
                .entry(ex.domain.as_str())
                .or_default()
                .push((i, ex));
        }
        let mut list = Vec::new();
        for (domain, examples) in by_domain {
            list.push(Group::prepare(&release.name, domain, &examples)?);
        }
        groups.push(list);
    }
    // 2. Unique subview fits (identical data under a subview is fitted once).
    let mut jobs: Vec<([u8; 32], &Group, FieldSet)> = Vec::new();
    let mut seen = BTreeSet::new();
    for group in groups.iter().flatten() {
        for fields in group.fields.subviews() {
            let key = group.key(fields, config.n_folds);
            if seen.insert(key) {
                jobs.push((key, group, fields));
            }
        }
    }
    let fits = fit_all(&jobs, config)?;
    // 3. Selection, scoring, pooling, utility.
    let mut releases = Vec::new();
    let mut all_series = Vec::new();
    for (release, release_groups) in input.releases.iter().zip(&groups) {
        let mut domains = Vec::new();
        let mut pooled = PooledSeries::default();
        for group in release_groups {
            let subview_fits: Vec<Arc<SubviewFit>> = group
                .fields
                .subviews()
                .into_iter()
                .filter_map(|f| fits.get(&group.key(f, config.n_folds)).cloned())
                .collect();
            let (report, series) = evaluate_group(group, &subview_fits, config)?;
            pooled.extend(&group.domain, series);
            domains.push(report);
        }
        let mut rng = Rng::new(config.seed).fork(&format!("recovery/{}/pooled", release.name));
        let pooled_recovery = pooled.recovery(config.n_bootstrap, &mut rng)?;
        all_series.push(pooled.series);
        let macro_accuracy = domains
            .iter()
            .map(|d| d.recovery.accuracy.mean)
            .sum::<f64>()
            / domains.len().max(1) as f64;
        let utility = utility(&release.name, &input.costs, config)?;
        releases.push(ReleaseReport {
            release: release.name.clone(),
            fields: FieldSet::observed(&release.examples),
            equivariance_passed: domains.iter().all(|d| d.equivariance.passed),
            domains,
            pooled: pooled_recovery,
            macro_accuracy,
            utility,
            paired: Vec::new(),
        });
    }
    // 4. Paired differences: each release minus each reference, world by world over the same
    // test pairs (each release with its own validation-selected attacker), resampling pairs.
    for (i, release) in input.releases.iter().enumerate() {
        for reference in &config.references {
            let Some(j) = input.releases.iter().position(|r| &r.name == reference) else {
                continue;
            };
            if i == j || all_series[i].pair_ids != all_series[j].pair_ids {
                continue;
            }
            let difference: Vec<f64> = all_series[i]
                .correct
                .iter()
                .zip(&all_series[j].correct)
                .map(|(a, b)| a - b)
                .collect();
            let ids: Vec<&str> = all_series[i].pair_ids.iter().map(String::as_str).collect();
            let clusters = Clusters::new(&ids, &[&difference])?;
            let mut rng =
                Rng::new(config.seed).fork(&format!("paired/{}/{}", release.name, reference));
            if let Some(estimate) = clusters.estimate(config.n_bootstrap, &mut rng).first() {
                releases[i].paired.push(report::Paired {
                    reference: reference.clone(),
                    difference: *estimate,
                });
            }
        }
    }
    Ok(Report {
        seed: config.seed,
        n_bootstrap: config.n_bootstrap,
        n_folds: config.n_folds,
        test_used_for_selection: false,
        equivariance_passed: releases.iter().all(|r| r.equivariance_passed),
        releases,
    })
}

/// Fits every job, on up to `config.threads` threads of a rayon pool (each fit is
/// keyed, so the result does not depend on the order they finish in).
fn fit_all(
    jobs: &[([u8; 32], &Group, FieldSet)],
    config: &Config,
) -> Result<BTreeMap<[u8; 32], Arc<SubviewFit>>, Error> {
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t,
    }
    .clamp(1, jobs.len().max(1));
    let fit = |(key, group, fields): &([u8; 32], &Group, FieldSet)| {
        (
            *key,
            Arc::new(ensemble::fit_subview(group, *fields, config.n_folds)),
        )
    };
    if threads == 1 {
        return Ok(jobs.iter().map(fit).collect());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|_| Error::Worker)?;
    Ok(pool.install(|| {
        jobs.par_iter()
            .map(fit)
            .collect::<Vec<_>>()
            .into_iter()
            .collect()
    }))
}

/// Per-world test series of one group, for pooling.
#[derive(Debug, Default)]
struct Series {
    pair_ids: Vec<String>,
    correct: Vec<f64>,
    log_loss: Vec<f64>,
    no_output: Vec<f64>,
}

#[derive(Debug, Default)]
struct PooledSeries {
    series: Series,
}

// === impl Series ===

impl Series {
    fn recovery(&self, n_bootstrap: usize, rng: &mut Rng) -> Result<Recovery, Error> {
        let gain: Vec<f64> = self
            .correct
            .iter()
            .zip(&self.no_output)
            .map(|(a, b)| a - b)
            .collect();
        let ids: Vec<&str> = self.pair_ids.iter().map(String::as_str).collect();
        let clusters = Clusters::new(
            &ids,
            &[&self.correct, &self.log_loss, &self.no_output, &gain],
        )?;
        let est = clusters.estimate(n_bootstrap, rng);
        match est.as_slice() {
            [accuracy, log_loss, no_output_accuracy, gain] => Ok(Recovery {
                accuracy: *accuracy,
                log_loss: *log_loss,
                no_output_accuracy: *no_output_accuracy,
                gain: *gain,
            }),
            _ => Err(Error::EmptySample),
        }
    }
}

// === impl PooledSeries ===

impl PooledSeries {
    fn extend(&mut self, domain: &str, series: Series) {
        // Domain-qualified ids keep equal pair ids of different domains apart.
        self.series
            .pair_ids
            .extend(series.pair_ids.iter().map(|p| format!("{domain}\u{1f}{p}")));
        self.series.correct.extend(series.correct);
        self.series.log_loss.extend(series.log_loss);
        self.series.no_output.extend(series.no_output);
    }

    fn recovery(&self, n_bootstrap: usize, rng: &mut Rng) -> Result<Recovery, Error> {
        self.series.recovery(n_bootstrap, rng)
    }
}

fn strategy(
    group: &Group,
    candidates: &[Candidate],
    only: Option<FieldSet>,
) -> Option<(Candidate, Strategy)> {
    let pool: Vec<Candidate> = candidates
        .iter()
        .filter(|c| only.is_none_or(|f| c.fields == f))
        .cloned()
        .collect();
    let (index, score) = ensemble::select(group, &pool)?;
    let chosen = pool.get(index)?.clone();
    let strategy = Strategy {
        name: chosen.name.clone(),
        subview: chosen.fields.name(),
        kind: chosen.kind.clone(),
        members: chosen
            .members
            .iter()
            .filter(|(_, w)| *w > 0.0)
            .cloned()
            .collect(),
        validation_accuracy: score.accuracy(),
        validation_log_loss: score.log_loss,
        n_candidates: pool.len(),
    };
    Some((chosen, strategy))
}

fn evaluate_group(
    group: &Group,
    fits: &[Arc<SubviewFit>],
    config: &Config,
) -> Result<(DomainReport, Series), Error> {
    let candidates: Vec<Candidate> = fits
        .iter()
        .flat_map(|f| ensemble::candidates(group, f))
        .collect();
    let missing = || Error::EmptySplit {
        release: group.release.clone(),
        domain: group.domain.clone(),
        split: Split::Validation,
    };
    let (chosen, strategy) = strategy(group, &candidates, None).ok_or_else(missing)?;
    let (baseline, no_output_strategy) =
        strategy_for_none(group, &candidates).ok_or_else(missing)?;
    let test = group.original_rows(Split::Test);
    let swapped = group.swapped_rows();
    let mut series = Series::default();
    let mut predictions = Vec::new();
    let mut original_p = Vec::with_capacity(test.len());
    for &i in &test {
        let row = &group.rows[i];
        let q = chosen.preds[i];
        let p_index1 = row.to_caller(q);
        let correct = ensemble::predicts_hi(q) == (row.y >= 0.5);
        let base_correct = ensemble::predicts_hi(baseline.preds[i]) == (row.y >= 0.5);
        series.pair_ids.push(row.pair_id.clone());
        series.correct.push(if correct { 1.0 } else { 0.0 });
        series.log_loss.push(ensemble::log_loss(q, row.y));
        series.no_output.push(if base_correct { 1.0 } else { 0.0 });
        original_p.push(p_index1);
        if config.keep_predictions {
            let predicted_hi = ensemble::predicts_hi(q);
            let predicted = if predicted_hi != row.reversed { 1 } else { 0 };
            predictions.push(WorldPrediction {
                example: row.source,
                pair_id: row.pair_id.clone(),
                p_index1,
                predicted,
                correct,
            });
        }
    }
    let swapped_p: Vec<f64> = swapped
        .iter()
        .map(|&i| group.rows[i].to_caller(chosen.preds[i]))
        .collect();
    let equivariance = check_equivariance(&original_p, &swapped_p);
    let mut rng =
        Rng::new(config.seed).fork(&format!("recovery/{}/{}", group.release, group.domain));
    let recovery = series.recovery(config.n_bootstrap, &mut rng)?;
    let report = DomainReport {
        domain: group.domain.clone(),
        n_train: group.original_rows(Split::Train).len(),
        n_validation: group.original_rows(Split::Validation).len(),
        n_test: test.len(),
        strategy,
        no_output_strategy,
        recovery,
        equivariance,
        predictions,
    };
    Ok((report, series))
}

fn strategy_for_none(group: &Group, candidates: &[Candidate]) -> Option<(Candidate, Strategy)> {
    strategy(group, candidates, Some(FieldSet::NONE))
}

fn utility(
    release: &str,
    costs: &[WorkflowCosts],
    config: &Config,
) -> Result<Vec<UtilityReport>, Error> {
    let mut out = Vec::new();
    for wc in costs.iter().filter(|c| c.release == release) {
        let values: Vec<f64> = wc.observations.iter().map(|o| o.cost).collect();
        let ids: Vec<String> = wc
            .observations
            .iter()
            .map(|o| format!("{}\u{1f}{}", o.domain, o.pair_id))
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut rng = Rng::new(config.seed).fork(&format!("cost/{release}/{}/pooled", wc.workflow));
        let pooled = bootstrap::mean_interval(&values, &refs, config.n_bootstrap, &mut rng)?;
        let mut by_domain: BTreeMap<&str, (Vec<f64>, Vec<&str>)> = BTreeMap::new();
        for o in &wc.observations {
            let entry = by_domain.entry(o.domain.as_str()).or_default();
            entry.0.push(o.cost);
            entry.1.push(o.pair_id.as_str());
        }
        let mut domains: Vec<(String, Estimate)> = Vec::new();
        for (domain, (v, p)) in by_domain {
            let mut rng =
                Rng::new(config.seed).fork(&format!("cost/{release}/{}/{domain}", wc.workflow));
            domains.push((
                domain.to_string(),
                bootstrap::mean_interval(&v, &p, config.n_bootstrap, &mut rng)?,
            ));
        }
        out.push(UtilityReport {
            workflow: wc.workflow.clone(),
            pooled,
            domains,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
