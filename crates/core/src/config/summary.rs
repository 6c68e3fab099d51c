//! What `check-config` prints and start-up logs: the configuration's summary and the
//! warnings about settings that weaken a contract on purpose.

use super::{Config, DecisionSink, Provider, Recipient};
use crate::contract::{Contract, Shape, View};
use crate::mechanism::{Fallback, Mechanism};
use crate::wire::Kind;

impl Config {
    /// A short human summary (printed by `check-config`).
    pub fn summary(&self) -> String {
        let mut out = self.server_summary();
        out.push_str(&self.outputs_summary());
        for (name, provider) in &self.providers {
            out.push_str(&provider_line(name, provider));
        }
        for recipient in &self.recipients {
            out.push_str(&recipient_line(recipient));
        }
        for (name, contract) in &self.contracts {
            out.push_str(&contract_summary(name, contract));
        }
        out.push_str(&self.unloaded_summary());
        for warning in self.warnings() {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out
    }

    /// The summary's first lines: the source, the listeners, the connection limits and reload.
    fn server_summary(&self) -> String {
        let mut out = format!(
            "configuration OK ({})\nlisten {} · admin {} · max body {} bytes\n",
            self.source, self.server.listen, self.server.admin_listen, self.server.max_body_bytes
        );
        out.push_str(&format!(
            "connections: public {} · admin {} · header {} ms · body {} ms · idle {} ms · drain delay {} ms · grace {} ms · worker threads {} · access log {}\n",
            self.server.max_connections,
            self.server.admin_max_connections,
            self.server.header_read_timeout.as_millis(),
            self.server.body_read_timeout.as_millis(),
            self.server.idle_timeout.as_millis(),
            self.server.drain_delay.as_millis(),
            self.server.shutdown_grace.as_millis(),
            match self.server.worker_threads {
                0 => "one per CPU (the CPU quota rounded up, else the cores)".to_string(),
                n => n.to_string(),
            },
            if self.server.access_log { "on" } else { "off" },
        ));
        out.push_str(&format!(
            "request bytes in flight: {} · queue {} ms\n",
            match self.server.max_decoded_bytes_in_flight {
                Some(bytes) => format!("at most {bytes} bytes"),
                None => "auto (an eighth of the memory limit, 64 MiB to 256 MiB)".to_string(),
            },
            self.server.decoded_bytes_queue_timeout.as_millis(),
        ));
        out.push_str(&format!(
            "reload: SIGHUP{} · sha256 {}\n",
            if self.server.watch_config {
                format!(
                    ", and file changes (checked every {} ms)",
                    self.server.watch_interval.as_millis()
                )
            } else {
                String::new()
            },
            self.origin.sha256,
        ));
        out
    }

    /// The summary's lines on what goes out besides answers: traces, shared rate limits,
    /// certification, the decision log and captures.
    fn outputs_summary(&self) -> String {
        let mut out = String::new();
        match &self.tracing {
            None => out.push_str("traces: not exported\n"),
            Some(tracing) => out.push_str(&format!(
                "traces: OTLP/HTTP to {}/v1/traces as {}\n",
                tracing.otlp_endpoint, tracing.service_name
            )),
        }
        match &self.rate_limit_store {
            None => out.push_str("rate limits: per replica\n"),
            Some(store) => out.push_str(&format!(
                "rate limits: shared through redis {} (prefix {}, timeout {} ms, password {}); per replica while it is unreachable\n",
                store.url,
                store.key_prefix,
                store.timeout.as_millis(),
                if store.password.is_some() { "set" } else { "none" },
            )),
        }
        out.push_str(&self.certification.summary());
        match &self.decision_log {
            None => out.push_str("decision log: off\n"),
            Some(log) => out.push_str(&format!(
                "decision log: {} · queue {}\n",
                match &log.sink {
                    DecisionSink::Stdout => "stdout".to_string(),
                    DecisionSink::File(path) => format!(
                        "{} (rotated at {} bytes, {} files kept)",
                        path.display(),
                        log.max_bytes,
                        log.max_files
                    ),
                },
                log.queue_capacity
            )),
        }
        for (name, capture) in &self.captures {
            out.push_str(&format!(
                "capture {name}: {} · sample rate {} · rotated at {} bytes, {} files kept · queue {}\n",
                capture.path.display(),
                capture.sample_rate,
                capture.max_bytes,
                capture.max_files,
                capture.queue_capacity
            ));
        }
        out
    }

    /// What a configuration loaded without its codebooks did not check: each WCPQ question's
    /// codebook (whether its file exists yet) and the certificates (empty when codebooks were
    /// loaded).
    fn unloaded_summary(&self) -> String {
        if self.unloaded_codebooks.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "skipped (codebooks not loaded): these WCPQ questions' codebooks, so their mechanism \
             is not checked (each is shown above as `none`), nor is any certificate; run \
             check-config without --no-codebooks once they are built (collect, build-codebook: \
             docs/collect.md)\n",
        );
        for unloaded in &self.unloaded_codebooks {
            out.push_str(&format!(
                "  {}: codebook {} ({})\n",
                unloaded.question,
                unloaded.path.display(),
                if unloaded.path.exists() {
                    "exists, not read"
                } else {
                    "does not exist yet"
                }
            ));
        }
        out
    }

    /// In `advisory` certification, one warning per contract or recipient served without a
    /// certificate for what it releases (logged at start and at every reload).
    pub fn certification_warnings(&self) -> Vec<String> {
        if self.certification.mode() != crate::certificate::Mode::Advisory {
            return Vec::new();
        }
        self.certification
            .uncertified()
            .map(|entry| {
                format!(
                    "{} {} is served uncertified: {} (server.certification = \"advisory\")",
                    entry.kind.as_str(),
                    entry.name,
                    entry.status.describe()
                )
            })
            .collect()
    }

    /// Settings that weaken a contract on purpose, each naming its key (printed by
    /// `check-config` and logged at start-up): a live capture (it stores native answers), a
    /// question whose text the caller writes, a baseline that releases the provider's own
    /// confidence, and a contract that hides something without a pinned model (from a remote provider).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = self.certification_warnings();
        for (name, capture) in &self.captures {
            warnings.push(format!(
                "contracts.{name}.capture: {} stores a sample ({}) of this contract's native answers \
                 with the requests that produced them (state included): the very answers the contract \
                 releases only in part. The file is created with mode 0600; keep it, its rotations \
                 and any copies to the people who may read native answers",
                capture.path.display(),
                capture.sample_rate
            ));
        }
        warnings.extend(self.typed_client_warnings());
        for (name, contract) in &self.contracts {
            if let Some(why) = usage_keep_risk(contract) {
                warnings.push(format!(
                    "contracts.{name}.usage = \"keep\": the provider's output_tokens goes out unchanged, \
                     and it follows what the model wrote (a longer label, a longer answer) although {why}; \
                     two releases that differ only in output_tokens can tell apart what the release \
                     hides. Use usage = \"input\" (input_tokens only) or \"drop\""
                ));
            }
            // The in-process simulator answers with its own fixed ids; a remote provider's is
            // whatever it sends.
            let remote = contract.providers.iter().any(|provider| {
                matches!(self.providers.get(provider), Some(Provider::SystemOne(_)))
            });
            if remote
                && contract.model.is_none()
                && contract.policy.as_ref().is_some_and(|p| !p.hide.is_empty())
            {
                warnings.push(format!(
                    "contracts.{name}.model is not pinned although the contract hides something: \
                     the caller's model goes to the provider as sent and the provider's model id \
                     (up to 128 characters it chooses) goes out in every release, which the gate \
                     does not read. Pin model"
                ));
            }
            if contract.providers.len() > 1 && contract.usage.keeps_input() {
                warnings.push(format!(
                    "contracts.{name}.usage = \"{}\" with several providers: each counts tokens \
                     its own way, so the released counts can tell a recipient which provider \
                     answered (the release never names it otherwise). Use usage = \"drop\"",
                    contract.usage.as_str()
                ));
            }
            for (id, rule) in &contract.questions {
                let key = format!("contracts.{name}.questions.{id}");
                if rule.question.caller_text {
                    warnings.push(format!(
                        "{key}.caller_text = true: the caller writes this question's instructions and \
                         descriptions, so it can give any label any meaning (swap two labels, ask a \
                         yes/no question about anything); the audit and the gate report it as not certifiable"
                    ));
                }
                if rule.question.kind == Kind::Box {
                    warnings.push(format!(
                        "{key}: a box question; its edges can carry what the contract hides (where \
                         in the image the model looked), the audit does not read them, and the gate \
                         reports the contract as not certifiable; quantize with a coarse step, or \
                         release view = \"choice\" to drop the confidence"
                    ));
                }
                if rule.mechanism.confidence_source()
                    == Some(crate::mechanism::ConfidenceSource::Native)
                {
                    warnings.push(format!(
                        "{key}.mechanism.confidence = \"native\": the provider's confidence goes out at \
                         full precision beside the rewritten probabilities (under Jev's definition it \
                         gives the native top probability back); for audits that replicate the paper's \
                         baselines, not for serving"
                    ));
                }
            }
        }
        warnings
    }
}

impl Config {
    /// Settings whose releases the official typed clients cannot read, each with what to use
    /// instead: a contract's `shape = "minimal"`, and a WCPQ `fallback = "deny"` (also of a
    /// question whose codebook was not loaded).
    fn typed_client_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut deny = Vec::new();
        for (name, contract) in &self.contracts {
            if contract.shape == Shape::Minimal {
                warnings.push(format!(
                    "contracts.{name}.shape = \"minimal\": answers carry only the view's fields, \
                     which typed clients cannot read: the Python SDK raises a validation error on \
                     the 200, and the JS SDK returns undefined for fields its types promise (a \
                     choice view's confidence and probabilities). Use shape = \"complete\" (the \
                     default): its fills are computed from the released fields and release \
                     nothing more"
                ));
            }
            for (id, rule) in &contract.questions {
                if let Mechanism::Wcpq(wcpq) = &rule.mechanism
                    && wcpq.fallback == Fallback::Deny
                {
                    deny.push((format!("contracts.{name}.questions.{id}"), id.as_str()));
                }
            }
        }
        let unloaded = self.unloaded_codebooks.iter().filter_map(|u| {
            let id = u.question.rsplit('.').next().unwrap_or_default();
            (u.fallback == Some(Fallback::Deny)).then(|| (u.question.clone(), id))
        });
        for (key, id) in deny.into_iter().chain(unloaded) {
            warnings.push(format!(
                "{key}.mechanism.fallback = \"deny\": an answer no codeword covers is left out of \
                 `answers`, which typed clients do not expect: Python `result.choices[\"{id}\"]` \
                 raises KeyError, and the JS SDK's `answers.{id}` is undefined (reading a field \
                 throws TypeError). Use fallback = \"choice_only\" (the choice alone, which every \
                 client reads), or have every caller check for the answer first"
            ));
        }
        warnings
    }
}

/// Why `usage = "keep"` undoes part of `contract` (`None` when it keeps usage otherwise, or
/// releases every question in full): a question that coarsens, withholds, uses a mechanism or
/// releases less than `full_native`.
fn usage_keep_risk(contract: &Contract) -> Option<String> {
    if !contract.usage.keeps() {
        return None;
    }
    contract.questions.iter().find_map(|(id, rule)| {
        let why = if rule.coarsen.is_some() {
            "it coarsens"
        } else if rule.withhold.iter().any(|w| *w) {
            "it withholds labels"
        } else if !matches!(rule.mechanism, Mechanism::None) {
            "it rewrites the answer with a mechanism"
        } else if rule.view != View::FullNative {
            "its view releases less than full_native"
        } else {
            return None;
        };
        Some(format!("question {id}: {why}"))
    })
}

/// The summary's line on one provider.
fn provider_line(name: &str, provider: &Provider) -> String {
    match provider {
        Provider::Simulated => format!("provider {name}: simulated\n"),
        Provider::SystemOne(remote) => format!(
            "provider {name}: systemone {} (timeout {} ms, concurrency {}, key {})\n",
            remote.base_url,
            remote.timeout.as_millis(),
            remote.max_concurrency,
            if remote.api_key.is_some() {
                "set"
            } else {
                "none"
            }
        ),
    }
}

/// The summary's line on one recipient.
fn recipient_line(recipient: &Recipient) -> String {
    format!(
        "recipient {}: contracts {}{}{}\n",
        recipient.name,
        recipient.contracts.join(", "),
        match recipient.rate_limit {
            Some(limit) => format!(
                " · rate limit {}/s, burst {} (per replica)",
                limit.requests_per_second, limit.burst
            ),
            None => String::new(),
        },
        match recipient.max_in_flight {
            Some(count) => format!(" · at most {count} in flight (per replica)"),
            None => String::new(),
        }
    )
}

/// The summary's lines on one contract and each of its questions.
fn contract_summary(name: &str, contract: &Contract) -> String {
    let mut out = String::new();
    let providers = match contract.providers.as_slice() {
        [one] => format!("provider {one}"),
        many => format!(
            "providers {} (failover on {:?}{})",
            many.join(", "),
            contract.failover.on,
            if contract.failover.retry_sent {
                ", retry_sent: a request a provider may have received is sent again and may be paid twice"
            } else {
                ""
            }
        ),
    };
    let cache = contract.cache.as_ref().map_or(String::new(), |cache| {
        format!(
            ", cache {} s, {} bytes, scope {}, {:?}{}",
            cache.ttl.as_secs(),
            cache.max_bytes,
            cache.scope.as_str(),
            cache.store,
            if cache.scope == crate::contract::CacheScope::Provider {
                " (warning: hit timing tells a recipient that another asked the same question)"
            } else {
                ""
            }
        )
    });
    out.push_str(&format!(
        "contract {name}: {providers}, usage {:?}, shape {}{cache}\n",
        contract.usage, contract.shape
    ));
    for (question, rule) in &contract.questions {
        let options = if rule.question.kind == Kind::Box {
            "a box".to_string()
        } else {
            format!("{} classes", rule.classes.len())
        };
        out.push_str(&format!(
            "  question {question}: {options}, view {}, mechanism {}{}{}\n",
            rule.view,
            rule.mechanism.kind(),
            if rule.coarsen.is_some() {
                ", coarsened"
            } else {
                ""
            },
            if rule.withhold.iter().any(|w| *w) {
                ", withholding"
            } else {
                ""
            },
        ));
        out.push_str(&format!(
            "    asks a {} question, {}\n",
            rule.question.kind.as_str(),
            if rule.question.caller_text {
                "with the caller's instructions and descriptions (caller_text)".to_string()
            } else {
                let described = rule.question.descriptions.iter().flatten().count();
                let instructions = if rule.question.instructions.is_some() {
                    "instructions"
                } else {
                    "no instructions"
                };
                if rule.question.kind == Kind::Box {
                    format!("pinned: {instructions}")
                } else {
                    format!(
                        "pinned: {instructions}, {described} of {} options described",
                        rule.classes.len()
                    )
                }
            }
        ));
        if let crate::mechanism::Mechanism::Wcpq(wcpq) = &rule.mechanism {
            out.push_str(&format!(
                "    wcpq fallback {}: {}\n",
                wcpq.fallback.as_str(),
                wcpq.fallback.disclosure(contract.shape)
            ));
            if let Some(effect) = wcpq.fallback.typed_clients(contract.shape) {
                out.push_str(&format!("    typed clients: {effect}\n"));
            }
        }
    }
    out
}
