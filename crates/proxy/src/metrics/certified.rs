//! `releasegate_contract_certified{contract}` and `releasegate_recipient_certified{recipient}`:
//! 1 when the contract or recipient has a certificate for exactly what is served, else 0
//! (`docs/gate.md`). Exported for every contract and recipient that needs a certificate, and
//! at 0 for each that no longer does while its certificate is still there (`ungated`), when
//! `server.certification` is `advisory` or `required`; labels come from the configuration.

use prometheus::{IntGaugeVec, Opts, Registry};

use releasegate_core::certificate::{Kind, Mode};
use releasegate_core::config::Config;

/// The two gauges.
#[derive(Clone, Debug)]
pub(crate) struct Certified {
    /// By contract.
    pub(crate) contract: IntGaugeVec,
    /// By recipient.
    pub(crate) recipient: IntGaugeVec,
}

impl Certified {
    /// Registers both gauges on `registry`.
    pub(super) fn register(registry: &Registry) -> Result<Certified, prometheus::Error> {
        let gauge =
            |name: &str, help: &str, label: &str| -> Result<IntGaugeVec, prometheus::Error> {
                let vec = IntGaugeVec::new(Opts::new(name, help), &[label])?;
                registry.register(Box::new(vec.clone()))?;
                Ok(vec)
            };
        Ok(Certified {
            contract: gauge(
                "releasegate_contract_certified",
                "1 when the contract's release matches a passing leakage certificate, else 0 (contracts with a policy, or with a certificate but no policy)",
                "contract",
            )?,
            recipient: gauge(
                "releasegate_recipient_certified",
                "1 when everything the recipient's contracts release matches a passing leakage certificate, else 0",
                "recipient",
            )?,
        })
    }

    fn vec(&self, kind: Kind) -> &IntGaugeVec {
        match kind {
            Kind::Contract => &self.contract,
            Kind::Recipient => &self.recipient,
        }
    }

    /// Sets every series of `config` (none when certification is off).
    pub(super) fn describe(&self, config: &Config) {
        if config.certification().mode() == Mode::Off {
            return;
        }
        for entry in config.certification().entries() {
            self.vec(entry.kind)
                .with_label_values(&[entry.name.as_str()])
                .set(i64::from(entry.status.is_certified()));
        }
    }

    /// After a reload: sets `new`'s series and removes those only `old` had.
    pub(super) fn redescribe(&self, old: &Config, new: &Config) {
        self.describe(new);
        let exported = |config: &Config| -> std::collections::BTreeSet<(Kind, String)> {
            if config.certification().mode() == Mode::Off {
                return Default::default();
            }
            config
                .certification()
                .entries()
                .iter()
                .map(|e| (e.kind, e.name.clone()))
                .collect()
        };
        let current = exported(new);
        for (kind, name) in exported(old).difference(&current) {
            let _ = self.vec(*kind).remove_label_values(&[name.as_str()]);
        }
    }
}
