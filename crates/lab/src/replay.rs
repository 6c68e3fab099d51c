//! Offline replay: applies a contract to every saved answer of a worlds file
//! through exactly the proxy's release path (`wire::check_request` then
//! `release::release`), writes the released worlds and summarizes.
//!
//! A recipient's view of a world is what the proxy would have sent: the
//! released body, or the proxy's error body when the request does not fit the
//! contract or the saved answer fails validation. Each world is released as the
//! contract releases the answers of the provider that answered it (its `provider`;
//! none: the contract's first), with that provider's WCPQ codebooks
//! (`Contract::for_provider`). A world naming a provider the contract does not list
//! is skipped and counted (`skipped`): the proxy never asks that provider, so it has
//! no recipient view to write.
//!
//! Replay reads worlds files as every offline tool does: a repeated world id or a pair
//! whose worlds are in different splits is an error naming both lines
//! (`worlds::Seen`), never replayed.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use rayon::prelude::*;
use serde::Serialize;
use serde_json::Value;

use releasegate_core::contract::{Contract, QuestionRule};
use releasegate_core::mechanism;
use releasegate_core::release;
use releasegate_core::rng::Rng;
use releasegate_core::wire;
use releasegate_core::workflow;
use releasegate_sim::dataset;
use releasegate_sim::worlds::{self, Reader, Writer};

/// Most rejected worlds listed one by one in the summary (all are counted).
pub const MAX_LISTED: usize = 1000;

/// Replay failures (the summary is not produced).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input line is malformed, or the output cannot be written.
    #[error(transparent)]
    Worlds(#[from] worlds::Error),
    /// The operating system gave no randomness for unseeded noise.
    #[error("no operating system randomness available")]
    Randomness,
    /// A worker thread panicked (a bug).
    #[error("a replay worker failed")]
    Worker,
}

/// What a replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The contract applied.
    pub contract: String,
    /// Worlds read (non-blank lines).
    pub worlds_read: u64,
    /// Worlds written.
    pub worlds_written: u64,
    /// Worlds released, by the provider that answered them.
    pub worlds_by_provider: BTreeMap<String, u64>,
    /// Worlds not replayed (not written): they name a provider the contract does not list.
    pub skipped: Rejections,
    /// Released answers by question and view.
    pub answers_released: BTreeMap<String, BTreeMap<String, u64>>,
    /// Saved answers rejected as invalid (the recipient would get a 502).
    pub rejected_answers: Rejections,
    /// Saved requests that do not fit the contract (the recipient would get a 400).
    pub rejected_requests: Rejections,
    /// Per-question mechanism counters.
    pub mechanisms: BTreeMap<String, MechanismSummary>,
}

/// Rejected worlds: counts by reason and the first `MAX_LISTED` occurrences.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Rejections {
    /// How many worlds.
    pub total: u64,
    /// Counts by reason.
    pub by_reason: BTreeMap<String, u64>,
    /// The first occurrences with their line numbers.
    pub worlds: Vec<Rejected>,
}

/// One rejected world.
#[derive(Debug, Clone, Serialize)]
pub struct Rejected {
    /// 1-based input line.
    pub line: usize,
    /// The world's id.
    pub world_id: String,
    /// Why.
    pub reason: String,
}

/// Counters of one question's mechanism.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MechanismSummary {
    /// The mechanism kind.
    pub kind: String,
    /// Answers the mechanism processed.
    pub answers: u64,
    /// WCPQ: answers released as a codeword.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub covered: Option<u64>,
    /// WCPQ: covered / answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
    /// WCPQ: covered answers by codebook stage (`compact`, `strict`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub covered_by_stage: BTreeMap<String, u64>,
    /// WCPQ: answers and covered answers per split (`train`, `validation`, `test`): a codebook
    /// built from the train split covers its own answers, so the held-out splits are the ones
    /// that tell what live traffic will see.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub coverage_by_split: BTreeMap<String, SplitCoverage>,
    /// WCPQ: fallbacks by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fallbacks: BTreeMap<String, u64>,
    /// With declared workflows: how the released answers change frozen workflows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflows: Option<WorkflowSummary>,
}

/// WCPQ coverage of one split.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SplitCoverage {
    /// Answers of the split.
    pub answers: u64,
    /// Of them, released as a codeword.
    pub covered: u64,
    /// covered / answers.
    pub coverage: f64,
}

/// Native versus released behaviour of the question's frozen workflows. Both
/// sides are read by `release::Form::read`: the native side is the native
/// answer as the recipient would have read it under the same view, withholding
/// and shape, so only the mechanism makes a difference.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkflowSummary {
    /// Frozen policies per answer.
    pub policies: usize,
    /// Answers compared.
    pub answers: u64,
    /// Policy-answer comparisons whose complete plans are equal.
    pub plans_agreeing: u64,
    /// All policy-answer comparisons.
    pub plan_comparisons: u64,
    /// plans_agreeing / plan_comparisons.
    pub plan_agreement: f64,
    /// Largest |realized cost(native) - realized cost(released)| over every
    /// policy and hypothetical true class.
    pub max_realized_cost_difference: f64,
    /// Largest realized-cost increase (released minus native, at least 0) of one
    /// policy on one answer for one hypothetical true class: what a bounded WCPQ
    /// budget caps. 0 under strict WCPQ.
    pub max_realized_cost_increase: f64,
    /// The same increase divided by the policy's wrong-route cost κ_j (largest
    /// over policies, answers and true classes): at most α under a WCPQ budget α.
    pub max_relative_cost_increase: f64,
    /// Answers whose released probabilities differ from the native ones.
    pub probabilities_changed: u64,
    /// Mean L1 distance between native and released probabilities (answers
    /// releasing probabilities; omitted entries count as 0).
    pub mean_probability_l1_change: f64,
    /// Answers whose released confidence differs from the native one.
    pub confidence_changed: u64,
    #[serde(skip)]
    l1_sum: f64,
    #[serde(skip)]
    l1_count: u64,
}

// === impl MechanismSummary ===

impl MechanismSummary {
    fn absorb(&mut self, other: MechanismSummary) {
        if self.kind.is_empty() {
            self.kind = other.kind;
        }
        self.answers += other.answers;
        if let Some(covered) = other.covered {
            *self.covered.get_or_insert(0) += covered;
        }
        if let Some(covered) = self.covered {
            self.coverage = Some(covered as f64 / self.answers.max(1) as f64);
        }
        for (reason, n) in other.fallbacks {
            *self.fallbacks.entry(reason).or_default() += n;
        }
        for (stage, n) in other.covered_by_stage {
            *self.covered_by_stage.entry(stage).or_default() += n;
        }
        for (split, theirs) in other.coverage_by_split {
            let mine = self.coverage_by_split.entry(split).or_default();
            mine.answers += theirs.answers;
            mine.covered += theirs.covered;
            mine.coverage = mine.covered as f64 / mine.answers.max(1) as f64;
        }
        match (&mut self.workflows, other.workflows) {
            (_, None) => {}
            (None, Some(theirs)) => self.workflows = Some(theirs),
            (Some(mine), Some(theirs)) => {
                mine.policies = mine.policies.max(theirs.policies);
                mine.answers += theirs.answers;
                mine.plans_agreeing += theirs.plans_agreeing;
                mine.plan_comparisons += theirs.plan_comparisons;
                mine.plan_agreement =
                    mine.plans_agreeing as f64 / mine.plan_comparisons.max(1) as f64;
                mine.max_realized_cost_difference = mine
                    .max_realized_cost_difference
                    .max(theirs.max_realized_cost_difference);
                mine.max_realized_cost_increase = mine
                    .max_realized_cost_increase
                    .max(theirs.max_realized_cost_increase);
                mine.max_relative_cost_increase = mine
                    .max_relative_cost_increase
                    .max(theirs.max_relative_cost_increase);
                mine.probabilities_changed += theirs.probabilities_changed;
                mine.confidence_changed += theirs.confidence_changed;
                mine.l1_sum += theirs.l1_sum;
                mine.l1_count += theirs.l1_count;
                mine.mean_probability_l1_change = mine.l1_sum / mine.l1_count.max(1) as f64;
            }
        }
    }

    /// Counts one released answer of a question under `rule`.
    fn record(
        &mut self,
        rule: &QuestionRule,
        record: &release::AnswerRecord,
        state: &Value,
        split: worlds::Split,
    ) {
        self.kind = rule.mechanism().kind().to_string();
        self.answers += 1;
        self.record_outcome(record.mechanism, split);
        if let (Some(spec), Some(evaluation)) = (&rule.workflows(), &record.evaluation) {
            self.workflows
                .get_or_insert_with(WorkflowSummary::default)
                .record(spec, evaluation, state);
        }
    }

    /// Counts the mechanism's outcome: coverage (overall, per split and per stage) and
    /// fallback reasons.
    fn record_outcome(&mut self, outcome: mechanism::Outcome, split: worlds::Split) {
        if matches!(
            outcome,
            mechanism::Outcome::Covered { .. } | mechanism::Outcome::Fallback(_)
        ) {
            let entry = self
                .coverage_by_split
                .entry(split.as_str().to_string())
                .or_default();
            entry.answers += 1;
            entry.covered += u64::from(matches!(outcome, mechanism::Outcome::Covered { .. }));
            entry.coverage = entry.covered as f64 / entry.answers as f64;
        }
        match outcome {
            mechanism::Outcome::Applied => {}
            mechanism::Outcome::Covered { stage, .. } => {
                *self.covered.get_or_insert(0) += 1;
                *self
                    .covered_by_stage
                    .entry(stage.label().to_string())
                    .or_default() += 1;
            }
            mechanism::Outcome::Fallback(reason) => {
                self.covered.get_or_insert(0);
                *self
                    .fallbacks
                    .entry(reason.label().to_string())
                    .or_default() += 1;
            }
        }
        if let Some(covered) = self.covered {
            self.coverage = Some(covered as f64 / self.answers as f64);
        }
    }
}

// === impl WorkflowSummary ===

impl WorkflowSummary {
    /// Compares the frozen workflows' plans and costs on the native and released answers.
    fn record(&mut self, spec: &workflow::Spec, evaluation: &release::Evaluation, state: &Value) {
        let native = spec.plans(&evaluation.native, state);
        let released = spec.plans(&evaluation.released, state);
        self.policies = native.len();
        self.answers += 1;
        self.plan_comparisons += native.len() as u64;
        self.plans_agreeing += native.iter().zip(&released).filter(|(a, b)| a == b).count() as u64;
        self.plan_agreement = self.plans_agreeing as f64 / self.plan_comparisons.max(1) as f64;
        if let (Some(before), Some(after)) = (
            &evaluation.native.probabilities,
            &evaluation.released.probabilities,
        ) {
            let l1: f64 = before.iter().zip(after).map(|(a, b)| (a - b).abs()).sum();
            self.l1_sum += l1;
            self.l1_count += 1;
            self.mean_probability_l1_change = self.l1_sum / self.l1_count as f64;
        }
        if evaluation.native.probabilities != evaluation.released.probabilities {
            self.probabilities_changed += 1;
        }
        if evaluation.native.confidence != evaluation.released.confidence {
            self.confidence_changed += 1;
        }
        let (absolute, relative) = spec.worst_increase(&native, &released);
        self.max_realized_cost_increase = self.max_realized_cost_increase.max(absolute);
        self.max_relative_cost_increase = self.max_relative_cost_increase.max(relative);
        for true_class in 0..spec.class_count() {
            let before = spec.realized_costs(&native, true_class);
            let after = spec.realized_costs(&released, true_class);
            for (a, b) in before.iter().zip(&after) {
                self.max_realized_cost_difference =
                    self.max_realized_cost_difference.max((a - b).abs());
            }
        }
    }
}

// === impl Rejections ===

impl Rejections {
    fn absorb(&mut self, other: Rejections) {
        self.total += other.total;
        for (reason, n) in other.by_reason {
            *self.by_reason.entry(reason).or_default() += n;
        }
        let room = MAX_LISTED.saturating_sub(self.worlds.len());
        self.worlds.extend(other.worlds.into_iter().take(room));
    }

    fn record(&mut self, line: usize, world_id: &str, reason: String, key: &str) {
        self.total += 1;
        *self.by_reason.entry(key.to_string()).or_default() += 1;
        if self.worlds.len() < MAX_LISTED {
            self.worlds.push(Rejected {
                line,
                world_id: world_id.to_string(),
                reason,
            });
        }
    }
}

/// Worlds handed to the workers at a time.
const BATCH: usize = 2048;

/// Replays every world of `input` under `contract` into `output`; `progress`
/// is called with the number of worlds done so far.
///
/// Lines are parsed and released in parallel batches (one contiguous slice
/// per available core, on rayon's pool); results are merged and written in
/// input order, so the output and the summary do not depend on the number of
/// cores.
pub fn replay<R: BufRead, W: Write>(
    contract: &Contract,
    input: Reader<R>,
    output: &mut Writer<W>,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, Error> {
    let mut summary = Summary {
        contract: contract.name().to_string(),
        ..Summary::default()
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8);
    let mut seeds = Vec::with_capacity(workers);
    for _ in 0..workers {
        seeds.push(releasegate_core::rng::os_seed().map_err(|_| Error::Randomness)?);
    }
    let mut rngs: Vec<Rng> = seeds.into_iter().map(Rng::new).collect();
    let mut input = input;
    let mut seen = worlds::Seen::default();
    seen.set_first_provider(contract.provider());
    let mut batch = read_batch(&mut input)?;
    while !batch.is_empty() {
        let chunk = batch.len().div_ceil(workers);
        let parts: Vec<Result<Part, Error>> = batch
            .par_chunks(chunk)
            .zip(rngs.par_iter_mut())
            .map(|(lines, rng)| process(contract, lines, rng))
            .collect();
        for part in parts {
            let part = part?;
            // In input order, before anything of the part is written.
            for (line, ids) in &part.ids {
                let ids = worlds::WorldIds {
                    provider: ids.provider.as_deref(),
                    domain: &ids.domain,
                    world_id: &ids.world_id,
                    pair_id: &ids.pair_id,
                    split: ids.split,
                };
                seen.check_ids(*line, &ids)?;
            }
            for line in &part.lines {
                output.write_line(line)?;
            }
            summary.absorb(part.summary);
        }
        progress(summary.worlds_read);
        batch = read_batch(&mut input)?;
    }
    output.flush()?;
    progress(summary.worlds_read);
    Ok(summary)
}

/// Reads up to `BATCH` non-blank lines.
fn read_batch<R: BufRead>(input: &mut Reader<R>) -> Result<Vec<(usize, String)>, Error> {
    let mut batch = Vec::with_capacity(BATCH);
    while batch.len() < BATCH {
        match input.next_line() {
            Some(line) => batch.push(line?),
            None => break,
        }
    }
    Ok(batch)
}

/// One worker's share of a batch: output lines, its partial summary and each world's line,
/// id, pair id and split (checked in input order when the parts are merged).
struct Part {
    lines: Vec<String>,
    summary: Summary,
    ids: Vec<(usize, OwnedIds)>,
}

/// A world's ids as [`worlds::Seen`] checks them, kept until its part is written.
struct OwnedIds {
    provider: Option<String>,
    domain: String,
    world_id: String,
    pair_id: String,
    split: worlds::Split,
}

fn process(contract: &Contract, lines: &[(usize, String)], rng: &mut Rng) -> Result<Part, Error> {
    let mut summary = Summary::default();
    let mut out = Vec::with_capacity(lines.len());
    let mut ids = Vec::with_capacity(lines.len());
    let mut options = release::Options {
        rng,
        evaluate: true,
    };
    for (line, text) in lines {
        let line = *line;
        let mut world = worlds::World::from_line(text, line)?;
        summary.worlds_read += 1;
        ids.push((
            line,
            OwnedIds {
                provider: world.provider.clone(),
                domain: world.domain.clone(),
                world_id: world.world_id.clone(),
                pair_id: world.pair_id.clone(),
                split: world.split,
            },
        ));
        let provider = dataset::answered_by(contract, &world).to_string();
        let Ok(contract) = dataset::released_by(contract, &world) else {
            let reason = dataset::Skip::ProviderNotInContract;
            summary.skipped.record(
                line,
                &world.world_id,
                format!(
                    "provider `{provider}` is not one of the contract's ({})",
                    contract.providers().join(", ")
                ),
                &reason.to_string(),
            );
            continue;
        };
        *summary.worlds_by_provider.entry(provider).or_default() += 1;
        world.response = match wire::check_request(&world.request, contract) {
            Err(error) => {
                let body = error.body();
                summary.rejected_requests.record(
                    line,
                    &world.world_id,
                    error.to_string(),
                    error.error_type(),
                );
                body
            }
            Ok(asked) => match release::release(contract, &asked, &world.response, &mut options) {
                Ok(released) => {
                    summary.count(contract, &released.answers, &world);
                    released.body.to_value()
                }
                Err(reason) => {
                    summary.rejected_answers.record(
                        line,
                        &world.world_id,
                        reason.to_string(),
                        &reason.to_string(),
                    );
                    release::invalid_answer_body(reason)
                }
            },
        };
        out.push(world.to_line()?);
        summary.worlds_written += 1;
    }
    Ok(Part {
        lines: out,
        summary,
        ids,
    })
}

// === impl Summary ===

impl Summary {
    /// Counts the answers released for `world` under `contract`.
    fn count(
        &mut self,
        contract: &Contract,
        answers: &[release::AnswerRecord],
        world: &worlds::World,
    ) {
        let state = world.request.get("state").unwrap_or(&Value::Null);
        for record in answers {
            *self
                .answers_released
                .entry(record.question.clone())
                .or_default()
                .entry(record.view.as_str().to_string())
                .or_default() += 1;
            if let Some(rule) = contract.questions().get(&record.question) {
                self.mechanisms
                    .entry(record.question.clone())
                    .or_default()
                    .record(rule, record, state, world.split);
            }
        }
    }

    /// Adds a later part's counts (input order is the caller's to keep).
    fn absorb(&mut self, other: Summary) {
        self.worlds_read += other.worlds_read;
        self.worlds_written += other.worlds_written;
        for (provider, n) in other.worlds_by_provider {
            *self.worlds_by_provider.entry(provider).or_default() += n;
        }
        self.skipped.absorb(other.skipped);
        for (question, views) in other.answers_released {
            let mine = self.answers_released.entry(question).or_default();
            for (view, n) in views {
                *mine.entry(view).or_default() += n;
            }
        }
        self.rejected_answers.absorb(other.rejected_answers);
        self.rejected_requests.absorb(other.rejected_requests);
        for (question, mechanism) in other.mechanisms {
            self.mechanisms
                .entry(question)
                .or_default()
                .absorb(mechanism);
        }
    }
}

#[cfg(test)]
mod tests;
