//! `audit --gate --certificate-dir DIR`: a certificate (`releasegate_core::certificate`) for
//! every gated contract and recipient that passes, bound to the release the configuration
//! serves, for `[server] certificates = "DIR"` to check (`docs/gate.md`).

use std::path::{Path, PathBuf};

use releasegate_core::certificate::{self, Certificate, Kind};
use releasegate_core::config::Config;
use releasegate_core::contract::Contract;
use releasegate_lab::audit;
use releasegate_lab::audit::gate::{GateResult, Verdict};

use super::super::error::Error;

/// What the certificates record of the audit that gated them.
pub(super) struct Audited<'a> {
    /// The worlds file.
    pub worlds: &'a Path,
    /// The audit's settings (seed, bootstrap).
    pub settings: &'a audit::Config,
    /// `--recipient`, when given.
    pub recipient: Option<&'a str>,
}

/// Writes `DIR/contract-NAME.json` or `DIR/recipient-NAME.json` for every passing result;
/// returns the files written. Nothing is written when the pairs failed the input checks.
pub(super) fn write(
    dir: &Path,
    config: &Config,
    results: &[GateResult],
    audited: &Audited<'_>,
) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::usage(format!("cannot create {}: {e}", dir.display())))?;
    let worlds = std::fs::read(audited.worlds)
        .map_err(|e| Error::usage(format!("cannot read {}: {e}", audited.worlds.display())))?;
    let audit = serde_json::json!({
        "worlds_sha256": releasegate_core::workflow::sha256_hex(&worlds),
        "seed": audited.settings.seed,
        "bootstrap": audited.settings.n_bootstrap,
        "tool": releasegate_proxy::build_version(),
    });
    let date =
        releasegate_proxy::telemetry::Rfc3339::millis(std::time::SystemTime::now()).to_string();
    let mut written = Vec::new();
    for result in results.iter().filter(|r| r.verdict == Verdict::Pass) {
        let Some((kind, name, release, policy)) = subject(config, result, audited.recipient) else {
            continue;
        };
        let gate = serde_json::to_value(result).map_err(|e| Error::Failure(e.to_string()))?;
        let certificate = Certificate::new(
            kind,
            &name,
            release,
            policy,
            gate,
            audit.clone(),
            date.clone(),
        );
        let file = kind
            .file_name(&name)
            .ok_or_else(|| Error::usage(format!("`{name}` cannot name a certificate file")))?;
        let path = dir.join(file);
        let text = serde_json::to_string_pretty(&certificate)
            .map_err(|e| Error::Failure(e.to_string()))?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| Error::usage(format!("cannot write {}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

/// The subject of a gate result: a contract by its name, or `recipient NAME`, with the
/// release and policy the configuration serves it with.
fn subject(
    config: &Config,
    result: &GateResult,
    recipient: Option<&str>,
) -> Option<(Kind, String, serde_json::Value, serde_json::Value)> {
    if let Some(name) = recipient.filter(|n| result.contract == format!("recipient {n}")) {
        let recipient = config.recipients().iter().find(|r| r.name == name)?;
        let held: Vec<&Contract> = recipient
            .contracts
            .iter()
            .filter_map(|c| config.contract(c).map(|c| &**c))
            .collect();
        // A recipient bound to one contract and no policy of its own is certified by that
        // contract's certificate: a file of its own would never be read.
        if !certificate::recipient_needs_certificate(recipient, &held) {
            return None;
        }
        let budget = certificate::recipient_budget(recipient, &held)?;
        return Some((
            Kind::Recipient,
            name.to_string(),
            certificate::recipient_release(&held),
            certificate::recipient_policy(budget),
        ));
    }
    let contract = config.contract(&result.contract)?;
    let policy = contract.policy()?;
    Some((
        Kind::Contract,
        contract.name().to_string(),
        certificate::contract_release(contract),
        certificate::contract_policy(policy),
    ))
}
