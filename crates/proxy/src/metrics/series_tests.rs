//! The kept series (answers, requests, overhead) count what the label lookups count.

use super::*;
use releasegate_core::contract::View;
use releasegate_core::mechanism;
use releasegate_core::release::AnswerRecord;
use releasegate_core::wcpq::{Reason, Stage};

fn config() -> Config {
    let codebook = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/codebooks/delivery-coarse_cause.json"
    );
    let classes = r#"classes = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]"#;
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n\
         [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
         [contracts.c]\nprovider = \"p\"\n\
         [contracts.c.questions.w]\n{classes}\nview = \"full_native\"\n\
         mechanism = {{ kind = \"wcpq\", codebook = \"{codebook}\", fallback = \"native\" }}\n\
         workflows = {{ preset = \"tuple-bench\" }}\n\
         [contracts.c.questions.plain]\n{classes}\nview = \"choice\"\n",
        "0".repeat(64)
    );
    crate::load::from_toml_with_env(&text, &|_| None).unwrap()
}

fn record(question: &str, view: View, mechanism: mechanism::Outcome) -> AnswerRecord {
    let wcpq = !matches!(mechanism, mechanism::Outcome::Applied);
    AnswerRecord {
        question: question.to_string(),
        view,
        withheld: false,
        mechanism,
        mapping_seconds: wcpq.then_some(0.002),
        evaluation: None,
    }
}

/// The exposition's answer series with a value other than 0 (created-at-zero series
/// aside).
fn counted(metrics: &Metrics) -> Vec<String> {
    exposition_lines(metrics, |line| {
        line.starts_with("releasegate_")
            && !line.ends_with(" 0")
            && !line.starts_with("releasegate_build_info")
    })
}

/// The exposition's lines that `keep` keeps, in order.
fn exposition_lines(metrics: &Metrics, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let text = String::from_utf8(metrics.render()).unwrap();
    text.lines()
        .filter(|line| keep(line))
        .map(str::to_string)
        .collect()
}

/// Asserts that every `expected` line is among `lines`.
fn assert_has_lines(lines: &[String], expected: &[&str]) {
    for expected in expected {
        assert!(
            lines.iter().any(|line| line == expected),
            "{expected} in {lines:#?}"
        );
    }
}

#[test]
fn resolved_series_count_what_labels_count() {
    let config = config();
    let records = [
        record(
            "w",
            View::FullNative,
            mechanism::Outcome::Covered {
                codeword_index: 3,
                stage: Stage::Strict,
            },
        ),
        record(
            "w",
            View::FullNative,
            mechanism::Outcome::Covered {
                codeword_index: 1,
                stage: Stage::Compact,
            },
        ),
        record(
            "w",
            View::FullNative,
            mechanism::Outcome::Fallback(Reason::RoundtripMismatch { mismatches: 2 }),
        ),
        record(
            "w",
            View::FullNative,
            mechanism::Outcome::Fallback(Reason::NoCandidate),
        ),
        record("plain", View::Choice, mechanism::Outcome::Applied),
        // Not what the configuration says: counted by label, the same way.
        record("plain", View::FullNative, mechanism::Outcome::Applied),
        record("unknown", View::Choice, mechanism::Outcome::Applied),
    ];
    let resolved = Metrics::new().unwrap();
    let series = resolved.answer_series(&config);
    let by_label = Metrics::new().unwrap();
    for contract in ["c", "another"] {
        for record in &records {
            resolved.record_answer(&series, contract, record);
            by_label.record_answer(&AnswerSeries::default(), contract, record);
        }
    }
    let counted_resolved = counted(&resolved);
    assert_eq!(counted_resolved, counted(&by_label));
    assert_has_lines(
        &counted_resolved,
        &[
            "releasegate_released_answers_total{contract=\"c\",question=\"w\",view=\"full_native\"} 4",
            "releasegate_wcpq_answers_total{contract=\"c\",outcome=\"covered\",question=\"w\"} 2",
            "releasegate_wcpq_answers_total{contract=\"c\",outcome=\"fallback\",question=\"w\"} 2",
            "releasegate_wcpq_covered_total{contract=\"c\",question=\"w\",stage=\"strict\"} 1",
            "releasegate_wcpq_fallbacks_total{contract=\"c\",question=\"w\",reason=\"roundtrip_mismatch\"} 1",
            "releasegate_wcpq_mapping_seconds_count{contract=\"c\",question=\"w\"} 4",
            "releasegate_released_answers_total{contract=\"c\",question=\"plain\",view=\"choice\"} 1",
            "releasegate_released_answers_total{contract=\"c\",question=\"plain\",view=\"full_native\"} 1",
        ],
    );
    // Every question's series exist from the start, at zero.
    let fresh = Metrics::new().unwrap();
    let _series = fresh.answer_series(&config);
    let text = String::from_utf8(fresh.render()).unwrap();
    assert!(text.contains(
        "releasegate_released_answers_total{contract=\"c\",question=\"plain\",view=\"choice\"} 0"
    ));
}

/// The whole exposition's `releasegate_request*` lines.
fn request_lines(metrics: &Metrics) -> Vec<String> {
    exposition_lines(metrics, |line| {
        line.starts_with("releasegate_requests_total")
            || line.starts_with("releasegate_request_duration_seconds")
    })
}

#[test]
fn kept_request_series_count_what_labels_count() {
    let config = config();
    // Contracts of the configuration, none, and one it does not have; both routes and
    // one no pair is kept for; every status class and statuses past them.
    let requests = [
        ("c", "systemone", 200),
        ("c", "systemone", 200),
        ("c", "systemone", 422),
        ("c", "models", 200),
        ("c", "models", 502),
        ("none", "systemone", 401),
        ("none", "models", 404),
        ("another", "systemone", 200),
        ("c", "elsewhere", 200),
        ("c", "systemone", 101),
        ("c", "systemone", 302),
        ("c", "systemone", 503),
        ("c", "systemone", 600),
        ("c", "systemone", 0),
    ];
    let kept = Metrics::new().unwrap();
    let series = kept.request_series(&config);
    let by_label = Metrics::new().unwrap();
    // Nothing is created before a request counts in it.
    assert!(
        request_lines(&kept).is_empty(),
        "{:#?}",
        request_lines(&kept)
    );
    for (contract, route, status) in requests {
        kept.record_request(&series, contract, route, status, 0.003);
        by_label.record_request(&RequestSeries::default(), contract, route, status, 0.003);
    }
    let lines = request_lines(&kept);
    assert_eq!(lines, request_lines(&by_label));
    assert_has_lines(
        &lines,
        &[
            "releasegate_requests_total{contract=\"c\",status_class=\"2xx\"} 4",
            "releasegate_requests_total{contract=\"c\",status_class=\"5xx\"} 4",
            "releasegate_requests_total{contract=\"none\",status_class=\"4xx\"} 2",
            "releasegate_request_duration_seconds_count{contract=\"c\",route=\"systemone\",status_class=\"2xx\"} 2",
            "releasegate_request_duration_seconds_count{contract=\"c\",route=\"elsewhere\",status_class=\"2xx\"} 1",
            "releasegate_request_duration_seconds_count{contract=\"another\",route=\"systemone\",status_class=\"2xx\"} 1",
        ],
    );
}

#[test]
fn kept_overhead_series_count_what_labels_count() {
    let config = config();
    let kept = Metrics::new().unwrap();
    let series = kept.request_series(&config);
    let by_label = Metrics::new().unwrap();
    let overhead_lines = |metrics: &Metrics| {
        exposition_lines(metrics, |line| {
            line.starts_with("releasegate_overhead_seconds")
        })
    };
    // Nothing is created before a request counts in it.
    assert!(overhead_lines(&kept).is_empty());
    // A contract of the configuration (kept), and one it does not have (by label).
    for (contract, seconds) in [("c", 0.000_02), ("c", 0.004), ("another", 0.000_3)] {
        kept.record_overhead(&series, contract, seconds);
        by_label.record_overhead(&RequestSeries::default(), contract, seconds);
    }
    let lines = overhead_lines(&kept);
    assert_eq!(lines, overhead_lines(&by_label));
    assert_has_lines(
        &lines,
        &[
            "releasegate_overhead_seconds_count{contract=\"c\"} 2",
            "releasegate_overhead_seconds_count{contract=\"another\"} 1",
        ],
    );
}
