//! Release contracts: what each recipient may learn from each answer.
//!
//! A contract names its provider, optionally pins the model, decides whether
//! token usage goes out, and lists the questions it covers. Everything a
//! contract does not list is denied. This module holds the validated, typed
//! form; `config` builds it from the raw file and `release` applies it.

use std::collections::BTreeMap;

use crate::mechanism::Mechanism;

mod fields;
mod policy;
mod routing;
mod rule;

pub use fields::{Shape, Usage, View};
pub use policy::{Field, Hidden, KeepField, LeakagePolicy, PublicField, PublicKind};
pub use routing::{CacheScope, CacheSpec, CacheStore, DEFAULT_FAILOVER_ON, Failover};
use rule::not_certifiable_because;
pub use rule::{Coarsening, Pinned, QuestionRule};

/// A validated release contract.
#[derive(Debug, Clone)]
pub struct Contract {
    /// The contract's name (a metrics label and the `X-Release-Contract` value).
    pub(crate) name: String,
    /// The providers that answer requests under this contract, in priority order (at
    /// least one: `provider = "x"` is a list of one).
    pub(crate) providers: Vec<String>,
    /// When a request moves on to the next provider.
    pub(crate) failover: Failover,
    /// The exact cache of native answers, when configured.
    pub(crate) cache: Option<CacheSpec>,
    /// When set, replaces the caller's `model` in the forwarded request.
    pub(crate) model: Option<String>,
    /// Whether token usage counts go out.
    pub(crate) usage: Usage,
    /// Whether answers carry every field their type requires (`complete`) or only the view's.
    pub(crate) shape: Shape,
    /// The covered questions by id; any other question is denied.
    pub(crate) questions: BTreeMap<String, QuestionRule>,
    /// Request fields the recipient may see anyway (pointers into `state`):
    /// what the leakage audit's attacker is given besides the released answer.
    pub(crate) public: Vec<PublicField>,
    /// The contract's leakage budget, checked offline by `releasegate audit --gate`.
    pub(crate) policy: Option<LeakagePolicy>,
    /// System One request headers a caller may send through to the provider
    /// (`forward_headers`); every other caller header stays out.
    pub(crate) forward_headers: Vec<ForwardHeader>,
    /// Whose answers this contract releases: the index in `providers` (0, the first
    /// provider, for a configured contract; another for one of its `variants`).
    pub(crate) released_for: usize,
    /// The contract as it releases the answers of each further provider (`providers[1..]`,
    /// in order): each WCPQ question with that provider's codebook, all else the same.
    /// Empty when every provider's answers are released alike (and in a variant).
    pub(crate) variants: Vec<std::sync::Arc<Contract>>,
    /// The `questions` values each recipient sent that this contract passed
    /// (`wire::check_bytes`); empty in a clone.
    pub(crate) known_questions: crate::wire::KnownRooms,
}

/// A System One request header a contract may let through (`forward_headers`), from a
/// fixed list: the provider's opt-in "Danger Zone" switches. Only the value `true` is
/// forwarded, written by the proxy (never the caller's bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ForwardHeader {
    /// `TypeSafe-Danger-Zone-Images: true`: requests with images or box questions.
    DangerZoneImages,
    /// `TypeSafe-Danger-Zone-Long-Context: true`: the 262k context.
    DangerZoneLongContext,
}

impl ForwardHeader {
    /// Every header a contract may forward.
    pub const ALL: [ForwardHeader; 2] = [
        ForwardHeader::DangerZoneImages,
        ForwardHeader::DangerZoneLongContext,
    ];

    /// The header's name as System One documents it.
    pub fn name(self) -> &'static str {
        match self {
            ForwardHeader::DangerZoneImages => "TypeSafe-Danger-Zone-Images",
            ForwardHeader::DangerZoneLongContext => "TypeSafe-Danger-Zone-Long-Context",
        }
    }

    /// The header's name in lower case (HTTP header names are case-insensitive; a
    /// metrics label).
    pub fn lower(self) -> &'static str {
        match self {
            ForwardHeader::DangerZoneImages => "typesafe-danger-zone-images",
            ForwardHeader::DangerZoneLongContext => "typesafe-danger-zone-long-context",
        }
    }

    /// The header a configuration names (any letter case).
    pub fn parse(name: &str) -> Option<ForwardHeader> {
        ForwardHeader::ALL
            .into_iter()
            .find(|header| header.name().eq_ignore_ascii_case(name))
    }

    /// Whether a caller's value switches the header on (`true`, any letter case, with
    /// surrounding blanks); any other value is not forwarded.
    pub fn is_on(value: &[u8]) -> bool {
        value.trim_ascii().eq_ignore_ascii_case(b"true")
    }
}

/// How a derived contract releases one question ([`Contract::derive`]): the view and the
/// mechanism that replace the question's own (`None`: keep it).
#[derive(Debug, Clone, Default)]
pub struct Rerelease {
    /// The view that replaces the question's.
    pub view: Option<View>,
    /// The mechanism that replaces the question's.
    pub mechanism: Option<Mechanism>,
}

/// A derived release that no configuration could hold ([`Contract::derive`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("contract `{contract}` cannot release question `{question}` that way: {reason}")]
pub struct DeriveError {
    /// The contract derived from.
    pub contract: String,
    /// The question whose release is refused.
    pub question: String,
    /// Why.
    pub reason: String,
}

/// The rules a question's view and mechanism pass, in a configuration file and in every
/// derived contract alike: a box question is released as `full_native` or `choice` (or the
/// audit's `no_output` reference), with no mechanism or `quantize` deriving its confidence; a
/// class question's baseline has parameters in their ranges, and a WCPQ mechanism serves the
/// question's own frozen workflows over its released labels.
pub(crate) fn check_release(
    rule: &QuestionRule,
    view: View,
    mechanism: &Mechanism,
) -> Result<(), String> {
    use crate::mechanism::ConfidenceSource;
    if rule.question.kind == crate::wire::Kind::Box {
        if matches!(view, View::ChoiceConfidence | View::FullProbabilities) {
            return Err(format!(
                "a box question is released as `full_native` or `choice`, not `{view}`"
            ));
        }
        return match mechanism {
            Mechanism::None => Ok(()),
            Mechanism::Quantize {
                step,
                confidence: ConfidenceSource::Derived,
            } if crate::baseline::step_nanos(*step).is_some() => Ok(()),
            other => Err(format!(
                "a box question takes no mechanism or `quantize` with a derived confidence, not `{}`",
                other.kind()
            )),
        };
    }
    match mechanism {
        Mechanism::None => Ok(()),
        Mechanism::Quantize { step, .. } if crate::baseline::step_nanos(*step).is_none() => {
            Err(format!(
                "quantize step must be a decimal in [1e-9, 1] with at most 9 decimal places, got {step}"
            ))
        }
        // A class vector's units must sum to 1: with 0.3, `floor(1/0.3) = 3` units would
        // release 0.9 in all, which no client reads as a distribution (and the proxy itself
        // refuses from a provider). A box question's edges have no such sum.
        Mechanism::Quantize { step, .. } if !crate::baseline::step_divides_one(*step) => {
            Err(format!(
                "quantize step must divide 1 (0.5, 0.25, 0.2, 0.1, 0.05, ...), got {step}: the released probabilities would not sum to 1"
            ))
        }
        Mechanism::TopK { k: 0, .. } => Err("top_k needs k of at least 1".to_string()),
        // A noul answer has one number, P(true): the top class alone, when it is `false`,
        // leaves it out and the release would state the choice fill (0) instead.
        Mechanism::TopK { k: 1, .. } if rule.question.kind == crate::wire::Kind::Noul => Err(
            "top_k on a noul question needs k = 2 (its one number, P(true), goes out either way: k = 1 would state 0 or 1 in its place)".to_string(),
        ),
        Mechanism::Temperature { tau, .. } if !(tau.is_finite() && *tau > 0.0) => Err(format!(
            "temperature tau must be a positive number, got {tau}"
        )),
        Mechanism::Gaussian { sigma, .. } if !(sigma.is_finite() && *sigma >= 0.0) => Err(format!(
            "gaussian sigma must be a non-negative number, got {sigma}"
        )),
        Mechanism::Wcpq(wcpq) => {
            let Some(spec) = rule.workflows.as_ref() else {
                return Err("wcpq needs the question's frozen workflows".to_string());
            };
            if wcpq.mapper.spec() != spec {
                return Err(
                    "the wcpq mapper's frozen workflows are not the question's own".to_string(),
                );
            }
            wcpq.mapper
                .codebook()
                .check_matches(spec, rule.released_labels())
                .map_err(|error| format!("the codebook does not match this question: {error}"))
        }
        _ => Ok(()),
    }
}

// === impl Contract ===

impl Contract {
    /// The contract's name (a metrics label and the `X-Release-Contract` value).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The contract's first provider: the one that answers while its circuit is closed.
    pub fn provider(&self) -> &str {
        &self.providers[0]
    }

    /// The providers in priority order (at least one).
    pub fn providers(&self) -> &[String] {
        &self.providers
    }

    /// The contract as it releases the answers of provider `name`, which answered the
    /// request: for the first provider the contract itself; for a further one the same
    /// contract (name, questions, views, everything) whose WCPQ questions map with that
    /// provider's codebook (`codebooks`), built with the configuration. `None` when `name`
    /// is not one of the contract's providers (release nothing). On a contract this
    /// returned, only its own provider is found.
    pub fn for_provider(&self, name: &str) -> Option<&Contract> {
        let index = self.providers.iter().position(|p| p == name)?;
        if index == self.released_for || (self.released_for == 0 && self.variants.is_empty()) {
            return Some(self);
        }
        match self.released_for {
            0 => self.variants.get(index - 1).map(|variant| &**variant),
            _ => None,
        }
    }

    /// [`Contract::for_provider`] as a shared handle (the proxy's release runs on a handle
    /// it can move to another thread).
    pub fn shared_for_provider(
        self: &std::sync::Arc<Self>,
        name: &str,
    ) -> Option<std::sync::Arc<Contract>> {
        let found = self.for_provider(name)?;
        if std::ptr::eq(found, &**self) {
            return Some(self.clone());
        }
        self.variants
            .iter()
            .find(|variant| std::ptr::eq(&***variant, found))
            .cloned()
    }

    /// The provider whose answers this contract releases: [`Contract::provider`], except on
    /// a contract [`Contract::for_provider`] returned for a further provider.
    pub fn released_for(&self) -> &str {
        &self.providers[self.released_for]
    }

    /// Whether some question releases some provider's answers otherwise than the first
    /// provider's (a WCPQ question with a codebook per provider).
    pub fn releases_per_provider(&self) -> bool {
        !self.variants.is_empty()
    }

    /// The contract with `mechanisms[question]` (one per provider of `providers[1..]`) as the
    /// mechanisms of its further providers' variants; the variants are built only when there
    /// is one.
    pub(crate) fn with_provider_mechanisms(
        mut self,
        mechanisms: &BTreeMap<String, Vec<Mechanism>>,
    ) -> Contract {
        if mechanisms.is_empty() {
            return self;
        }
        let variants = (1..self.providers.len())
            .map(|index| {
                let mut variant = Contract {
                    released_for: index,
                    variants: Vec::new(),
                    ..self.clone()
                };
                for (id, mechanisms) in mechanisms {
                    if let (Some(rule), Some(mechanism)) =
                        (variant.questions.get_mut(id), mechanisms.get(index - 1))
                    {
                        rule.mechanism = mechanism.clone();
                    }
                }
                std::sync::Arc::new(variant)
            })
            .collect();
        self.variants = variants;
        self
    }

    /// When a request moves on to the next provider.
    pub fn failover(&self) -> &Failover {
        &self.failover
    }

    /// The exact cache of native answers, when configured.
    pub fn cache(&self) -> Option<&CacheSpec> {
        self.cache.as_ref()
    }

    /// When set, replaces the caller's `model` in the forwarded request.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Whether token usage counts go out.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Whether answers carry every field their type requires (`complete`) or only the view's.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The covered questions by id; any other question is denied.
    pub fn questions(&self) -> &BTreeMap<String, QuestionRule> {
        &self.questions
    }

    /// Request fields the recipient may see anyway (pointers into `state`):
    /// what the leakage audit's attacker is given besides the released answer.
    pub fn public(&self) -> &[PublicField] {
        &self.public
    }

    /// The contract's leakage budget, checked offline by `releasegate audit --gate`.
    pub fn policy(&self) -> Option<&LeakagePolicy> {
        self.policy.as_ref()
    }

    /// System One request headers a caller may send through to the provider
    /// (`forward_headers`); every other caller header stays out.
    pub fn forward_headers(&self) -> &[ForwardHeader] {
        &self.forward_headers
    }

    /// The same contract with each question released as `release` says: the audit's
    /// candidate releases, the frontier's learned codebooks, the floor's native reference.
    /// Each changed question passes `check_release`, the rules every configured question's
    /// view and mechanism pass, so a derived release that a configuration file could not
    /// hold is refused, never audited. The one difference: `no_output` is allowed, because
    /// the audit measures every release against it (a configuration refuses it only because
    /// typed clients cannot read an allowed question without an answer).
    ///
    /// The variants of further providers ([`Contract::for_provider`]) are derived alike: a
    /// replaced view replaces each provider's, a replaced mechanism becomes every provider's
    /// (one mechanism for all of them), a kept mechanism stays each provider's own.
    pub fn derive(
        &self,
        mut release: impl FnMut(&str, &QuestionRule) -> Rerelease,
    ) -> Result<Contract, DeriveError> {
        let rereleases: BTreeMap<&str, Rerelease> = self
            .questions
            .iter()
            .map(|(id, rule)| (id.as_str(), release(id, rule)))
            .collect();
        let mut contract = self.rereleased(&rereleases)?;
        contract.variants = self
            .variants
            .iter()
            .map(|variant| variant.rereleased(&rereleases).map(std::sync::Arc::new))
            .collect::<Result<_, _>>()?;
        Ok(contract)
    }

    /// This contract (its variants left as they are) with each question of `rereleases`
    /// released as it says, each checked by `check_release`.
    fn rereleased(&self, rereleases: &BTreeMap<&str, Rerelease>) -> Result<Contract, DeriveError> {
        let mut contract = self.clone();
        for (id, rule) in contract.questions.iter_mut() {
            let Some(Rerelease { view, mechanism }) = rereleases.get(id.as_str()) else {
                continue;
            };
            if view.is_none() && mechanism.is_none() {
                continue;
            }
            let view = view.unwrap_or(rule.view);
            let mechanism = mechanism.clone().unwrap_or_else(|| rule.mechanism.clone());
            check_release(rule, view, &mechanism).map_err(|reason| DeriveError {
                contract: self.name.clone(),
                question: id.clone(),
                reason,
            })?;
            rule.view = view;
            rule.mechanism = mechanism;
        }
        Ok(contract)
    }

    /// The same contract with every question released under `view` and, when given,
    /// `mechanism` ([`Contract::derive`]).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_release(
        &self,
        view: View,
        mechanism: Option<&Mechanism>,
    ) -> Result<Contract, DeriveError> {
        self.derive(|_, _| Rerelease {
            view: Some(view),
            mechanism: mechanism.cloned(),
        })
    }

    /// The same contract with answers shaped as `shape` (both shapes are valid for every
    /// contract), its variants too.
    pub fn with_shape(&self, shape: Shape) -> Contract {
        Contract {
            shape,
            variants: self
                .variants
                .iter()
                .map(|variant| std::sync::Arc::new(variant.with_shape(shape)))
                .collect(),
            ..self.clone()
        }
    }

    /// The questions no audit or gate certifies: those whose text the caller writes
    /// (`caller_text`: the caller can give any label any meaning), and box questions (the
    /// audit's attackers read class answers only, so what a box reveals is never measured).
    pub fn not_certifiable(&self) -> Vec<&str> {
        self.questions
            .iter()
            .filter(|(_, rule)| not_certifiable_because(rule).is_some())
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// Each question of [`Contract::not_certifiable`] with the reason, for messages.
    pub fn not_certifiable_reasons(&self) -> Vec<String> {
        self.questions
            .iter()
            .filter_map(|(id, rule)| {
                not_certifiable_because(rule).map(|why| format!("{id} ({why})"))
            })
            .collect()
    }

    /// Whether any mechanism draws fresh randomness per request.
    pub fn needs_fresh_randomness(&self) -> bool {
        self.questions
            .values()
            .any(|rule| rule.mechanism.needs_fresh_randomness())
    }

    /// Whether releasing may be slow enough to belong off the async threads.
    pub fn is_heavy(&self) -> bool {
        self.questions
            .values()
            .any(|rule| rule.mechanism.is_heavy())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod provider_tests;
