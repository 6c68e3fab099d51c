//! Benchmark of the proxy's JSON reader (`wire::Json::parse`, then the drop of the
//! document): what every request pays for the caller's request, and the arena reader
//! (`wire::json::Doc`) the proxy reads a provider's answer with, beside the same answer
//! read as a `Json`.
//!
//! The documents are built here: a three-question request as the official Python client
//! sends it (a 700-byte `state` note, `null` instructions, four criteria each), and a
//! provider's answer to it (choice, confidence and four probabilities per question); and a
//! request with a 12 KB `state` of escaped text, read whole and skimmed
//! (`Json::parse_skimming`, as the proxy reads a request).

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use releasegate_core::wire::Json;
use releasegate_core::wire::json::{Doc, with_arena};
use serde_json::json;

const CLASSES: [&str; 4] = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"];

fn request(questions: usize) -> Vec<u8> {
    let note = "Parcel 7734 was marked delivered on Tuesday but the customer says nothing \
                arrived; the driver photo shows a different door. "
        .repeat(6);
    let criteria: serde_json::Map<String, serde_json::Value> = CLASSES
        .iter()
        .map(|c| (c.to_string(), serde_json::Value::Null))
        .collect();
    let questions: serde_json::Map<String, serde_json::Value> = (0..questions)
        .map(|i| {
            let question = json!({"type": "choice", "instructions": null, "criteria": criteria});
            (format!("q{i}"), question)
        })
        .collect();
    let request = json!({
        "model": "jev-latest",
        "state": {"note": note, "channel": "email", "order": {"id": "A-99812", "items": 3}},
        "questions": questions,
    });
    serde_json::to_vec(&request).expect("a JSON value prints")
}

fn answer(questions: usize) -> Vec<u8> {
    let probabilities =
        json!({"ADDRESS": 0.04, "DELAY": 0.85, "DAMAGE": 0.06, "DELIVERY_RECORD": 0.05});
    let answers: serde_json::Map<String, serde_json::Value> = (0..questions)
        .map(|i| {
            let answer = json!({
                "type": "choice", "choice": "DELAY", "confidence": 0.78,
                "probabilities": probabilities,
            });
            (format!("q{i}"), answer)
        })
        .collect();
    let answer = json!({
        "model": "jev-1.13.0",
        "answers": answers,
        "usage": {"input_tokens": 412, "output_tokens": questions},
    });
    serde_json::to_vec(&answer).expect("a JSON value prints")
}

/// A one-question request whose `state` holds a 12 KB ticket note with an escape
/// every 65 bytes or so (quotes and line breaks) and accented text, as
/// `benches/shapes.py` writes it: what `Json::parse_skimming` reads past.
fn long_state_request() -> Vec<u8> {
    let line = "the parcel left the depot on monday but the tracking page still says \
                \"awaiting collection\"; customer called twice, asked for a refund or a \
                new delivery date. Adresse vérifiée, livraison prévue à 14h.\n";
    let note = line.repeat(12 * 1024 / line.len());
    let request = json!({
        "model": "jev-latest",
        "state": {"ticket_id": "T-18236", "note": note},
        "questions": {"q0": {"type": "choice", "criteria": {"DELAY": null, "ADDRESS": null}}},
    });
    serde_json::to_vec(&request).expect("a JSON value prints")
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(50)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for (name, bytes) in [
        ("json_read_request_3_questions", request(3)),
        ("json_read_answer_3_questions", answer(3)),
    ] {
        assert!(Json::parse(&bytes).is_ok(), "{name}: the document reads");
        criterion.bench_function(name, |b| {
            b.iter(|| drop(black_box(Json::parse(black_box(&bytes)))))
        });
    }
    // A provider's answer as the proxy reads it: into this thread's arena, reset after.
    for questions in [1, 4, 8] {
        let bytes = answer(questions);
        let name = format!("json_read_answer_{questions}_questions");
        criterion.bench_function(&name, |b| {
            b.iter(|| drop(black_box(Json::parse(black_box(&bytes)))))
        });
        let name = format!("doc_read_answer_{questions}_questions");
        with_arena(|arena| assert!(Doc::read(&bytes, arena).is_some(), "{name}: it reads"));
        criterion.bench_function(&name, |b| {
            b.iter(|| with_arena(|arena| black_box(Doc::read(black_box(&bytes), arena)).is_some()))
        });
    }
    let long = long_state_request();
    let (_, state) = Json::parse_skimming(&long, "state").expect("the document reads");
    assert!(state.is_some(), "the state is skimmed");
    criterion.bench_function("json_skim_request_12k_state", |b| {
        b.iter(|| drop(black_box(Json::parse_skimming(black_box(&long), "state"))))
    });
    criterion.bench_function("json_read_request_12k_state", |b| {
        b.iter(|| drop(black_box(Json::parse(black_box(&long)))))
    });
    criterion.final_summary();
}
