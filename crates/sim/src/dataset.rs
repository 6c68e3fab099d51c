//! Reading one contract question's native answers out of saved worlds, in
//! the question's released label order (coarsened when the contract
//! coarsens). Shared by the codebook builder and the leakage audit.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::worlds::{Split, World};
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
    /// The world names a provider the contract does not list (`provider`).
    #[error("provider_not_in_contract")]
    ProviderNotInContract,
    /// Another of the contract's providers answered (not the one asked for).
    #[error("other_provider")]
    OtherProvider,
}

/// The provider that answered `world` under `contract`: the world's `provider`, or (none
/// named) the contract's first provider.
pub fn answered_by<'a>(contract: &'a Contract, world: &'a World) -> &'a str {
    world.provider.as_deref().unwrap_or(contract.provider())
}

/// `contract` as it releases `world`'s answer: with the codebooks of the provider that
/// answered it ([`answered_by`], `Contract::for_provider`). A world naming a provider the
/// contract does not list is [`Skip::ProviderNotInContract`]: nothing releases it.
pub fn released_by<'c>(contract: &'c Contract, world: &World) -> Result<&'c Contract, Skip> {
    contract
        .for_provider(answered_by(contract, world))
        .ok_or(Skip::ProviderNotInContract)
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

/// The training answers of a codebook question, possibly pooled over several contracts, read
/// world by world ([`TrainingSet::add`]): a train-split world is read by the first contract
/// whose request it fits, a validation-split world (when kept) chooses a learned codebook's
/// assignment, the test split is never read. Only the worlds one provider answered are read
/// ([`answered_by`]): a codebook serves the answers of the provider it was built from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainingSet {
    /// The train split's responses, which a compact codebook is learned from.
    pub responses: Vec<codebook::Response>,
    /// The train split's answers, which a strict codebook's pool takes.
    pub answers: Vec<codebook::TrainingAnswer>,
    /// The validation split's responses.
    pub validation: Vec<codebook::Response>,
    /// Train-split worlds no contract reads, by the first contract's reason.
    pub skipped: BTreeMap<String, u64>,
}

impl TrainingSet {
    /// Reads `world` for `question` of `contracts` (its workflows `spec`) when `provider`
    /// answered it; its validation answer is kept only with `keep_validation`.
    pub fn add(
        &mut self,
        contracts: &[Arc<Contract>],
        (question, provider): (&str, &str),
        spec: &releasegate_core::workflow::Spec,
        world: &World,
        keep_validation: bool,
    ) {
        let read = |contract: &Contract| {
            if answered_by(contract, world) == provider {
                training_answer(contract, question, world, spec)
            } else if contract
                .providers()
                .iter()
                .any(|p| p == answered_by(contract, world))
            {
                Err(Skip::OtherProvider)
            } else {
                Err(Skip::ProviderNotInContract)
            }
        };
        if world.split == Split::Validation && keep_validation {
            if let Some((response, _)) = contracts.iter().find_map(|contract| read(contract).ok()) {
                self.validation.push(response);
            }
            return;
        }
        if world.split != Split::Train {
            return;
        }
        let mut first_skip = None;
        let answer = contracts.iter().find_map(|contract| {
            read(contract)
                .map_err(|skip| first_skip = first_skip.or(Some(skip)))
                .ok()
        });
        match answer {
            Some((response, answer)) => {
                self.responses.push(response);
                self.answers.push(answer);
            }
            None => {
                let reason =
                    first_skip.map_or_else(|| "unknown".to_string(), |skip| skip.to_string());
                *self.skipped.entry(reason).or_default() += 1;
            }
        }
    }
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
    let rule: &QuestionRule = contract.questions().get(question).ok_or(Skip::NotAsked)?;
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
    let vector = match &rule.coarsen() {
        Some(coarsening) => release::coarsen(coarsening, &fine),
        None => fine,
    };
    Ok(NativeAnswer { kind, vector })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate;
    use releasegate_core::config::{Config, Inputs};

    /// The simulator's worlds and the three contracts of `config/tuple-bench.toml`, which pool
    /// one codebook question.
    fn setup() -> (Vec<World>, Vec<Arc<Contract>>) {
        setup_with(include_str!("../../../config/tuple-bench.toml"))
    }

    fn setup_with(text: &str) -> (Vec<World>, Vec<Arc<Contract>>) {
        let options = simulate::Options {
            pairs_per_domain: 12,
            seed: 7,
        };
        let worlds = simulate::generate(&options).unwrap();
        let config = Config::from_toml_with(
            text,
            "tuple-bench.toml",
            std::path::Path::new("."),
            Inputs {
                env: None,
                files: &|path| std::fs::read(path),
                codebooks: false,
            },
        )
        .unwrap();
        let contracts = ["delivery", "equipment", "it_ops"]
            .iter()
            .map(|name| config.contract(name).unwrap().clone())
            .collect();
        (worlds, contracts)
    }

    fn spec(contract: &Contract) -> &releasegate_core::workflow::Spec {
        contract.questions()[simulate::COARSE_QUESTION]
            .workflows()
            .unwrap()
    }

    fn read(
        worlds: &[World],
        contracts: &[Arc<Contract>],
        spec: &releasegate_core::workflow::Spec,
        keep_validation: bool,
    ) -> TrainingSet {
        let mut set = TrainingSet::default();
        for world in worlds {
            set.add(
                contracts,
                (simulate::COARSE_QUESTION, "sim"),
                spec,
                world,
                keep_validation,
            );
        }
        set
    }

    #[test]
    fn a_pooled_question_reads_each_train_world_under_the_first_contract_it_fits() {
        let (worlds, contracts) = setup();
        let spec = spec(&contracts[0]);
        let set = read(&worlds, &contracts, spec, false);
        let train: Vec<&World> = worlds.iter().filter(|w| w.split == Split::Train).collect();
        assert!(!train.is_empty());
        assert_eq!(set.answers.len(), train.len(), "skipped: {:?}", set.skipped);
        assert_eq!(set.responses.len(), train.len());
        assert!(set.skipped.is_empty());
        assert!(set.validation.is_empty());
        let expected: Vec<codebook::TrainingAnswer> = train
            .iter()
            .map(|world| {
                contracts
                    .iter()
                    .find_map(|contract| {
                        training_answer(contract, simulate::COARSE_QUESTION, world, spec).ok()
                    })
                    .unwrap()
                    .1
            })
            .collect();
        assert_eq!(set.answers, expected);
    }

    #[test]
    fn worlds_no_contract_fits_are_counted_by_the_first_contract_s_reason() {
        let (worlds, contracts) = setup();
        let spec = spec(&contracts[0]);
        let set = read(&worlds, &contracts[..1], spec, true);
        let train = worlds.iter().filter(|w| w.split == Split::Train).count();
        let skipped: u64 = set.skipped.values().sum();
        assert!(skipped > 0);
        assert_eq!(set.answers.len() as u64 + skipped, train as u64);
        assert!(
            set.skipped
                .keys()
                .all(|reason| reason == "request_does_not_fit" || reason == "question_not_asked"),
            "{:?}",
            set.skipped
        );
        assert!(!set.validation.is_empty());
        let none = read(&worlds, &[], spec, false);
        assert_eq!(
            none.skipped,
            BTreeMap::from([("unknown".to_string(), train as u64)])
        );
    }

    #[test]
    fn a_codebook_reads_only_the_worlds_of_its_provider() {
        // `delivery` asks the providers `sim` then `sim2`.
        let text = include_str!("../../../config/tuple-bench.toml")
            .replacen(
                "[providers.sim]",
                "[providers.sim2]\nkind = \"simulated\"\n[providers.sim]",
                1,
            )
            .replacen("provider = \"sim\"", "providers = [\"sim\", \"sim2\"]", 1)
            .replacen(
                "fallback = \"native\" }",
                "fallback = \"native\", codebooks = { sim2 = \"sim2.json\" } }",
                1,
            );
        let (mut worlds, contracts) = setup_with(&text);
        assert_eq!(contracts[0].providers(), ["sim", "sim2"]);
        let spec = spec(&contracts[0]).clone();
        let named = ["sim2", "gone", "sim"];
        for (index, world) in worlds.iter_mut().enumerate() {
            world.provider = (index % 4 < 3).then(|| named[index % 4].to_string());
        }
        let train = |provider: &str| {
            worlds
                .iter()
                .filter(|w| w.split == Split::Train && w.domain == "delivery")
                .filter(|w| w.provider.as_deref().unwrap_or("sim") == provider)
                .count()
        };
        let by = |provider: &str| {
            let mut set = TrainingSet::default();
            for world in &worlds {
                set.add(
                    &contracts[..1],
                    (simulate::COARSE_QUESTION, provider),
                    &spec,
                    world,
                    false,
                );
            }
            set
        };
        let first = by("sim");
        assert!(train("sim") > 0 && train("sim2") > 0);
        assert_eq!(first.answers.len(), train("sim"), "{:?}", first.skipped);
        assert!(first.skipped["other_provider"] > 0);
        assert!(first.skipped["provider_not_in_contract"] > 0);
        let second = by("sim2");
        assert_eq!(second.answers.len(), train("sim2"));
        assert_ne!(first.answers, second.answers);
        // The variant releasing each world is its provider's; a provider not listed has none.
        let gone = worlds
            .iter()
            .find(|w| w.provider.as_deref() == Some("gone"))
            .unwrap();
        assert_eq!(
            released_by(&contracts[0], gone).err(),
            Some(Skip::ProviderNotInContract)
        );
        let other = worlds
            .iter()
            .find(|w| w.provider.as_deref() == Some("sim2"))
            .unwrap();
        // (Codebooks are not loaded here: both providers' answers are released alike.)
        assert_eq!(
            released_by(&contracts[0], other).unwrap().name(),
            "delivery"
        );
    }
}
