//! Saved worlds to the audit's input, through the contract's release path.
//!
//! Every candidate release is the contract itself with the view (and, for
//! mechanism releases, the mechanism) replaced; each world is released by
//! `release::release`, exactly as the proxy would (as the contract releases the
//! answers of the world's `provider`, with that provider's codebooks), and the attacker's
//! features are read from the released answer. Public request features are
//! fitted on the train split from the contract's `public` declarations.
//! Workflow costs are realized costs of the recipient's frozen workflows on
//! the released answers (Appendix C recipient policies for views without
//! probabilities: an empirical prior or a logistic posterior, picked per
//! policy on validation cost).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::{Example, Input, JointPart, ReleaseExamples, ReleasedFeatures};
use releasegate_core::contract::{Contract, DeriveError, Rerelease, View};
use releasegate_core::mechanism::{self, Mechanism};
use releasegate_core::release::{self, Options};
use releasegate_core::rng::Rng;
use releasegate_core::wire;
use releasegate_core::workflow;
use releasegate_sim::dataset;
use releasegate_sim::worlds::{self, World};

/// One candidate release: the contract with its views and mechanisms replaced.
#[derive(Debug, Clone)]
pub struct CandidateRelease {
    /// Unique name in the report.
    pub name: String,
    /// The view every question is released under, or `None` for each question's own.
    pub view: Option<View>,
    /// The mechanism of every question, or `None` for each question's own.
    pub mechanism: Option<Mechanism>,
    /// Mechanisms of single questions, by (contract, question): they take precedence over
    /// `mechanism` (the frontier's codebooks, learned per contract question).
    pub mechanisms: BTreeMap<(String, String), Mechanism>,
}

impl CandidateRelease {
    /// A candidate with one view and mechanism for every question.
    pub fn uniform(
        name: impl Into<String>,
        view: Option<View>,
        mechanism: Option<Mechanism>,
    ) -> CandidateRelease {
        CandidateRelease {
            name: name.into(),
            view,
            mechanism,
            mechanisms: BTreeMap::new(),
        }
    }

    /// `contract` released as this candidate releases it, checked as a configuration's
    /// question would be (`Contract::derive`): a candidate no configuration could hold is
    /// an error naming the contract and question, never audited.
    pub fn apply(&self, contract: &Contract) -> Result<Contract, DeriveError> {
        contract.derive(|question, _| {
            let key = (contract.name().to_string(), question.to_string());
            Rerelease {
                view: self.view,
                mechanism: self
                    .mechanisms
                    .get(&key)
                    .or(self.mechanism.as_ref())
                    .cloned(),
            }
        })
    }
}

/// The audit's candidate releases: every view of `views` (their names; `None`: all five)
/// as it is, the contracts' own release when one of their questions has a mechanism, and
/// every mechanism of `mechanisms` (`quantize[=step]`, `top_k[=k]`, `temperature[=tau]`,
/// `gaussian[=sigma]`, noise seeded with `seed`) under `full_native`. An unknown view or
/// mechanism is an error naming it.
pub fn candidates(
    views: Option<&[String]>,
    mechanisms: &[String],
    contracts: &[Arc<Contract>],
    seed: u64,
) -> Result<Vec<CandidateRelease>, String> {
    let mut candidates: Vec<CandidateRelease> = parse_views(views)?
        .into_iter()
        .map(|view| CandidateRelease::uniform(view.as_str(), Some(view), Some(Mechanism::None)))
        .collect();
    candidates.extend(own_release(contracts));
    for spec in mechanisms {
        candidates.push(mechanism_candidate(spec, seed)?);
    }
    Ok(candidates)
}

/// The views named by `names` (each trimmed), or all five.
fn parse_views(names: Option<&[String]>) -> Result<Vec<View>, String> {
    match names {
        None => Ok(View::ALL.to_vec()),
        Some(names) => names
            .iter()
            .map(|name| View::parse(name.trim()).ok_or_else(|| format!("unknown view `{name}`")))
            .collect(),
    }
}

/// The contracts' own release (`KIND (contract)`, after the first question with a
/// mechanism), when it is more than a plain view.
fn own_release(contracts: &[Arc<Contract>]) -> Option<CandidateRelease> {
    let rule = contracts
        .iter()
        .flat_map(|c| c.questions().values())
        .find(|rule| !matches!(rule.mechanism(), Mechanism::None))?;
    Some(CandidateRelease::uniform(
        format!("{} (contract)", rule.mechanism().kind()),
        None,
        None,
    ))
}

/// The candidate of one mechanism `spec` under `full_native`, named by the trimmed spec.
fn mechanism_candidate(spec: &str, seed: u64) -> Result<CandidateRelease, String> {
    let raw = mechanism::Raw::from_spec(spec, seed)?;
    // A mechanism of the command line is a baseline: it names no file to read.
    let no_files = |path: &std::path::Path| {
        Err(std::io::Error::other(format!(
            "{}: a command-line mechanism reads no file",
            path.display()
        )))
    };
    let mechanism = Mechanism::from_raw(raw, &[], None, std::path::Path::new("."), &no_files)
        .map_err(|reason| format!("`{spec}`: {reason}"))?;
    Ok(CandidateRelease::uniform(
        spec.trim(),
        Some(View::FullNative),
        Some(mechanism),
    ))
}

/// Which fields of a released answer the attacker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reading {
    /// The fields the contract releases, as sent (`Form::observe`): the
    /// paper's view representations, the same for complete and minimal releases.
    #[default]
    Released,
    /// Also the complete shape's fills, computed from the released fields
    /// (`Form::observe_with_fills`): the same for complete and minimal releases.
    WithFills,
}

/// Errors turning worlds into audit input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No world could be used.
    #[error("no labelled world fits the contract(s); nothing to audit")]
    Empty,
    /// A world's release failed in an unexpected way.
    #[error("world {world_id}: {reason}")]
    World {
        /// The world.
        world_id: String,
        /// Why.
        reason: String,
    },
    /// A candidate release no configuration could hold.
    #[error(transparent)]
    Candidate(#[from] DeriveError),
}

/// Worlds left out, and what mechanisms did, per release.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Intake {
    /// Worlds used.
    pub worlds_used: u64,
    /// Worlds left out, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Labelled worlds of the test split whose request one of the contracts accepts (the
    /// proxy refuses the others: nothing is released), used or not.
    pub labelled_test_worlds: u64,
    /// Labelled test worlds left out, by reason (also counted in `skipped`).
    pub left_out_test: BTreeMap<String, u64>,
    /// Per release: mechanism outcomes on every used world (covered, fallback reasons).
    pub mechanisms: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per release and workflow: the posterior the recipient policy uses.
    pub recipient_posteriors: BTreeMap<String, BTreeMap<String, String>>,
}

// === impl Intake ===

impl Intake {
    /// Labelled test worlds left out.
    pub fn left_out_test_worlds(&self) -> u64 {
        self.left_out_test.values().sum()
    }

    /// The share of labelled test worlds left out (0 without any).
    pub fn left_out_share(&self) -> f64 {
        if self.labelled_test_worlds == 0 {
            return 0.0;
        }
        self.left_out_test_worlds() as f64 / self.labelled_test_worlds as f64
    }

    /// Whether too many labelled test worlds are left out for a verdict on the contract
    /// (more than [`usable::MAX_LEFT_OUT_SHARE`]).
    pub fn too_many_left_out(&self) -> bool {
        self.left_out_share() > usable::MAX_LEFT_OUT_SHARE
    }
}

/// Why the audit of `contracts` leaves `world` out (`no_labels`,
/// `authorized_class_not_in_contract`, ...: the keys of [`Intake::skipped`]), or `None` when it
/// reads it.
pub fn left_out(contracts: &[Arc<Contract>], world: &World) -> Option<&'static str> {
    usable::usable_world(contracts, world).err()
}

/// A world that fits one of the contracts.
pub(super) struct Usable<'w> {
    /// The world.
    pub(super) world: &'w World,
    /// The first contract whose request it fits.
    pub(super) contract: usize,
    /// Its labelled question.
    pub(super) question: String,
    labels: Vec<String>,
    /// The authorized class among the question's released labels.
    pub(super) t_index: usize,
    s_index: usize,
    public: Vec<f64>,
}

/// Builds the audit input of `candidates` over `worlds` (each released under the
/// first contract whose request it fits).
pub fn build(
    contracts: &[Arc<Contract>],
    worlds: &[World],
    candidates: &[CandidateRelease],
    reading: Reading,
    seed: u64,
) -> Result<(Input, Intake), Error> {
    build_joint(contracts, &[], worlds, candidates, reading, seed)
}

/// As [`build`], and every example also carries what the same recipient receives for the
/// same world under each of `joint` (its other contracts, released as they say): the
/// attacker of `audit --recipient` reads all of them together. A world a joint contract
/// refuses (its request does not fit) contributes an empty part.
pub fn build_joint(
    contracts: &[Arc<Contract>],
    joint: &[Arc<Contract>],
    worlds: &[World],
    candidates: &[CandidateRelease],
    reading: Reading,
    seed: u64,
) -> Result<(Input, Intake), Error> {
    let mut intake = Intake::default();
    let mut usable = usable::select(contracts, worlds, &mut intake);
    if usable.is_empty() {
        return Err(Error::Empty);
    }
    public::extract(contracts, &mut usable);
    intake.worlds_used = usable.len() as u64;
    let mut input = Input::default();
    let releaser = Releaser {
        joint,
        usable: &usable,
        reading,
        seed,
    };
    for candidate in candidates {
        let variants = contracts
            .iter()
            .map(|c| candidate.apply(c))
            .collect::<Result<Vec<Contract>, _>>()?;
        let outcomes = intake.mechanisms.entry(candidate.name.clone()).or_default();
        let (examples, consumer) = releaser.release(candidate, &variants, outcomes)?;
        costs::costs(
            &mut input,
            &mut intake,
            candidate,
            contracts,
            &usable,
            &consumer,
        );
        input.releases.push(ReleaseExamples {
            name: candidate.name.clone(),
            examples,
        });
    }
    Ok((input, intake))
}

/// Releases the usable worlds under each candidate, as the proxy would.
struct Releaser<'a, 'w> {
    /// The recipient's other contracts, read together with each release.
    joint: &'a [Arc<Contract>],
    usable: &'a [Usable<'w>],
    reading: Reading,
    seed: u64,
}

// === impl Releaser ===

impl Releaser<'_, '_> {
    /// Every usable world released under `candidate` (`variants`: the contracts with it
    /// applied): the attacker's examples and what the recipient's workflows read; counts
    /// each mechanism outcome in `outcomes`.
    fn release(
        &self,
        candidate: &CandidateRelease,
        variants: &[Contract],
        outcomes: &mut BTreeMap<String, u64>,
    ) -> Result<(Vec<Example>, Vec<Option<workflow::Release>>), Error> {
        let mut examples = Vec::with_capacity(self.usable.len());
        let mut consumer = Vec::with_capacity(self.usable.len());
        for u in self.usable {
            // The contract as it releases the answers of the world's provider.
            let contract = dataset::released_by(&variants[u.contract], u.world)
                .map_err(|e| world_error(u.world, &e.to_string()))?;
            let asked = wire::check_request(&u.world.request, contract)
                .map_err(|e| world_error(u.world, &e.to_string()))?;
            let stream = format!("{}/{}/{}", self.seed, candidate.name, u.world.world_id);
            let released = release_saved(contract, &asked, u.world, &stream)?;
            if let Some(record) = released.answers.iter().find(|r| r.question == u.question) {
                *outcomes.entry(outcome_label(record.mechanism)).or_default() += 1;
            }
            // An answer left out of `answers` (no prediction, complete shape) reads as `null`.
            let answer = released_answer(&released, &u.question);
            let question = asked
                .questions
                .iter()
                .find(|q| q.id == u.question)
                .ok_or_else(|| world_error(u.world, "the question is not asked"))?;
            let rule = contract
                .questions()
                .get(&u.question)
                .ok_or_else(|| world_error(u.world, "the question is not in the contract"))?;
            let form = release::Form::new(question, rule, contract.shape());
            let features = ReleasedFeatures {
                usage: usable::released_usage(contract, &released),
                joint: joint_parts(self.joint, u, self.reading, self.seed)?,
                ..features_of(&form, self.reading, answer)
            };
            examples.push(example(u, features));
            consumer.push(release::read_released(&form, answer));
        }
        Ok((examples, consumer))
    }
}

/// A mechanism outcome as counted in `Intake::mechanisms`.
fn outcome_label(outcome: mechanism::Outcome) -> String {
    match outcome {
        mechanism::Outcome::Applied => "applied".to_string(),
        mechanism::Outcome::Covered { .. } => "covered".to_string(),
        mechanism::Outcome::Fallback(reason) => format!("fallback:{}", reason.label()),
    }
}

/// The attacker's example of a usable world with its released features.
fn example(u: &Usable<'_>, release: ReleasedFeatures) -> Example {
    Example {
        pair_id: u.world.pair_id.clone(),
        split: u.world.split,
        domain: u.world.domain.clone(),
        t: u.labels[u.t_index].clone(),
        t_index: u.t_index,
        hypotheses: labels_of(u.world)
            .map(|l| l.hypotheses.clone())
            .unwrap_or_default(),
        s_index: Some(u.s_index),
        release,
        public: u.public.clone(),
        class_count: u.labels.len(),
    }
}

/// What the recipient receives for `u`'s world under each joint contract.
fn joint_parts(
    joint: &[Arc<Contract>],
    u: &Usable<'_>,
    reading: Reading,
    seed: u64,
) -> Result<Vec<JointPart>, Error> {
    let t = &u.labels[u.t_index];
    let mut parts = Vec::with_capacity(joint.len());
    for contract in joint {
        let rule = contract.questions().get(&u.question).ok_or_else(|| {
            world_error(
                u.world,
                &format!(
                    "contract `{}` has no question `{}` to join",
                    contract.name(),
                    u.question
                ),
            )
        })?;
        let labels = rule.released_labels();
        // The authorized class in that contract's labels (its coarse label when it coarsens).
        let t_index = usable::released_class(rule, t);
        let mut part = JointPart {
            t_index: t_index.unwrap_or(0),
            class_count: labels.len(),
            ..JointPart::default()
        };
        // Released as that contract releases the world's provider's answers; a provider it
        // does not list never answers it (an empty part, as a refused request).
        let released_by = dataset::released_by(contract, u.world);
        if let Ok((contract, asked)) = released_by.and_then(|contract| {
            wire::check_request(&u.world.request, contract)
                .map(|asked| (contract, asked))
                .map_err(|_| dataset::Skip::RequestMismatch)
        }) {
            let stream = format!("{seed}/joint/{}/{}", contract.name(), u.world.world_id);
            let released = release_saved(contract, &asked, u.world, &stream)?;
            if let Some(question) = asked.questions.iter().find(|q| q.id == u.question) {
                let form = release::Form::new(question, rule, contract.shape());
                let answer = released_answer(&released, &u.question);
                let features = features_of(&form, reading, answer);
                part.choice = features.choice;
                part.probabilities = features.probabilities;
                part.confidence = features.confidence;
                part.usage = usable::released_usage(contract, &released);
            }
        }
        parts.push(part);
    }
    Ok(parts)
}

/// The released answer to `question` (`null` when it was left out of `answers`).
fn released_answer<'r>(released: &'r release::Release<'_>, question: &str) -> &'r wire::Json<'r> {
    const LEFT_OUT: &wire::Json<'static> = &wire::Json::Null;
    wire::Node::member(&released.body, "answers")
        .and_then(|answers| wire::Node::member(answers, question))
        .unwrap_or(LEFT_OUT)
}

/// Releases a world's saved answer under `contract` as the proxy would, with the random
/// stream named `stream` (unseeded noise stays reproducible per candidate and world).
fn release_saved<'a>(
    contract: &'a Contract,
    asked: &'a wire::Asked,
    world: &'a World,
    stream: &str,
) -> Result<release::Release<'a>, Error> {
    let mut rng = Rng::from_bytes(stream.as_bytes());
    let mut options = Options {
        rng: &mut rng,
        evaluate: false,
    };
    release::release(contract, asked, &world.response, &mut options).map_err(|e| {
        world_error(
            world,
            &format!(
                "the saved answer failed validation under `{}` ({e})",
                contract.name()
            ),
        )
    })
}

pub(super) fn world_error(world: &World, reason: &str) -> Error {
    Error::World {
        world_id: world.world_id.clone(),
        reason: reason.to_string(),
    }
}

fn labels_of(world: &World) -> Option<&worlds::Labels> {
    world.labels.as_ref()
}

/// The attacker's view of a released answer. By default exactly the fields
/// the contract releases for it, as they appear in the body (`Form::observe`):
/// the complete shape's fills are not features, since each is a known function
/// of the released fields (the attacker knows the contract) and adds no
/// information. `Reading::WithFills` adds them as features in both shapes
/// (computed from a minimal answer, read from a complete one): no new
/// information, but new feature transforms for the decoder library.
fn features_of<N: wire::Node>(
    form: &release::Form<'_>,
    reading: Reading,
    answer: &N,
) -> ReleasedFeatures {
    let observed = match reading {
        Reading::Released => form.observe(answer),
        Reading::WithFills => form.observe_with_fills(answer),
    };
    ReleasedFeatures {
        choice: observed.choice,
        probabilities: observed.probabilities,
        confidence: observed.confidence,
        usage: Default::default(),
        joint: Vec::new(),
    }
}

mod costs;
mod public;
pub mod usable;

#[cfg(test)]
mod tests;
