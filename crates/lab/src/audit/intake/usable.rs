//! Which worlds a contract's audit reads, under which authorized class, and what its
//! releases' `usage` tells the attacker.
//!
//! Every labelled world a contract can be asked about is audited: a world whose class the
//! contract coarsens under its coarse label, a world whose class it withholds under that
//! (withheld) label. A world naming a provider its contract does not list is left out
//! (`provider_not_in_contract`). A world still left out is counted by reason; the gate reads the share
//! of labelled test worlds left out (`Intake::left_out_share`), among those whose request
//! one of the contracts accepts (the proxy refuses the others and releases nothing).

use std::sync::Arc;

use super::super::ReleasedUsage;
use super::{Intake, Usable};
use releasegate_core::contract::{Contract, QuestionRule};
use releasegate_core::release;
use releasegate_core::wire::{self, Node};
use releasegate_sim::worlds::{Split, World};

/// The share of labelled test worlds above which a gate verdict is at best inconclusive.
pub const MAX_LEFT_OUT_SHARE: f64 = 0.05;

/// Why a world is left out when no contract accepts its request.
const NOT_ASKED: &str = "request_does_not_fit";

/// Each world of `worlds` the audit of `contracts` reads (in order); every other one is
/// counted in `intake` by reason.
pub(super) fn select<'w>(
    contracts: &[Arc<Contract>],
    worlds: &'w [World],
    intake: &mut Intake,
) -> Vec<Usable<'w>> {
    let mut usable = Vec::new();
    for world in worlds {
        let found = usable_world(contracts, world);
        // A request no contract accepts is one the proxy refuses: nothing is released, so
        // the world is not theirs to audit (another domain's, another question's).
        let in_scope = world.labels.is_some()
            && world.split == Split::Test
            && !matches!(found, Err(NOT_ASKED));
        intake.labelled_test_worlds += u64::from(in_scope);
        match found {
            Ok(found) => usable.push(found),
            Err(reason) => {
                *intake.skipped.entry(reason.to_string()).or_default() += 1;
                if in_scope {
                    *intake.left_out_test.entry(reason.to_string()).or_default() += 1;
                }
            }
        }
    }
    usable
}

/// The world under the first of `contracts` whose request it fits, or why it is left out.
pub(in crate::audit) fn usable_world<'w>(
    contracts: &[Arc<Contract>],
    world: &'w World,
) -> Result<Usable<'w>, &'static str> {
    let labels = world.labels.as_ref().ok_or("no_labels")?;
    let (index, contract, asked) = contracts
        .iter()
        .enumerate()
        .find_map(|(i, c)| {
            wire::check_request(&world.request, c)
                .ok()
                .map(|asked| (i, c, asked))
        })
        .ok_or(NOT_ASKED)?;
    // A provider the contract does not list never answers its requests: nothing to release.
    let contract = releasegate_sim::dataset::released_by(contract, world)
        .map_err(|_| "provider_not_in_contract")?;
    let rule = contract
        .questions()
        .get(&labels.question)
        .ok_or("question_not_in_contract")?;
    if !asked.questions.iter().any(|q| q.id == labels.question) {
        return Err("question_not_asked");
    }
    let t_index = released_class(rule, &labels.t).ok_or("authorized_class_not_in_contract")?;
    let s_index = labels
        .hypotheses
        .iter()
        .position(|h| *h == labels.s)
        .ok_or("secret_not_a_hypothesis")?;
    Ok(Usable {
        world,
        contract: index,
        question: labels.question.clone(),
        labels: rule.released_labels().to_vec(),
        t_index,
        s_index,
        public: Vec::new(),
    })
}

/// The index among `rule`'s released labels of the class `t`: itself when released (a
/// withheld label is released, withheld), else the coarse label a coarsening maps it to.
pub(super) fn released_class(rule: &QuestionRule, t: &str) -> Option<usize> {
    rule.released_labels()
        .iter()
        .position(|l| l == t)
        .or_else(|| {
            let fine = rule.classes().iter().position(|c| c == t)?;
            rule.coarsen()?.map.get(fine).copied()
        })
}

/// The token counts of `released` the attacker reads: each count `contract` releases as
/// received (`usage = "keep"`: both; `"input"`: `input_tokens`, its `output_tokens` is 0
/// whatever the provider wrote; `"drop"`: none).
pub(super) fn released_usage(
    contract: &Contract,
    released: &release::Release<'_>,
) -> ReleasedUsage {
    let count = |key: &str| {
        Node::member(&released.body, "usage")
            .and_then(|usage| Node::member(usage, key))
            .and_then(|count: &wire::Json<'_>| count.unsigned())
            .map(|count| count as f64)
    };
    ReleasedUsage {
        input_tokens: contract
            .usage()
            .keeps_input()
            .then(|| count("input_tokens"))
            .flatten(),
        output_tokens: contract
            .usage()
            .keeps()
            .then(|| count("output_tokens"))
            .flatten(),
    }
}
