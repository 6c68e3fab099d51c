//! Certificates: what the leakage gate certified, bound to what is served.
//!
//! `releasegate audit ... --gate --certificate-dir DIR` writes one file for every contract and
//! recipient that passes its gate (`contract-NAME.json`, `recipient-NAME.json`). A file records
//! `release_sha256`, the SHA-256 of the canonical JSON of everything that shapes what that
//! recipient receives ([`contract_release`], [`recipient_release`]), the release itself (so that
//! a later configuration can say what changed), the policy it was gated against and the verdict.
//!
//! With `[server] certificates = "DIR"`, validation reads the files back ([`check`]) and gives
//! every contract and recipient that has a policy a [`Status`]: certified, stale (with what
//! changed), missing or invalid. `certification = "required"` refuses to serve a configuration
//! with any of them uncertified ([`Certification::refusal`]); `"advisory"` serves it and says
//! so. Pure: the caller reads the files (`config::Inputs::files`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::Recipient;
use crate::contract::Contract;

mod describe;
mod judge;
use describe::{WorkflowsHash, describe_contract, describe_recipient};
pub use describe::{
    budget_of, contract_policy, contract_release, recipient_budget, recipient_needs_certificate,
    recipient_policy, recipient_release, release_sha256,
};
pub use judge::{check, judge};

/// The `format` of a certificate file.
pub const FORMAT: &str = "releasegate-certificate/1";

/// Largest certificate file read (a release description is a few kilobytes per question).
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

/// `[server] certification`: what serving does with an uncertified contract or recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Certificates are not checked at serving (check-config still reports them).
    #[default]
    Off,
    /// Serve, warn for each uncertified one and export `releasegate_*_certified` as 0.
    Advisory,
    /// Refuse to start or reload with any of them uncertified.
    Required,
}

impl Mode {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Advisory => "advisory",
            Mode::Required => "required",
        }
    }
}

/// What a certificate is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One contract's release.
    Contract,
    /// Everything one recipient's contracts release together.
    Recipient,
}

impl Kind {
    /// `contract` or `recipient`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Contract => "contract",
            Kind::Recipient => "recipient",
        }
    }

    /// The certificate's file name in the certificates directory, or `None` when `name` could
    /// not be one (a path separator, a leading dot, a control character).
    pub fn file_name(self, name: &str) -> Option<String> {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\'])
            && !name.chars().any(char::is_control);
        plain.then(|| format!("{}-{name}.json", self.as_str()))
    }
}

/// One contract's or recipient's certification.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// A passing certificate for exactly this release and policy.
    Certified,
    /// A certificate for another release or policy: what changed, one entry per field.
    Stale(Vec<String>),
    /// No certificate file.
    Missing,
    /// A file that is not a passing certificate of this subject (why).
    Invalid(String),
    /// Not checked: the configuration was loaded without its codebooks, so a WCPQ release
    /// cannot be described (offline tools that build or collect for the codebooks).
    Unchecked,
    /// Its certificate is in the directory, but the configuration no longer gates it (a
    /// contract without a policy, a recipient that needs no certificate of its own): taking
    /// the policy away would otherwise serve it ungated without a word. Restoring the
    /// policy, or removing the certificate, says which was meant.
    Ungated,
}

impl Status {
    /// Whether it is certified.
    pub fn is_certified(&self) -> bool {
        *self == Status::Certified
    }

    /// One line for people: `certified`, `stale (...)`, `missing`, `invalid (...)`.
    pub fn describe(&self) -> String {
        match self {
            Status::Certified => "certified".to_string(),
            Status::Stale(changes) => format!("stale ({})", changes.join("; ")),
            Status::Missing => "missing".to_string(),
            Status::Invalid(why) => format!("invalid ({why})"),
            Status::Unchecked => "not checked (codebooks not loaded)".to_string(),
            Status::Ungated => "ungated (its certificate is in the directory, but the \
                                configuration no longer gates it: restore its policy, or \
                                remove the certificate to serve it ungated)"
                .to_string(),
        }
    }
}

/// The certification of one contract or recipient that has a policy, or that has a
/// certificate but no longer a policy ([`Status::Ungated`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Contract or recipient.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// Its status.
    pub status: Status,
}

/// `[server] certificates` and `certification`, with every entry's status (built by
/// validation only).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Certification {
    mode: Mode,
    dir: Option<PathBuf>,
    entries: Vec<Entry>,
}

impl Certification {
    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The certificates directory, when configured.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Every contract and recipient that needs a certificate, and every one that has a
    /// certificate it no longer needs ([`Status::Ungated`]), contracts first, by name.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries that are not certified.
    pub fn uncertified(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| !e.status.is_certified())
    }

    /// Whether any entry was left unchecked: the configuration was loaded without its
    /// codebooks, and must not be served.
    pub fn unchecked(&self) -> bool {
        self.entries.iter().any(|e| e.status == Status::Unchecked)
    }

    /// `check-config`'s lines: the mode and directory, then each contract and recipient that
    /// needs a certificate with its status (certified, stale with what changed, missing).
    pub fn summary(&self) -> String {
        let mut out = format!(
            "certification: {}{}\n",
            self.mode.as_str(),
            self.dir
                .as_deref()
                .map_or_else(String::new, |d| format!(" · certificates {}", d.display()))
        );
        for entry in &self.entries {
            out.push_str(&format!(
                "  {} {}: {}\n",
                entry.kind.as_str(),
                entry.name,
                entry.status.describe()
            ));
        }
        out
    }

    /// In `required` mode, why this configuration must not be served (one line per uncertified
    /// contract or recipient); `None` otherwise. An entry left unchecked (a configuration
    /// loaded without its codebooks, which is never served: `check-config --no-codebooks`) is
    /// not refused here; [`Certification::unchecked`] tells it.
    pub fn refusal(&self) -> Option<Vec<String>> {
        if self.mode != Mode::Required {
            return None;
        }
        let lines: Vec<String> = self
            .uncertified()
            .filter(|e| e.status != Status::Unchecked)
            .map(|e| {
                let what = format!("{} {}: {}", e.kind.as_str(), e.name, e.status.describe());
                if e.status == Status::Ungated {
                    // Its status says what to do: nothing is left to certify.
                    return what;
                }
                format!(
                    "{what} (certification = \"required\": certify it with `releasegate audit ... --gate --certificate-dir {}`)",
                    self.dir.as_deref().map_or_else(|| "DIR".to_string(), |d| d.display().to_string()),
                )
            })
            .collect();
        (!lines.is_empty()).then_some(lines)
    }
}

/// A certificate file as the gate writes it (what serving reads of it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Certificate {
    /// [`FORMAT`].
    pub format: String,
    /// Contract or recipient.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// SHA-256 (hex) of the canonical JSON of `release`.
    pub release_sha256: String,
    /// Everything that shapes what the recipient receives ([`contract_release`],
    /// [`recipient_release`]).
    pub release: Value,
    /// The policy gated against ([`contract_policy`], [`recipient_policy`]).
    pub policy: Value,
    /// The gate's verdict: `verdict` is `pass`; the rest (gain, interval, pairs, worlds left
    /// out) is the gate's report.
    pub gate: Value,
    /// The audit's inputs and settings: the worlds' SHA-256, seed, bootstrap, tool version.
    pub audit: Value,
    /// When it was written (RFC 3339, UTC).
    pub date: String,
}

impl Certificate {
    /// A passing gate's certificate of `release` against `policy`.
    pub fn new(
        kind: Kind,
        name: &str,
        release: Value,
        policy: Value,
        gate: Value,
        audit: Value,
        date: String,
    ) -> Certificate {
        Certificate {
            format: FORMAT.to_string(),
            kind,
            name: name.to_string(),
            release_sha256: release_sha256(&release),
            release,
            policy,
            gate,
            audit,
            date,
        }
    }
}

/// What a subject must be certified as: its release and its policy.
#[derive(Debug, Clone)]
pub struct Subject {
    /// Contract or recipient.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// [`contract_release`] or [`recipient_release`].
    pub release: Value,
    /// [`contract_policy`] or [`recipient_policy`].
    pub policy: Value,
    /// The `release_sha256` of a certificate written before WCPQ workflows were named by
    /// their canonical hash, when the release names any (such a certificate stays valid).
    pub legacy_release_sha256: Option<String>,
}

/// Every contract with a policy and every recipient that needs a certificate
/// ([`recipient_needs_certificate`]), contracts first, each by name.
pub fn subjects(
    contracts: &BTreeMap<String, std::sync::Arc<Contract>>,
    recipients: &[Recipient],
) -> Vec<Subject> {
    let mut out: Vec<Subject> = contracts
        .values()
        .filter_map(|c| {
            let policy = c.policy.as_ref()?;
            let release = contract_release(c);
            let legacy = describe_contract(c, WorkflowsHash::Legacy);
            Some(Subject {
                kind: Kind::Contract,
                name: c.name.clone(),
                legacy_release_sha256: (legacy != release).then(|| release_sha256(&legacy)),
                release,
                policy: contract_policy(policy),
            })
        })
        .collect();
    for (recipient, held) in by_recipient(contracts, recipients) {
        if !recipient_needs_certificate(recipient, &held) {
            continue;
        }
        let policy = recipient_budget(recipient, &held)
            .map_or_else(|| json!({"hide": []}), recipient_policy);
        let release = recipient_release(&held);
        let legacy = describe_recipient(&held, WorkflowsHash::Legacy);
        out.push(Subject {
            kind: Kind::Recipient,
            name: recipient.name.clone(),
            legacy_release_sha256: (legacy != release).then(|| release_sha256(&legacy)),
            release,
            policy,
        });
    }
    out
}

/// Every contract and recipient that is not a subject ([`subjects`]): a contract without a
/// policy, a recipient that needs no certificate of its own. A certificate of one of them
/// is [`Status::Ungated`].
pub fn ungated(
    contracts: &BTreeMap<String, std::sync::Arc<Contract>>,
    recipients: &[Recipient],
) -> Vec<(Kind, String)> {
    let mut out: Vec<(Kind, String)> = contracts
        .values()
        .filter(|c| c.policy.is_none())
        .map(|c| (Kind::Contract, c.name.clone()))
        .collect();
    for (recipient, held) in by_recipient(contracts, recipients) {
        if !recipient_needs_certificate(recipient, &held) {
            out.push((Kind::Recipient, recipient.name.clone()));
        }
    }
    out
}

/// Each recipient, by name, with the contracts it holds.
fn by_recipient<'a>(
    contracts: &'a BTreeMap<String, std::sync::Arc<Contract>>,
    recipients: &'a [Recipient],
) -> Vec<(&'a Recipient, Vec<&'a Contract>)> {
    let mut out: Vec<(&Recipient, Vec<&Contract>)> = recipients
        .iter()
        .map(|recipient| {
            let held = recipient
                .contracts
                .iter()
                .filter_map(|name| contracts.get(name).map(|c| &**c))
                .collect();
            (recipient, held)
        })
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

#[cfg(test)]
mod tests;
