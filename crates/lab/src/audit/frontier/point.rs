//! The frontier's figures: a setting's point, its codebooks and its questions, and how a
//! released test answer is counted into them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::super::bootstrap::Estimate;
use releasegate_core::codebook;
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{self, Mechanism};
use releasegate_core::release;
use releasegate_core::workflow::{self, Plan};

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
    pub(super) fn unmeasured(
        release: String,
        setting: super::Setting,
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
    pub(super) fn record(
        &mut self,
        contract: &Contract,
        record: &release::AnswerRecord,
        state: &Value,
    ) {
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
