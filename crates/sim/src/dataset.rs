//! Reading one contract question's native answers out of saved worlds, in
//! the question's released label order (coarsened when the contract
//! coarsens). Shared by the codebook builder and the leakage audit.

use serde_json::Value;

use crate::worlds::World;
use releasegate_core::codebook;
use releasegate_core::contract::{Contract, QuestionRule};
use releasegate_core::mechanism::ClassVector;
use releasegate_core::release;
use releasegate_core::wire::{self, Kind};

/// Why a world contributes no answer for the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum Skip {
    /// The request does not ask the question.
    #[error("question_not_asked")]
    NotAsked,
    /// The request does not fit the contract (other classes, uncovered questions, ...).
    #[error("request_does_not_fit")]
    RequestMismatch,
    /// The saved answer fails validation.
    #[error("invalid_answer")]
    InvalidAnswer,
}

/// One native answer of the question, in released label order.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeAnswer {
    /// The question's answer type.
    pub kind: Kind,
    /// The native answer (coarsened when the contract coarsens).
    pub vector: ClassVector,
}

/// One world's training answer for a WCPQ codebook of `question` under `contract`: the
/// response a compact codebook is learned from (the native answer with its public request
/// features for `spec`) and the answer a strict codebook's pool takes. The one reading of
/// saved worlds the codebook builder and the audit's frontier share.
pub fn training_answer(
    contract: &Contract,
    question: &str,
    world: &World,
    spec: &releasegate_core::workflow::Spec,
) -> Result<(codebook::Response, codebook::TrainingAnswer), Skip> {
    let answer = native_answer(contract, question, world)?;
    let state = world.request.get("state").unwrap_or(&Value::Null);
    Ok((
        codebook::Response {
            pair_id: world.pair_id.clone(),
            native: releasegate_core::workflow::Release {
                choice: answer.vector.choice,
                probabilities: Some(answer.vector.probabilities.clone()),
                confidence: answer.vector.confidence,
            },
            public: spec.public_features(state),
        },
        codebook::TrainingAnswer {
            pair_id: world.pair_id.clone(),
            probabilities: answer.vector.probabilities,
            confidence: answer.vector.confidence,
        },
    ))
}

/// Reads `question`'s native answer of `world` under `contract`.
pub fn native_answer(
    contract: &Contract,
    question: &str,
    world: &World,
) -> Result<NativeAnswer, Skip> {
    let asked_question = world
        .request
        .get("questions")
        .and_then(Value::as_object)
        .is_some_and(|questions| questions.contains_key(question));
    if !asked_question {
        return Err(Skip::NotAsked);
    }
    let rule: &QuestionRule = contract.questions.get(question).ok_or(Skip::NotAsked)?;
    let asked = wire::check_request(&world.request, contract).map_err(|_| Skip::RequestMismatch)?;
    let kind = asked
        .questions
        .iter()
        .find(|q| q.id == question)
        .map(|q| q.kind)
        .ok_or(Skip::NotAsked)?;
    let answer = world
        .response
        .get("answers")
        .and_then(|answers| answers.get(question))
        .ok_or(Skip::InvalidAnswer)?;
    let fine = wire::parse_answer(kind, rule, answer).map_err(|_| Skip::InvalidAnswer)?;
    let vector = match &rule.coarsen {
        Some(coarsening) => release::coarsen(coarsening, &fine),
        None => fine,
    };
    Ok(NativeAnswer { kind, vector })
}
