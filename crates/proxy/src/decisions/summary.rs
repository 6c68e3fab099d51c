//! `releasegate decisions`: coverage and fallback rates per contract and question, and
//! status counts per recipient, over one or more decision log files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Lines of the log as the summary reads them (unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Line {
    recipient: Option<String>,
    contract: Option<String>,
    status: u16,
    #[serde(default)]
    answers: Vec<Answer>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    question: String,
    outcome: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    withheld: bool,
}

/// The summary of one or more logs.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Lines read as decisions.
    pub requests: u64,
    /// Lines that are not decision records, as `FILE:LINE` (the first 20).
    pub invalid_lines: Vec<String>,
    /// How many lines were invalid in all.
    pub invalid_count: u64,
    /// Per recipient (`-` when the key was unknown).
    pub recipients: BTreeMap<String, RecipientSummary>,
    /// Per contract, per question.
    pub contracts: BTreeMap<String, BTreeMap<String, QuestionSummary>>,
}

/// One recipient's requests.
#[derive(Debug, Default, Serialize)]
pub struct RecipientSummary {
    /// Requests in all.
    pub requests: u64,
    /// Requests by status code.
    pub statuses: BTreeMap<u16, u64>,
}

/// One question's released answers.
#[derive(Debug, Default, Serialize)]
pub struct QuestionSummary {
    /// Released answers.
    pub answers: u64,
    /// WCPQ covered answers.
    pub covered: u64,
    /// WCPQ fallbacks.
    pub fallback: u64,
    /// Answers of other mechanisms.
    pub applied: u64,
    /// Answers whose selection was withheld.
    pub withheld: u64,
    /// covered / (covered + fallback), when WCPQ mapped any.
    pub coverage: Option<f64>,
    /// fallback / answers, when there were answers.
    pub fallback_rate: Option<f64>,
    /// Fallbacks by reason.
    pub fallback_reasons: BTreeMap<String, u64>,
}

const MAX_INVALID_SHOWN: usize = 20;

// === impl Summary ===

impl Summary {
    /// Adds one line of `file` (numbered from 1). Empty lines are skipped.
    pub fn add_line(&mut self, file: &str, number: usize, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            self.invalid_count += 1;
            if self.invalid_lines.len() < MAX_INVALID_SHOWN {
                self.invalid_lines.push(format!("{file}:{number}"));
            }
            return;
        };
        self.requests += 1;
        let recipient = self
            .recipients
            .entry(line.recipient.unwrap_or_else(|| "-".to_string()))
            .or_default();
        recipient.requests += 1;
        *recipient.statuses.entry(line.status).or_default() += 1;
        let Some(contract) = line.contract else {
            return;
        };
        let questions = self.contracts.entry(contract).or_default();
        for answer in line.answers {
            let question = questions.entry(answer.question).or_default();
            question.answers += 1;
            question.withheld += u64::from(answer.withheld);
            match answer.outcome.as_str() {
                "covered" => question.covered += 1,
                "fallback" => {
                    question.fallback += 1;
                    let reason = answer.reason.unwrap_or_else(|| "unknown".to_string());
                    *question.fallback_reasons.entry(reason).or_default() += 1;
                }
                _ => question.applied += 1,
            }
        }
    }

    /// Computes the rates (call once all lines are in).
    pub fn finish(&mut self) {
        for question in self.contracts.values_mut().flat_map(BTreeMap::values_mut) {
            let mapped = question.covered + question.fallback;
            question.coverage = (mapped > 0).then(|| question.covered as f64 / mapped as f64);
            question.fallback_rate =
                (question.answers > 0).then(|| question.fallback as f64 / question.answers as f64);
        }
    }

    /// The text tables.
    pub fn to_text(&self) -> String {
        let mut out = format!("{} requests", self.requests);
        if self.invalid_count > 0 {
            out.push_str(&format!(
                ", {} lines that are not decisions ({})",
                self.invalid_count,
                self.invalid_lines.join(", ")
            ));
        }
        out.push_str("\n\n");
        let mut rows = vec![vec![
            "recipient".to_string(),
            "requests".to_string(),
            "statuses".to_string(),
        ]];
        for (name, recipient) in &self.recipients {
            let statuses: Vec<String> = recipient
                .statuses
                .iter()
                .map(|(status, count)| format!("{status}: {count}"))
                .collect();
            rows.push(vec![
                name.clone(),
                recipient.requests.to_string(),
                statuses.join(", "),
            ]);
        }
        out.push_str(&table(&rows));
        out.push('\n');
        let percent =
            |rate: Option<f64>| rate.map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0));
        let mut rows = vec![
            [
                "contract",
                "question",
                "answers",
                "covered",
                "fallback",
                "applied",
                "withheld",
                "coverage",
                "fallback rate",
                "fallback reasons",
            ]
            .map(str::to_string)
            .to_vec(),
        ];
        for (contract, questions) in &self.contracts {
            for (id, question) in questions {
                let reasons: Vec<String> = question
                    .fallback_reasons
                    .iter()
                    .map(|(reason, count)| format!("{reason}: {count}"))
                    .collect();
                rows.push(vec![
                    contract.clone(),
                    id.clone(),
                    question.answers.to_string(),
                    question.covered.to_string(),
                    question.fallback.to_string(),
                    question.applied.to_string(),
                    question.withheld.to_string(),
                    percent(question.coverage),
                    percent(question.fallback_rate),
                    reasons.join(", "),
                ]);
            }
        }
        out.push_str(&table(&rows));
        out
    }
}

/// Left-aligned columns separated by two spaces; trailing spaces trimmed.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_per_question_and_statuses_per_recipient() {
        let lines = [
            r#"{"ts":"t","request_id":"a","route":"systemone","recipient":"one","contract":"c","provider":"p","status":200,"latency_ms":1.0,"answers":[{"question":"q","view":"choice","mechanism":"wcpq","outcome":"covered","withheld":false,"codebook_sha256":"x"},{"question":"r","view":"choice","mechanism":"none","outcome":"applied","withheld":true}]}"#,
            r#"{"ts":"t","request_id":"b","route":"systemone","recipient":"one","contract":"c","provider":"p","status":200,"latency_ms":1.0,"answers":[{"question":"q","view":"choice","mechanism":"wcpq","outcome":"fallback","reason":"no_candidate","withheld":false,"codebook_sha256":"x"}]}"#,
            r#"{"ts":"t","request_id":"c","route":"systemone","recipient":"one","contract":"c","provider":"p","status":429,"latency_ms":0.1,"answers":[]}"#,
            r#"{"ts":"t","request_id":"d","route":"systemone","recipient":null,"contract":null,"provider":null,"status":401,"latency_ms":0.1,"answers":[]}"#,
            "",
            "not json",
        ];
        let mut summary = Summary::default();
        for (index, line) in lines.iter().enumerate() {
            summary.add_line("log", index + 1, line);
        }
        summary.finish();
        assert_eq!(summary.requests, 4);
        assert_eq!(summary.invalid_lines, ["log:6"]);
        let one = &summary.recipients["one"];
        assert_eq!(one.requests, 3);
        assert_eq!(one.statuses[&200], 2);
        assert_eq!(one.statuses[&429], 1);
        assert_eq!(summary.recipients["-"].statuses[&401], 1);
        let q = &summary.contracts["c"]["q"];
        assert_eq!((q.answers, q.covered, q.fallback), (2, 1, 1));
        assert_eq!(q.coverage, Some(0.5));
        assert_eq!(q.fallback_rate, Some(0.5));
        assert_eq!(q.fallback_reasons["no_candidate"], 1);
        let r = &summary.contracts["c"]["r"];
        assert_eq!((r.applied, r.withheld, r.coverage), (1, 1, None));
        let text = summary.to_text();
        assert!(
            text.contains("4 requests, 1 lines that are not decisions (log:6)"),
            "{text}"
        );
        assert!(text.contains("50.0%"), "{text}");
        assert!(text.contains("200: 2, 429: 1"), "{text}");
    }
}
