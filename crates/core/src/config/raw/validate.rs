//! The whole configuration checked: every section in turn, then the rules across sections
//! (one writer per file, the certificates of the contracts and recipients).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RawConfig;
use super::contracts::validate_contract;
use super::outputs::{
    validate_capture, validate_decision_log, validate_rate_limit_store, validate_tracing,
};
use super::providers::validate_provider;
use super::recipients::validate_recipients;
use super::server::validate_server;
use crate::config::{Capture, Config, DecisionLog, DecisionSink, Error, Inputs, Origin, Server};
use crate::contract::Contract;

impl RawConfig {
    /// Validates into typed config; `env` reads provider keys.
    pub(crate) fn validate(
        self,
        source: String,
        base_dir: &Path,
        inputs: &Inputs<'_>,
    ) -> Result<Config, Error> {
        let mut problems = Vec::new();
        let server = validate_server(self.server, base_dir, &mut problems);
        let decision_log = self
            .decision_log
            .map(|raw| validate_decision_log(raw, base_dir, &mut problems));
        let rate_limit_store = self
            .rate_limit_store
            .and_then(|raw| validate_rate_limit_store(raw, inputs.env, &mut problems));
        let tracing = self
            .tracing
            .and_then(|raw| validate_tracing(raw, &mut problems));

        let declared: BTreeSet<String> = self.providers.keys().cloned().collect();
        let mut providers = BTreeMap::new();
        for (name, raw) in self.providers {
            if let Some(provider) = validate_provider(&name, raw, inputs.env, &mut problems) {
                providers.insert(name, provider);
            }
        }

        let unloaded_codebooks = if inputs.codebooks {
            Vec::new()
        } else {
            super::unloaded::unloaded_codebooks(&self.contracts, base_dir)
        };
        let mut files = Vec::new();
        let (contracts, captures) = validate_contracts(
            self.contracts,
            &declared,
            base_dir,
            inputs,
            &mut files,
            &mut problems,
        );

        let recipients = validate_recipients(self.recipients, &contracts, &mut problems);
        check_one_writer_per_file(decision_log.as_ref(), &captures, &mut problems);

        let subjects = crate::certificate::subjects(&contracts, &recipients);
        let ungated = crate::certificate::ungated(&contracts, &recipients);
        files.extend(certificate_files(&server, &subjects, &ungated));
        let certification = crate::certificate::check(
            server.certification(),
            server.certificates().map(Path::to_path_buf),
            &subjects,
            &ungated,
            inputs.codebooks,
            inputs.files,
        );
        if problems.is_empty() {
            Ok(Config {
                certification,
                unloaded_codebooks,
                server,
                providers,
                recipients,
                contracts,
                source,
                decision_log,
                captures,
                rate_limit_store,
                tracing,
                origin: Origin {
                    files,
                    ..Origin::default()
                },
            })
        } else {
            Err(Error::Invalid(problems))
        }
    }
}

/// Checks every contract, and takes out the captures they configure.
fn validate_contracts(
    raws: BTreeMap<String, super::RawContract>,
    declared: &BTreeSet<String>,
    base_dir: &Path,
    inputs: &Inputs<'_>,
    files: &mut Vec<PathBuf>,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, Arc<Contract>>, BTreeMap<String, Capture>) {
    let mut contracts = BTreeMap::new();
    let mut captures = BTreeMap::new();
    for (name, mut raw) in raws {
        if let Some(capture) = raw.capture.take() {
            let key = format!("contracts.{name}.capture");
            let capture = validate_capture(&key, capture, base_dir, problems);
            captures.insert(name.clone(), capture);
        }
        let contract = validate_contract(
            name.clone(),
            raw,
            declared,
            base_dir,
            inputs,
            files,
            problems,
        );
        contracts.insert(name, Arc::new(contract));
    }
    (contracts, captures)
}

/// One writer per file: two captures (or a capture and the decision log) never share one.
fn check_one_writer_per_file(
    decision_log: Option<&DecisionLog>,
    captures: &BTreeMap<String, Capture>,
    problems: &mut Vec<String>,
) {
    let mut paths: BTreeMap<&Path, &str> = BTreeMap::new();
    if let Some(DecisionSink::File(path)) = decision_log.map(|l| l.sink()) {
        paths.insert(path.as_path(), "decision_log.path");
    }
    for (name, capture) in captures {
        if let Some(other) = paths.insert(capture.path.as_path(), name.as_str()) {
            problems.push(format!(
                "contracts.{name}.capture.path: {} is already written by {}",
                capture.path.display(),
                if other == "decision_log.path" {
                    other.to_string()
                } else {
                    format!("contracts.{other}.capture")
                }
            ));
        }
    }
}

/// The certificates are files the configuration names: a reload (and the file watch) reads
/// them again, those of the contracts and recipients it no longer gates too (a certificate
/// removed to confirm that is seen).
fn certificate_files(
    server: &Server,
    subjects: &[crate::certificate::Subject],
    ungated: &[(crate::certificate::Kind, String)],
) -> Vec<PathBuf> {
    let Some(dir) = server.certificates() else {
        return Vec::new();
    };
    subjects
        .iter()
        .map(|s| (s.kind, s.name.as_str()))
        .chain(ungated.iter().map(|(kind, name)| (*kind, name.as_str())))
        .filter_map(|(kind, name)| kind.file_name(name))
        .map(|name| dir.join(name))
        .collect()
}
