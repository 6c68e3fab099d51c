//! The frozen TUPLE-style ontology as data: three domains, four authorized
//! coarse classes per domain and four protected fine mechanisms per class.
//!
//! Each mechanism carries the evidence cues a diagnostic report about it would
//! contain, and the hidden "signature" the simulated provider applies when it
//! reads those cues: a lean of probability mass toward one other coarse class,
//! a sharpness that moves the confidence, and a severity used by score and
//! noul questions. Cue phrases are lowercase and unique across the ontology.

mod delivery;
mod equipment;
mod it_ops;

use delivery::DELIVERY;
use equipment::EQUIPMENT;
use it_ops::IT_OPS;

/// One domain of operational cases.
#[derive(Debug)]
pub struct Domain {
    /// Stable id used in world ids, e.g. `delivery`.
    pub id: &'static str,
    /// Human-readable name.
    pub name: &'static str,
    /// The recipient role allowed to receive the coarse class.
    pub recipient_role: &'static str,
    /// The public request text of every case in the domain.
    pub request: &'static str,
    /// Prefix of the public case reference, e.g. `SHP`.
    pub case_prefix: &'static str,
    /// Public intake channels.
    pub channels: &'static [&'static str],
    /// Public regions or sites.
    pub regions: &'static [&'static str],
    /// Neutral report sentences that carry no mechanism cue.
    pub fillers: &'static [&'static str],
    /// The four authorized coarse classes.
    pub classes: [Class; 4],
}

/// An authorized coarse class `T`.
#[derive(Debug)]
pub struct Class {
    /// The choice label, e.g. `DELAY`.
    pub label: &'static str,
    /// The criterion description sent in the coarse question.
    pub description: &'static str,
    /// Public case-context sentences (one is shared by both worlds of a pair).
    pub contexts: [&'static str; 2],
    /// The four protected mechanisms of the class.
    pub mechanisms: [FineMechanism; 4],
}

/// A protected fine mechanism `S` and its simulated signature.
#[derive(Debug)]
pub struct FineMechanism {
    /// snake_case id, e.g. `missed_transfer`.
    pub id: &'static str,
    /// Lowercase phrases a report about this mechanism contains.
    pub cues: [&'static str; 3],
    /// The other coarse class of the domain that this mechanism pulls mass toward.
    pub lean: &'static str,
    /// Size of the pull, in logits before the provider's global scale.
    pub lean_strength: f64,
    /// Multiplies all logits: above 1 gives sharper answers and higher confidence.
    pub sharpness: f64,
    /// In [0, 1]: where score answers centre and how noul answers lean.
    pub severity: f64,
}

/// A mechanism located in the ontology.
#[derive(Debug, Clone, Copy)]
pub struct Located {
    /// The domain.
    pub domain: &'static Domain,
    /// The coarse class.
    pub class: &'static Class,
    /// The mechanism.
    pub mechanism: &'static FineMechanism,
}

/// The permission text every recipient carries: what it may receive.
pub const MAY_RECEIVE: &str = "coarse business result";
/// The permission text every recipient carries: what it must not receive.
pub const MUST_NOT_RECEIVE: &str = "fine internal mechanism or internal diagnostic narrative";

/// All domains.
pub static DOMAINS: [Domain; 3] = [DELIVERY, EQUIPMENT, IT_OPS];

/// Finds a domain by id.
pub fn domain(id: &str) -> Option<&'static Domain> {
    DOMAINS.iter().find(|d| d.id == id)
}

/// Finds a mechanism by id anywhere in the ontology.
pub fn mechanism(id: &str) -> Option<Located> {
    all_mechanisms().find(|l| l.mechanism.id == id)
}

/// Finds a coarse class by label (exact, then ASCII case-insensitive).
pub fn class(label: &str) -> Option<(&'static Domain, &'static Class)> {
    let all = || {
        DOMAINS
            .iter()
            .flat_map(|d| d.classes.iter().map(move |c| (d, c)))
    };
    all()
        .find(|(_, c)| c.label == label)
        .or_else(|| all().find(|(_, c)| c.label.eq_ignore_ascii_case(label)))
}

/// Every mechanism with its domain and class, in ontology order.
pub fn all_mechanisms() -> impl Iterator<Item = Located> {
    DOMAINS.iter().flat_map(|domain| {
        domain.classes.iter().flat_map(move |class| {
            class.mechanisms.iter().map(move |mechanism| Located {
                domain,
                class,
                mechanism,
            })
        })
    })
}

// === impl Domain ===

impl Domain {
    /// Position of a coarse class label in this domain.
    pub fn class_index(&self, label: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.label == label)
    }
}

/// A mechanism of the tables (`FineMechanism` in table order).
const fn m(
    id: &'static str,
    cues: [&'static str; 3],
    lean: &'static str,
    lean_strength: f64,
    sharpness: f64,
    severity: f64,
) -> FineMechanism {
    FineMechanism {
        id,
        cues,
        lean,
        lean_strength,
        sharpness,
        severity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_is_three_domains_four_classes_four_mechanisms() {
        assert_eq!(DOMAINS.len(), 3);
        assert_eq!(all_mechanisms().count(), 48);
        let mut ids: Vec<&str> = all_mechanisms().map(|l| l.mechanism.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 48, "mechanism ids are unique");
        assert!(ids.iter().all(|id| {
            id.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        }));
    }

    #[test]
    fn leans_point_to_another_class_of_the_same_domain_and_signatures_are_sane() {
        for l in all_mechanisms() {
            assert_ne!(l.mechanism.lean, l.class.label, "{}", l.mechanism.id);
            assert!(l.domain.class_index(l.mechanism.lean).is_some());
            assert!(l.mechanism.lean_strength > 0.0 && l.mechanism.lean_strength < 2.0);
            assert!(l.mechanism.sharpness > 0.5 && l.mechanism.sharpness < 1.5);
            assert!((0.0..=1.0).contains(&l.mechanism.severity));
        }
    }

    #[test]
    fn cues_are_lowercase_unique_and_never_nested() {
        let cues: Vec<&str> = all_mechanisms().flat_map(|l| l.mechanism.cues).collect();
        for (i, a) in cues.iter().enumerate() {
            assert_eq!(*a, a.to_lowercase());
            for (j, b) in cues.iter().enumerate() {
                if i != j {
                    assert!(!a.contains(b), "cue `{b}` is inside `{a}`");
                }
            }
        }
    }

    #[test]
    fn public_and_filler_text_carries_no_cue() {
        let cues: Vec<&str> = all_mechanisms().flat_map(|l| l.mechanism.cues).collect();
        for d in &DOMAINS {
            let mut texts: Vec<&str> = d.fillers.to_vec();
            texts.push(d.request);
            for c in &d.classes {
                texts.extend(c.contexts);
                texts.push(c.description);
            }
            for text in texts {
                let lower = text.to_lowercase();
                assert!(
                    cues.iter().all(|cue| !lower.contains(cue)),
                    "`{text}` contains a cue"
                );
            }
        }
    }

    #[test]
    fn lookups_find_what_exists() {
        assert_eq!(domain("it_ops").map(|d| d.name), Some("IT operations"));
        assert!(domain("nope").is_none());
        let l = mechanism("stale_overlay_route").expect("exists");
        assert_eq!((l.domain.id, l.class.label), ("it_ops", "NETWORK"));
        assert_eq!(
            class("delay").map(|(d, c)| (d.id, c.label)),
            Some(("delivery", "DELAY"))
        );
        assert!(class("WITHHOLD").is_none());
    }
}
