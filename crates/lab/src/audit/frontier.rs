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

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::bootstrap::Estimate;
use super::intake::CandidateRelease;
use super::report::Report;
use releasegate_core::codebook;
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{self, Mechanism, WcpqMechanism};
use releasegate_core::release::{self, Options};
use releasegate_core::rng::Rng;
use releasegate_core::wcpq::{Admissibility, Mapper};
use releasegate_core::wire;
use releasegate_core::workflow::{self, Plan};
use releasegate_sim::dataset;
use releasegate_sim::worlds::{Split, World};

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

/// One setting of the frontier.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The candidate's name in the report (`wcpq a=α K=K`).
    pub release: String,
    /// α.
    pub budget: f64,
    /// K.
    pub max_codewords: usize,
    /// The learned codebooks: one per contract question, or per group of questions that
    /// pool (the same strict codebook and specs `Codebook::can_pool` accepts).
    pub codebooks: Vec<CodebookPoint>,
    /// Every contract question's figures.
    pub questions: Vec<QuestionPoint>,
    /// Pooled test recovery (filled in after the audit).
    pub recovery: Option<Estimate>,
    /// Pooled recovery gain over no output.
    pub recovery_gain: Option<Estimate>,
    /// Recovery minus each reference release's (strict WCPQ as `wcpq (contract)`, no
    /// output), paired over the same test pairs.
    pub paired: BTreeMap<String, Estimate>,
    /// Per workflow (`family/profile`): mean realized cost of this release minus that of the
    /// `full_native` release (None when full_native is not audited or no costs exist).
    pub mean_cost_increase: BTreeMap<String, Option<f64>>,
    /// Per workflow: the worst realized-cost increase of one output over every hypothetical
    /// true class, on the test split, over every question (absolute).
    pub worst_increase: BTreeMap<String, f64>,
    /// The same relative to the workflow's κ (at most α for covered answers).
    pub worst_relative_increase: BTreeMap<String, f64>,
    /// Per workflow family: test answers whose release changes the plan of at least one of
    /// the family's workflows (strict WCPQ changes none; each one is an answer the budget moved).
    pub moved: BTreeMap<String, usize>,
    /// Test answers released, and how many of them were covered.
    pub test_answers: usize,
    /// Covered test answers.
    pub covered_test_answers: usize,
}

// === impl Point ===

impl Point {
    /// A setting's point before the test split is measured and the audit fills it.
    fn unmeasured(
        release: String,
        setting: Setting,
        codebooks: Vec<CodebookPoint>,
        questions: Vec<QuestionPoint>,
    ) -> Point {
        Point {
            release,
            budget: setting.budget,
            max_codewords: setting.max_codewords,
            codebooks,
            questions,
            recovery: None,
            recovery_gain: None,
            paired: BTreeMap::new(),
            mean_cost_increase: BTreeMap::new(),
            worst_increase: BTreeMap::new(),
            worst_relative_increase: BTreeMap::new(),
            moved: BTreeMap::new(),
            test_answers: 0,
            covered_test_answers: 0,
        }
    }

    /// Counts one released test answer of a WCPQ question this point serves, and what its
    /// release did to the frozen workflows' plans and costs.
    fn record(&mut self, contract: &Contract, record: &release::AnswerRecord, state: &Value) {
        let Some(rule) = contract.questions().get(&record.question) else {
            return;
        };
        let Mechanism::Wcpq(wcpq) = &rule.mechanism() else {
            return;
        };
        let Some(entry) = self
            .questions
            .iter_mut()
            .find(|q| q.contract == contract.name() && q.question == record.question)
        else {
            return;
        };
        entry.test_answers += 1;
        self.test_answers += 1;
        if matches!(record.mechanism, mechanism::Outcome::Covered { .. }) {
            entry.covered_test_answers += 1;
            self.covered_test_answers += 1;
        }
        // A denied answer carries nothing a workflow acts on.
        let Some(evaluation) = &record.evaluation else {
            return;
        };
        let spec = wcpq.mapper.spec();
        let before = spec.plans(&evaluation.native, state);
        let after = spec.plans(&evaluation.released, state);
        self.count_moved(spec, &before, &after);
        self.raise_worst(spec, &before, &after);
    }

    /// Counts the answer once for every workflow family whose plan it changed.
    fn count_moved(&mut self, spec: &workflow::Spec, before: &[Plan], after: &[Plan]) {
        let mut families: Vec<&str> = spec
            .policies()
            .iter()
            .zip(before.iter().zip(after))
            .filter(|(_, (b, a))| b != a)
            .map(|(policy, _)| policy.family.name())
            .collect();
        families.sort_unstable();
        families.dedup();
        for policy in spec.policies() {
            self.moved
                .entry(policy.family.name().to_string())
                .or_insert(0);
        }
        for family in families {
            *self.moved.entry(family.to_string()).or_insert(0) += 1;
        }
    }

    /// Raises each workflow's worst cost increase (absolute and relative to κ) to this
    /// answer's, over every hypothetical true class.
    fn raise_worst(&mut self, spec: &workflow::Spec, before: &[Plan], after: &[Plan]) {
        for (j, policy) in spec.policies().iter().enumerate() {
            let name = format!("{}/{}", policy.family.name(), policy.profile.name());
            let mut worst = 0.0f64;
            for t in 0..spec.class_count() {
                worst = worst
                    .max(policy.realized_cost(&after[j], t) - policy.realized_cost(&before[j], t));
            }
            let absolute = self.worst_increase.entry(name.clone()).or_insert(0.0);
            *absolute = absolute.max(worst);
            let relative = self.worst_relative_increase.entry(name).or_insert(0.0);
            *relative = relative.max(worst / policy.kappa());
        }
    }

    /// The worst per-output cost increase relative to κ over every workflow (0 when there are
    /// none).
    pub fn worst_relative_over_workflows(&self) -> f64 {
        self.worst_relative_increase
            .values()
            .copied()
            .fold(0.0f64, f64::max)
    }
}

/// One learned codebook at one setting.
#[derive(Debug, Clone, Serialize)]
pub struct CodebookPoint {
    /// The questions it serves (`contract.question`).
    pub serves: Vec<String>,
    /// Codewords it kept (at most K).
    pub codewords: usize,
    /// Training responses it was learned from (its questions' train splits).
    pub training_responses: usize,
    /// Training responses it covers.
    pub covered_training_responses: usize,
    /// The assignment chosen on the validation split.
    pub assignment: Option<codebook::Assignment>,
    /// Every assignment tried, with its validation figures.
    pub trials: Vec<codebook::Trial>,
}

/// A contract's WCPQ question with its training and validation responses.
struct Question {
    contract: Arc<Contract>,
    id: String,
    strict: Arc<WcpqMechanism>,
    train: Vec<codebook::Response>,
    validation: Vec<codebook::Response>,
}

/// One contract question at one setting.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionPoint {
    /// The contract.
    pub contract: String,
    /// The question.
    pub question: String,
    /// Its codebook (an index into `Point::codebooks`).
    pub codebook: usize,
    /// Test answers released under it, and how many were covered.
    pub test_answers: usize,
    /// Covered test answers.
    pub covered_test_answers: usize,
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
mod tests {
    use super::*;
    use releasegate_core::config::{Config, Inputs};
    use releasegate_core::workflow::Spec;
    use releasegate_sim::simulate;
    use serde_json::Value;

    /// A cost matrix for `n` classes: n + 1 rows (the last is review), 0 on the diagonal.
    fn matrix(n: usize) -> String {
        let rows: Vec<String> = (0..=n)
            .map(|r| {
                let row: Vec<String> = (0..n)
                    .map(|c| match (r, c) {
                        (r, _) if r == n => "1.8".to_string(),
                        (r, c) if r == c => "0.0".to_string(),
                        (r, c) => format!("{}.0", 4 + (r + 2 * c) % 7),
                    })
                    .collect();
                format!("[{}]", row.join(", "))
            })
            .collect();
        format!("[{}]", rows.join(", "))
    }

    /// Three contracts over one question id with 3, 4 and 5 classes, each with a strict
    /// codebook built from its own training worlds, and the worlds (the simulator's delivery
    /// cases, a third per contract, asked with that contract's labels and answered by the
    /// simulated provider).
    fn setup() -> (Vec<Arc<Contract>>, Vec<World>, tempfile::TempDir) {
        let label_sets: [&[&str]; 3] = [
            &["DELAY", "ADDRESS", "DAMAGE"],
            &["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"],
            &["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD", "OTHER"],
        ];
        let generated = simulate::generate(&simulate::Options {
            pairs_per_domain: 60,
            seed: 3,
        })
        .unwrap();
        let mut worlds = Vec::new();
        for (index, world) in generated
            .into_iter()
            .filter(|w| w.domain == "delivery")
            .enumerate()
        {
            let labels = label_sets[(index / 2) % 3];
            let mut world = world;
            let criteria: serde_json::Map<String, Value> = labels
                .iter()
                .map(|l| (l.to_string(), Value::Null))
                .collect();
            world.request["questions"][simulate::COARSE_QUESTION] =
                serde_json::json!({"type": "choice", "criteria": criteria});
            world.response = simulate::respond(&world.request).unwrap();
            worlds.push(world);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut text = "[providers.p]\nkind = \"simulated\"\n".to_string();
        for labels in label_sets {
            let n = labels.len();
            let quoted: Vec<String> = labels.iter().map(|l| format!("\"{l}\"")).collect();
            text.push_str(&format!(
                "[contracts.c{n}]\nprovider = \"p\"\n[contracts.c{n}.questions.coarse_cause]\n\
                 classes = [{}]\nview = \"full_native\"\n\
                 mechanism = {{ kind = \"wcpq\", codebook = \"c{n}.json\", fallback = \"native\" }}\n\
                 workflows = {{ families = [\"selective\", \"clarification\", \"asymmetric\"], profiles = [\"authored\", \"review_half\", \"review_double\", \"check_quarter\", \"error_double\", \"asymmetric_class0_double\"], costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = {} }} }}\n",
                quoted.join(", "),
                matrix(n)
            ));
        }
        let load = |codebooks: bool| {
            Config::from_toml_with(
                &text,
                "test",
                dir.path(),
                Inputs {
                    env: None,
                    files: &|path| std::fs::read(path),
                    codebooks,
                },
            )
            .unwrap()
        };
        // Strict codebooks from each contract's own training answers.
        let bare = load(false);
        for (name, contract) in bare.contracts() {
            let rule = &contract.questions()[simulate::COARSE_QUESTION];
            let spec: &Spec = rule.workflows().unwrap();
            let training: Vec<codebook::TrainingAnswer> = worlds
                .iter()
                .filter(|w| w.split == Split::Train)
                .filter_map(|w| {
                    dataset::training_answer(contract, simulate::COARSE_QUESTION, w, spec).ok()
                })
                .map(|(_, answer)| answer)
                .collect();
            assert!(!training.is_empty(), "{name}");
            let built =
                codebook::build(rule.classes(), 10, spec, &training, "test".into()).unwrap();
            std::fs::write(
                dir.path().join(format!("{name}.json")),
                built.codebook.to_json_bytes(),
            )
            .unwrap();
        }
        let config = load(true);
        (config.contracts().values().cloned().collect(), worlds, dir)
    }

    #[test]
    fn every_contract_question_gets_its_own_codebook_whatever_its_class_count() {
        let (contracts, worlds, _dir) = setup();
        let settings = candidates(&contracts, &worlds, &[0.04, 0.2], &[16]).unwrap();
        assert_eq!(settings.len(), 2);
        for (candidate, point) in &settings {
            assert_eq!(point.questions.len(), 3, "{point:?}");
            assert_eq!(candidate.mechanisms.len(), 3);
            // Three class counts: three codebooks, none pooled across specs.
            assert_eq!(point.codebooks.len(), 3, "{point:?}");
            for codebook in &point.codebooks {
                assert_eq!(codebook.serves.len(), 1, "{codebook:?}");
                assert!(
                    codebook.codewords > 0 && codebook.codewords <= 16,
                    "{codebook:?}"
                );
            }
            for question in &point.questions {
                // Served: answers of every class count are covered by their own codebook.
                assert!(question.test_answers > 0, "{question:?}");
                assert!(question.covered_test_answers > 0, "{question:?}");
            }
            // The larger budget moves some answers of some family; none moves more answers
            // than were released; the assignment was chosen on the validation split.
            if point.budget > 0.1 {
                assert!(point.moved.values().any(|&m| m > 0), "{point:?}");
            }
            assert!(point.moved.values().all(|&m| m <= point.test_answers));
            for codebook in &point.codebooks {
                assert!(codebook.assignment.is_some() && !codebook.trials.is_empty());
            }
            // The per-output bound holds for every workflow of every question.
            for (workflow, worst) in &point.worst_relative_increase {
                assert!(
                    *worst <= point.budget + 1e-9,
                    "{workflow}: {worst} > {}",
                    point.budget
                );
            }
        }
    }

    #[test]
    fn the_worst_relative_increase_is_the_largest_over_workflows() {
        let mut point = Point {
            release: "wcpq a=0.04 K=16".into(),
            budget: 0.04,
            max_codewords: 16,
            codebooks: Vec::new(),
            questions: Vec::new(),
            recovery: None,
            recovery_gain: None,
            paired: BTreeMap::new(),
            mean_cost_increase: BTreeMap::new(),
            worst_increase: BTreeMap::new(),
            worst_relative_increase: BTreeMap::new(),
            moved: BTreeMap::new(),
            test_answers: 0,
            covered_test_answers: 0,
        };
        assert_eq!(point.worst_relative_over_workflows(), 0.0);
        point.worst_relative_increase = [("a/p", 0.01), ("b/p", 0.03), ("c/p", 0.02)]
            .into_iter()
            .map(|(workflow, worst)| (workflow.to_string(), worst))
            .collect();
        assert_eq!(point.worst_relative_over_workflows(), 0.03);
    }

    #[test]
    fn a_contract_the_frontier_cannot_serve_is_an_error_naming_it() {
        let (mut contracts, worlds, _dir) = setup();
        let text = "[providers.p]\nkind = \"simulated\"\n[contracts.plain]\nprovider = \"p\"\n\
             [contracts.plain.questions.coarse_cause]\nclasses = [\"DELAY\", \"ADDRESS\", \"DAMAGE\"]\n\
             view = \"choice\"\n";
        let inputs = Inputs {
            env: None,
            files: &|path| std::fs::read(path),
            codebooks: true,
        };
        let config = Config::from_toml_with(text, "test", std::path::Path::new("."), inputs);
        contracts.push(config.unwrap().contract("plain").unwrap().clone());
        let error = candidates(&contracts, &worlds, &[0.04], &[16]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("contract `plain` has no wcpq question"),
            "{error}"
        );
        // A contract no training world fits.
        let (contracts, worlds, _dir) = setup();
        let test_only: Vec<World> = worlds
            .into_iter()
            .filter(|w| w.split != Split::Train)
            .collect();
        let error = candidates(&contracts, &test_only, &[0.04], &[16]).unwrap_err();
        assert!(
            error.to_string().contains("no training world fits it"),
            "{error}"
        );
    }
}
