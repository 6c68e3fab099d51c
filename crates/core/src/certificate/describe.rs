//! What a certificate binds: a contract's or recipient's release described as JSON, its
//! canonical hash, and the policy it is gated against.

use serde_json::{Value, json};

use crate::config::Recipient;
use crate::contract::{CacheScope, Contract, LeakagePolicy, QuestionRule};
use crate::mechanism::Mechanism;
use crate::wcpq::Admissibility;
use crate::workflow;

/// How a description names a WCPQ question's frozen workflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkflowsHash {
    /// `Spec::sha256`, of the canonical form: what certificates are written with.
    Canonical,
    /// The hash certificates were written with before (key order as written): read only, so
    /// that they stay valid.
    Legacy,
}

/// SHA-256 (hex) of the canonical JSON of a release description.
pub fn release_sha256(release: &Value) -> String {
    let mut bytes = Vec::new();
    crate::wire::canonical_json(release, &mut bytes);
    crate::workflow::sha256_hex(&bytes)
}

/// Everything that shapes what a contract's recipient receives: its shape, usage and pinned
/// model, the providers whose answers it releases (in failover order), the provider switches
/// it lets callers forward, whether its cache is shared across recipients (a timing channel
/// the gate does not measure), and per question the type, classes, text, view, coarsening,
/// withheld labels and mechanism (a WCPQ codebook by its content hash, with its workflows,
/// admissibility, fallback and confidence). A WCPQ question of a contract of several
/// providers also names each provider's codebook by its hash (`codebooks_sha256`, by
/// provider): each provider's answers are released with its own. A contract of one provider
/// is described without it.
pub fn contract_release(contract: &Contract) -> Value {
    describe_contract(contract, WorkflowsHash::Canonical)
}

/// [`contract_release`] with the workflows named by `hash`.
pub(crate) fn describe_contract(contract: &Contract, hash: WorkflowsHash) -> Value {
    let questions: serde_json::Map<String, Value> = contract
        .questions
        .iter()
        .map(|(id, rule)| {
            let mut release = question_release(rule, hash);
            if let Some(codebooks) = provider_codebooks(contract, id)
                && let Some(mechanism) = release.get_mut("mechanism").and_then(Value::as_object_mut)
            {
                mechanism.insert("codebooks_sha256".to_string(), codebooks);
            }
            (id.clone(), release)
        })
        .collect();
    let forwarded: Vec<&str> = contract.forward_headers.iter().map(|h| h.name()).collect();
    let shared_cache = contract
        .cache
        .as_ref()
        .is_some_and(|cache| cache.scope() == CacheScope::Provider);
    json!({
        "shape": contract.shape.as_str(),
        "usage": contract.usage.as_str(),
        "model": contract.model,
        "providers": contract.providers,
        "forward_headers": forwarded,
        "shared_cache": shared_cache,
        "questions": questions,
    })
}

/// The codebook hash of each provider of `contract` for its WCPQ question `id`, when it has
/// several providers (`None` for one provider, or a question of another mechanism).
fn provider_codebooks(contract: &Contract, id: &str) -> Option<Value> {
    if contract.providers.len() < 2 {
        return None;
    }
    let mut codebooks = serde_json::Map::new();
    for provider in &contract.providers {
        let rule = contract.for_provider(provider)?.questions.get(id)?;
        let Mechanism::Wcpq(wcpq) = &rule.mechanism else {
            return None;
        };
        codebooks.insert(provider.clone(), json!(wcpq.codebook_sha256));
    }
    Some(Value::Object(codebooks))
}

/// Everything a recipient's contracts release, by contract name.
pub fn recipient_release(contracts: &[&Contract]) -> Value {
    describe_recipient(contracts, WorkflowsHash::Canonical)
}

/// [`recipient_release`] with the workflows named by `hash`.
pub(crate) fn describe_recipient(contracts: &[&Contract], hash: WorkflowsHash) -> Value {
    let by_name: serde_json::Map<String, Value> = contracts
        .iter()
        .map(|c| (c.name.clone(), describe_contract(c, hash)))
        .collect();
    json!({ "contracts": by_name })
}

fn question_release(rule: &QuestionRule, hash: WorkflowsHash) -> Value {
    let labels = rule.released_labels();
    let withheld: Vec<&String> = labels
        .iter()
        .zip(&rule.withhold)
        .filter(|(_, withheld)| **withheld)
        .map(|(label, _)| label)
        .collect();
    json!({
        "type": rule.question.kind.as_str(),
        "classes": rule.classes,
        "instructions": rule.question.instructions,
        "descriptions": rule.question.descriptions,
        "caller_text": rule.question.caller_text,
        "view": rule.view.as_str(),
        "coarsen": rule.coarsen.as_ref().map(|c| json!({"labels": c.labels, "map": c.map})),
        "withhold": withheld,
        "mechanism": mechanism_release(&rule.mechanism, rule, hash),
    })
}

fn mechanism_release(mechanism: &Mechanism, rule: &QuestionRule, hash: WorkflowsHash) -> Value {
    match mechanism {
        Mechanism::None => json!({"kind": "none"}),
        Mechanism::Wcpq(wcpq) => json!({
            "kind": "wcpq",
            "codebook_sha256": wcpq.codebook_sha256,
            "workflows_sha256": rule.workflows.as_ref().map(|spec| match hash {
                WorkflowsHash::Canonical => spec.sha256(),
                WorkflowsHash::Legacy => workflow::legacy_sha256(&spec.canonical_json()),
            }),
            "admissibility": match wcpq.mapper.admissibility() {
                Admissibility::Strict => json!("strict"),
                Admissibility::Budget(alpha) => json!({"budget": alpha}),
            },
            "fallback": wcpq.fallback.as_str(),
            "confidence": wcpq.confidence.as_str(),
        }),
        Mechanism::Quantize { step, confidence } => {
            json!({"kind": "quantize", "step": step, "confidence": confidence.as_str()})
        }
        Mechanism::TopK { k, confidence } => {
            json!({"kind": "top_k", "k": k, "confidence": confidence.as_str()})
        }
        Mechanism::Temperature { tau, confidence } => {
            json!({"kind": "temperature", "tau": tau, "confidence": confidence.as_str()})
        }
        Mechanism::Gaussian {
            sigma,
            seed,
            confidence,
        } => {
            json!({"kind": "gaussian", "sigma": sigma, "seed": seed, "confidence": confidence.as_str()})
        }
    }
}

/// A contract's policy as a certificate records it.
pub fn contract_policy(policy: &LeakagePolicy) -> Value {
    let keep: Vec<String> = policy
        .keep
        .iter()
        .map(|k| match &k.question {
            Some(q) => format!("{q}.{}", k.field.as_str()),
            None => k.field.as_str().to_string(),
        })
        .collect();
    json!({
        "keep": keep,
        "hide": policy.hide.iter().map(|_| "secret").collect::<Vec<_>>(),
        "max_recovery_gain": policy.max_recovery_gain,
    })
}

/// The budget a recipient is gated against: its own, or else the smallest among its
/// contracts' (`docs/gate.md`), when either hides something.
pub fn recipient_budget(recipient: &Recipient, contracts: &[&Contract]) -> Option<f64> {
    budget_of(recipient.policy.as_ref(), contracts.iter().copied())
}

/// The budget of a recipient with the policy `own` holding `contracts`: `own`'s, or else the
/// smallest among the contracts', counting only policies that hide something (the gate's
/// rule, [`recipient_budget`]'s too).
pub fn budget_of<'a>(
    own: Option<&LeakagePolicy>,
    contracts: impl IntoIterator<Item = &'a Contract>,
) -> Option<f64> {
    let own = own
        .filter(|p| !p.hide.is_empty())
        .map(|p| p.max_recovery_gain);
    own.or_else(|| {
        contracts
            .into_iter()
            .filter_map(|c| c.policy.as_ref())
            .filter(|p| !p.hide.is_empty())
            .map(|p| p.max_recovery_gain)
            .reduce(f64::min)
    })
}

/// A recipient's policy as a certificate records it (`None`: it has none to certify).
pub fn recipient_policy(budget: f64) -> Value {
    json!({ "hide": ["secret"], "max_recovery_gain": budget })
}

/// Whether a recipient needs a certificate of its own: it declares a policy, or it holds
/// several contracts and one of them hides something (together they may leak more than each
/// alone, so the strictest budget binds them jointly).
pub fn recipient_needs_certificate(recipient: &Recipient, contracts: &[&Contract]) -> bool {
    recipient.policy.is_some()
        || (contracts.len() > 1 && recipient_budget(recipient, contracts).is_some())
}
