//! The audit's run: groups per release and domain, the subview fits (in parallel), the
//! strategy selected on validation and scored on test, pooled recovery, utility intervals
//! and paired differences.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rayon::prelude::*;

use super::bootstrap::{self, Clusters, Estimate};
use super::ensemble::{self, DecoderCandidate, SubviewFit};
use super::group::Group;
use super::report::{
    self, DomainReport, Recovery, ReleaseReport, Report, Strategy, UtilityReport, WorldPrediction,
};
use super::representation::FieldSet;
use super::{
    Config, Error, Example, Input, ReleaseExamples, Split, WorkflowCosts, check_equivariance,
};
use releasegate_core::rng::Rng;

/// Runs the full audit: attacker fitting, selection and test scoring for every
/// release and domain, pooled results, equivariance checks and utility intervals.
pub fn run(input: &Input, config: &Config) -> Result<Report, Error> {
    check_input(input, config)?;
    // 1. Groups per release and domain.
    let groups = input
        .releases
        .iter()
        .map(release_groups)
        .collect::<Result<Vec<_>, _>>()?;
    // 2. Unique subview fits (identical data under a subview is fitted once).
    let fits = fit_all(&subview_jobs(&groups, config), config)?;
    // 3. Selection, scoring, pooling, utility.
    let mut releases = Vec::new();
    let mut all_series = Vec::new();
    for (release, release_groups) in input.releases.iter().zip(&groups) {
        let (report, series) = release_report(release, release_groups, &fits, input, config)?;
        releases.push(report);
        all_series.push(series);
    }
    // 4. Paired differences.
    add_paired(input, config, &all_series, &mut releases)?;
    Ok(Report {
        seed: config.seed,
        n_bootstrap: config.n_bootstrap,
        n_folds: config.n_folds,
        test_used_for_selection: false,
        equivariance_passed: releases.iter().all(|r| r.equivariance_passed),
        releases,
    })
}

/// Refuses an input without releases, with duplicate or empty releases or costs of an
/// unknown release, and a configuration with fewer than two folds.
fn check_input(input: &Input, config: &Config) -> Result<(), Error> {
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
    Ok(())
}

/// A release's examples grouped by domain (domains in name order), each group prepared.
fn release_groups(release: &ReleaseExamples) -> Result<Vec<Group>, Error> {
    let mut by_domain: BTreeMap<&str, Vec<(usize, &Example)>> = BTreeMap::new();
    for (i, ex) in release.examples.iter().enumerate() {
        by_domain
            .entry(ex.domain.as_str())
            .or_default()
            .push((i, ex));
    }
    by_domain
        .into_iter()
        .map(|(domain, examples)| Group::prepare(&release.name, domain, &examples))
        .collect()
}

/// One job per distinct (group data, subview), keyed by content, in first-seen order.
fn subview_jobs<'g>(
    groups: &'g [Vec<Group>],
    config: &Config,
) -> Vec<([u8; 32], &'g Group, FieldSet)> {
    let mut jobs = Vec::new();
    let mut seen = BTreeSet::new();
    for group in groups.iter().flatten() {
        for fields in group.fields.subviews() {
            let key = group.key(fields, config.n_folds);
            if seen.insert(key) {
                jobs.push((key, group, fields));
            }
        }
    }
    jobs
}

/// One release's report (its domains, pooled recovery and utility; no paired differences
/// yet) and its pooled test series.
fn release_report(
    release: &ReleaseExamples,
    groups: &[Group],
    fits: &BTreeMap<[u8; 32], Arc<SubviewFit>>,
    input: &Input,
    config: &Config,
) -> Result<(ReleaseReport, Series), Error> {
    let mut domains = Vec::new();
    let mut pooled = PooledSeries::default();
    for group in groups {
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
    let macro_accuracy = domains
        .iter()
        .map(|d| d.recovery.accuracy.mean)
        .sum::<f64>()
        / domains.len().max(1) as f64;
    let utility = utility(&release.name, &input.costs, config)?;
    let report = ReleaseReport {
        release: release.name.clone(),
        fields: FieldSet::observed(&release.examples),
        equivariance_passed: domains.iter().all(|d| d.equivariance.passed),
        domains,
        pooled: pooled_recovery,
        macro_accuracy,
        utility,
        paired: Vec::new(),
    };
    Ok((report, pooled.series))
}

/// Paired differences: each release minus each reference, world by world over the same
/// test pairs (each release with its own validation-selected attacker), resampling pairs.
fn add_paired(
    input: &Input,
    config: &Config,
    all_series: &[Series],
    releases: &mut [ReleaseReport],
) -> Result<(), Error> {
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
    Ok(())
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

/// The series of a release's groups, pair ids qualified by domain.
#[derive(Debug, Default)]
struct PooledSeries {
    series: Series,
}

// === impl Series ===

impl Series {
    /// Recovery, log loss, no-output accuracy and gain with pair-clustered intervals.
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
    /// Appends one domain's series.
    fn extend(&mut self, domain: &str, series: Series) {
        // Domain-qualified ids keep equal pair ids of different domains apart.
        self.series
            .pair_ids
            .extend(series.pair_ids.iter().map(|p| format!("{domain}\u{1f}{p}")));
        self.series.correct.extend(series.correct);
        self.series.log_loss.extend(series.log_loss);
        self.series.no_output.extend(series.no_output);
    }

    /// The pooled series' recovery.
    fn recovery(&self, n_bootstrap: usize, rng: &mut Rng) -> Result<Recovery, Error> {
        self.series.recovery(n_bootstrap, rng)
    }
}

/// The validation-selected strategy among `candidates` (only those on subview `only`, if
/// given).
fn strategy(
    group: &Group,
    candidates: &[DecoderCandidate],
    only: Option<FieldSet>,
) -> Option<(DecoderCandidate, Strategy)> {
    let pool: Vec<DecoderCandidate> = candidates
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

/// A group's domain report and test series under its selected strategy.
fn evaluate_group(
    group: &Group,
    fits: &[Arc<SubviewFit>],
    config: &Config,
) -> Result<(DomainReport, Series), Error> {
    let candidates: Vec<DecoderCandidate> = fits
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

/// The strategy selected without any released field (the no-output baseline).
fn strategy_for_none(
    group: &Group,
    candidates: &[DecoderCandidate],
) -> Option<(DecoderCandidate, Strategy)> {
    strategy(group, candidates, Some(FieldSet::NONE))
}

/// Pooled and per-domain mean realized cost intervals of `release`, per workflow.
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
