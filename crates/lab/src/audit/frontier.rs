//! The WCPQ privacy-utility frontier: for every admissibility budget α and codebook size K,
//! a compact codebook learned for **each contract question** from that question's own
//! training split and frozen workflows (`codebook::learn`). Questions share one learned
//! codebook only where they already share their strict codebook and `Codebook::can_pool`
//! says their specs are the same (the class count and the frozen workflows up to labels);
//! never across specs. Each setting is one audit candidate (the contracts with
//! those codebooks), and its worst per-output cost increase is measured on the test split
//! through the proxy's release path (`release::release`: the contract's view, withholding,
//! shape and fallback, the bytes read back as a recipient reads them), so the frontier has
//! no release rules of its own.

use std::sync::Arc;

use super::intake::CandidateRelease;
use super::report::Report;
use releasegate_core::codebook;
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{Mechanism, WcpqMechanism};
use releasegate_core::release::{self, Options};
use releasegate_core::rng::Rng;
use releasegate_core::wcpq::{Admissibility, Mapper};
use releasegate_core::wire;
use releasegate_core::workflow;
use releasegate_sim::dataset;
use releasegate_sim::worlds::{Split, World};

mod point;

pub use point::{CodebookPoint, Point, QuestionPoint};

/// Why the frontier cannot be drawn.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A contract audited with `--budgets` has no WCPQ question to learn a codebook for.
    #[error("contract `{0}` has no wcpq question: every contract audited with --budgets needs one")]
    NoWcpq(String),
    /// No training world fits a contract question.
    #[error(
        "contract `{contract}`, question `{question}`: no training world fits it, so no codebook can be learned"
    )]
    NoTraining {
        /// The contract.
        contract: String,
        /// The question.
        question: String,
    },
    /// Learning or mapping failed.
    #[error(
        "contract `{contract}`, question `{question}`, budget {budget}, K {max_codewords}: {reason}"
    )]
    Learn {
        /// The contract.
        contract: String,
        /// The question.
        question: String,
        /// α.
        budget: f64,
        /// K.
        max_codewords: usize,
        /// Why.
        reason: String,
    },
    /// A learned codebook that its contract question could not hold.
    #[error(transparent)]
    Candidate(#[from] releasegate_core::contract::DeriveError),
}

/// A contract's WCPQ question with its training and validation responses.
struct Question {
    contract: Arc<Contract>,
    id: String,
    strict: Arc<WcpqMechanism>,
    train: Vec<codebook::Response>,
    validation: Vec<codebook::Response>,
}

/// The frontier's candidate releases, one per (α, K), from the train split of `worlds`.
pub fn candidates(
    contracts: &[Arc<Contract>],
    worlds: &[World],
    budgets: &[f64],
    sizes: &[usize],
) -> Result<Vec<(CandidateRelease, Point)>, Error> {
    let mut questions = Vec::new();
    for contract in contracts {
        questions.extend(wcpq_questions(contract, worlds)?);
    }
    let groups = pooling_groups(&questions);
    let mut out = Vec::new();
    for &budget in budgets {
        for &max_codewords in sizes {
            let setting = Setting {
                budget,
                max_codewords,
            };
            let (candidate, mut point) = setting.learn(&questions, &groups)?;
            measure(contracts, worlds, &candidate, &mut point)?;
            out.push((candidate, point));
        }
    }
    Ok(out)
}

/// A contract's WCPQ questions with their training and validation responses (read once).
fn wcpq_questions(contract: &Arc<Contract>, worlds: &[World]) -> Result<Vec<Question>, Error> {
    let mut questions = Vec::new();
    for (id, rule) in contract.questions() {
        let Mechanism::Wcpq(strict) = &rule.mechanism() else {
            continue;
        };
        let spec = strict.mapper.spec();
        let of_split = |split: Split| -> Vec<codebook::Response> {
            worlds
                .iter()
                .filter(|world| world.split == split)
                .filter_map(|world| dataset::training_answer(contract, id, world, spec).ok())
                .map(|(response, _)| response)
                .collect()
        };
        let responses = of_split(Split::Train);
        if responses.is_empty() {
            return Err(Error::NoTraining {
                contract: contract.name().to_string(),
                question: id.clone(),
            });
        }
        let validation = of_split(Split::Validation);
        questions.push(Question {
            contract: contract.clone(),
            id: id.clone(),
            strict: strict.clone(),
            train: responses,
            validation,
        });
    }
    if questions.is_empty() {
        return Err(Error::NoWcpq(contract.name().to_string()));
    }
    Ok(questions)
}

/// The questions grouped (indices, in order) so that a group shares the strict codebook and
/// its specs pool.
fn pooling_groups(questions: &[Question]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (index, Question { strict, .. }) in questions.iter().enumerate() {
        let joins = groups.iter_mut().find(|group| {
            let first = &questions[group[0]].strict;
            first.codebook_sha256 == strict.codebook_sha256
                && codebook::Codebook::can_pool(first.mapper.spec(), strict.mapper.spec())
        });
        match joins {
            Some(group) => group.push(index),
            None => groups.push(vec![index]),
        }
    }
    groups
}

/// One setting (α, K) of the frontier.
#[derive(Debug, Clone, Copy)]
struct Setting {
    budget: f64,
    max_codewords: usize,
}

// === impl Setting ===

impl Setting {
    /// The setting's candidate (a codebook learned per pooling group) and its unmeasured point.
    fn learn(
        self,
        questions: &[Question],
        groups: &[Vec<usize>],
    ) -> Result<(CandidateRelease, Point), Error> {
        let release = format!("wcpq a={} K={}", self.budget, self.max_codewords);
        let mut candidate = CandidateRelease::uniform(release.clone(), None, None);
        let mut codebooks = Vec::new();
        let mut points = Vec::new();
        for (group_index, group) in groups.iter().enumerate() {
            let learned = self.learn_group(questions, group)?;
            codebooks.push(learned.point);
            for &i in group {
                let question = &questions[i];
                candidate.mechanisms.insert(
                    (question.contract.name().to_string(), question.id.clone()),
                    self.mechanism(question, &learned.codebook, &learned.sha256)
                        .map_err(|reason| self.fail(&questions[group[0]], reason))?,
                );
                points.push(QuestionPoint {
                    contract: question.contract.name().to_string(),
                    question: question.id.clone(),
                    codebook: group_index,
                    test_answers: 0,
                    covered_test_answers: 0,
                });
            }
        }
        Ok((
            candidate,
            Point::unmeasured(release, self, codebooks, points),
        ))
    }

    /// The codebook learned for one pooling group from its questions' pooled responses.
    fn learn_group(self, questions: &[Question], group: &[usize]) -> Result<Learned, Error> {
        let strict = &questions[group[0]].strict;
        let pooled = |part: fn(&Question) -> &[codebook::Response]| {
            group
                .iter()
                .flat_map(|&i| part(&questions[i]).iter().cloned())
                .collect::<Vec<_>>()
        };
        let responses = pooled(|q| &q.train);
        let validation = pooled(|q| &q.validation);
        let (learned, stats) = codebook::learn(
            strict.mapper.codebook(),
            strict.mapper.spec(),
            &responses,
            &validation,
            &codebook::Settings::new(self.budget, self.max_codewords),
        )
        .map_err(|error| self.fail(&questions[group[0]], error.to_string()))?;
        let sha256 = workflow::sha256_hex(&learned.to_json_bytes());
        let point = CodebookPoint {
            serves: group
                .iter()
                .map(|&i| format!("{}.{}", questions[i].contract.name(), questions[i].id))
                .collect(),
            codewords: stats.codewords,
            training_responses: responses.len(),
            covered_training_responses: stats.covered_responses,
            assignment: stats.assignment,
            trials: stats.trials,
        };
        Ok(Learned {
            codebook: learned,
            sha256,
            point,
        })
    }

    /// A question's mechanism under the learned codebook, bounded by the setting's α (or why
    /// the mapper refused it).
    fn mechanism(
        self,
        question: &Question,
        learned: &codebook::Codebook,
        sha256: &str,
    ) -> Result<Mechanism, String> {
        let strict = &question.strict;
        let mapper = Mapper::with_admissibility(
            learned.clone(),
            strict.mapper.spec().clone(),
            Admissibility::Budget(self.budget),
        )
        .map_err(|error| error.to_string())?;
        Ok(Mechanism::Wcpq(Arc::new(WcpqMechanism {
            mapper,
            fallback: strict.fallback,
            confidence: strict.confidence,
            codebook_sha256: sha256.to_string(),
        })))
    }

    /// The error of learning or mapping for `question` at this setting.
    fn fail(self, question: &Question, reason: String) -> Error {
        Error::Learn {
            contract: question.contract.name().to_string(),
            question: question.id.clone(),
            budget: self.budget,
            max_codewords: self.max_codewords,
            reason,
        }
    }
}

/// A codebook learned for one pooling group.
struct Learned {
    codebook: codebook::Codebook,
    sha256: String,
    point: CodebookPoint,
}

/// Coverage and the worst per-output cost increase on the test split, through the release
/// path: each test world released under the first contract it fits, exactly as the proxy
/// would, with the native and released answers read back as the frozen workflows read them.
fn measure(
    contracts: &[Arc<Contract>],
    worlds: &[World],
    candidate: &CandidateRelease,
    point: &mut Point,
) -> Result<(), Error> {
    let variants = contracts
        .iter()
        .map(|c| candidate.apply(c))
        .collect::<Result<Vec<Contract>, _>>()?;
    for world in worlds.iter().filter(|w| w.split == Split::Test) {
        let Some((contract, asked)) = variants
            .iter()
            .find_map(|c| wire::check_request(&world.request, c).ok().map(|a| (c, a)))
        else {
            continue;
        };
        // As the contract releases the world's provider's answers (none it lists: skipped).
        let Ok(contract) = releasegate_sim::dataset::released_by(contract, world) else {
            continue;
        };
        // WCPQ never draws randomness; a fixed generator keeps the release pure.
        let mut rng = Rng::new(0);
        let mut options = Options {
            rng: &mut rng,
            evaluate: true,
        };
        let Ok(released) = release::release(contract, &asked, &world.response, &mut options) else {
            continue;
        };
        for record in &released.answers {
            point.record(contract, record, asked.state());
        }
    }
    Ok(())
}
/// Fills the points' recovery and mean cost increase from the audit report.
pub fn fill(points: &mut [Point], report: &Report) {
    let native = report.releases.iter().find(|r| r.release == "full_native");
    for point in points {
        let Some(mine) = report.releases.iter().find(|r| r.release == point.release) else {
            continue;
        };
        point.recovery = Some(mine.pooled.accuracy);
        point.recovery_gain = Some(mine.pooled.gain);
        point.paired = mine
            .paired
            .iter()
            .map(|p| (p.reference.clone(), p.difference))
            .collect();
        for utility in &mine.utility {
            let base = native.and_then(|n| {
                n.utility
                    .iter()
                    .find(|u| u.workflow == utility.workflow)
                    .map(|u| u.pooled.mean)
            });
            point.mean_cost_increase.insert(
                utility.workflow.clone(),
                base.map(|base| utility.pooled.mean - base),
            );
        }
    }
}

#[cfg(test)]
mod tests;
