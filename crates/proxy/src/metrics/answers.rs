//! The series a released answer counts in ([`AnswerSeries`]), resolved once per
//! configuration generation, and counting an answer in them.

use std::collections::HashMap;

use foldhash::fast::FixedState;
use prometheus::{Histogram, IntCounter, IntCounterVec};

use releasegate_core::config::Config;
use releasegate_core::mechanism::{self, Mechanism};
use releasegate_core::release::AnswerRecord;
use releasegate_core::wcpq::{Reason, Stage};

use super::{Metrics, PerShard, Sharded, sharded};

/// The series a released answer counts in, per contract and question, resolved once per
/// configuration generation ([`Metrics::answer_series`]): recording an answer then takes
/// two map lookups instead of a label lookup per series (four for a WCPQ answer).
#[derive(Debug, Default)]
pub struct AnswerSeries {
    /// Per contract and question, each thread shard's series (of that shard's copy of
    /// the families).
    by_contract: HashMap<String, HashMap<String, PerShard<QuestionSeries>, FixedState>, FixedState>,
}

/// One question's series.
#[derive(Debug)]
struct QuestionSeries {
    /// `releasegate_released_answers_total` under the question's view.
    released: IntCounter,
    /// The view of `released`: a record of another view (none today) is counted by label.
    view: &'static str,
    wcpq: Option<WcpqSeries>,
}

/// A WCPQ question's series.
#[derive(Debug)]
struct WcpqSeries {
    covered: IntCounter,
    fallback: IntCounter,
    /// In [`Stage::ALL`] order.
    stages: [IntCounter; 2],
    /// In [`Reason::LABELS`] order.
    reasons: [IntCounter; 4],
    mapping: Histogram,
}

impl Metrics {
    /// Resolves the answer series of every question of `config` (creating them, at zero).
    pub fn answer_series(&self, config: &Config) -> AnswerSeries {
        let mut by_contract = HashMap::with_hasher(FixedState::default());
        for (name, contract) in config.contracts() {
            let mut questions = HashMap::with_hasher(FixedState::default());
            for (question, rule) in contract.questions() {
                let labels = [name.as_str(), question.as_str()];
                let view = rule.view().as_str();
                let is_wcpq = matches!(rule.mechanism(), Mechanism::Wcpq(_));
                let mut released = self.released_answers.each();
                let series = PerShard::new(|shard| QuestionSeries {
                    released: released
                        .next()
                        .map(|family| family.with_label_values(&[labels[0], labels[1], view]))
                        .unwrap_or_else(|| {
                            self.released_answers
                                .here()
                                .with_label_values(&[labels[0], labels[1], view])
                        }),
                    view,
                    wcpq: is_wcpq.then(|| self.wcpq_series(labels, shard)),
                });
                questions.insert(question.clone(), series);
            }
            by_contract.insert(name.clone(), questions);
        }
        AnswerSeries { by_contract }
    }

    /// A WCPQ question's series (`labels`: contract, question) in thread shard `shard`'s
    /// copy of the families, created at zero.
    fn wcpq_series(&self, labels: [&str; 2], shard: usize) -> WcpqSeries {
        fn copy<V>(family: &Sharded<V>, shard: usize) -> &V {
            family.each().nth(shard).unwrap_or_else(|| family.here())
        }
        let with = |family: &Sharded<IntCounterVec>, label: &str| {
            copy(family, shard).with_label_values(&[labels[0], labels[1], label])
        };
        WcpqSeries {
            covered: with(&self.wcpq_answers, "covered"),
            fallback: with(&self.wcpq_answers, "fallback"),
            stages: Stage::ALL.map(|stage| with(&self.wcpq_covered, stage.label())),
            reasons: Reason::LABELS.map(|reason| with(&self.wcpq_fallbacks, reason)),
            mapping: copy(&self.wcpq_mapping, shard).with_label_values(&labels),
        }
    }

    /// Counts one released answer of `contract`: through `series` where it has the
    /// question's, by label otherwise (the same series either way).
    pub fn record_answer(&self, series: &AnswerSeries, contract: &str, record: &AnswerRecord) {
        let labels = [contract, record.question.as_str()];
        let resolved = series
            .by_contract
            .get(contract)
            .and_then(|questions| questions.get(&record.question))
            .map(PerShard::here);
        match resolved.filter(|resolved| resolved.view == record.view.as_str()) {
            Some(resolved) => resolved.released.inc(),
            None => self
                .released_answers
                .here()
                .with_label_values(&[labels[0], labels[1], record.view.as_str()])
                .inc(),
        }
        if matches!(record.mechanism, mechanism::Outcome::Applied)
            && record.mapping_seconds.is_none()
        {
            return;
        }
        let by_label;
        let wcpq = match resolved.and_then(|resolved| resolved.wcpq.as_ref()) {
            Some(wcpq) => wcpq,
            None => {
                by_label = self.wcpq_series(labels, sharded::shard());
                &by_label
            }
        };
        match &record.mechanism {
            mechanism::Outcome::Applied => {}
            mechanism::Outcome::Covered { stage, .. } => {
                wcpq.covered.inc();
                // `Stage::ALL` lists every stage.
                if let Some(at) = Stage::ALL.iter().position(|s| s == stage) {
                    wcpq.stages[at].inc();
                }
            }
            mechanism::Outcome::Fallback(reason) => {
                wcpq.fallback.inc();
                // `Reason::LABELS` lists every reason's label.
                if let Some(at) = Reason::LABELS.iter().position(|l| *l == reason.label()) {
                    wcpq.reasons[at].inc();
                }
            }
        }
        if let Some(seconds) = record.mapping_seconds {
            wcpq.mapping.observe(seconds);
        }
    }
}
