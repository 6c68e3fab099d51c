//! The whole release (`release::release`): an arbitrary provider answer under an
//! arbitrary contract, read and released as the proxy does.
//!
//! The contract is written as TOML from a template with fuzzed parameters (shape, usage,
//! a pinned model; one to four questions of every type, each with a view, a coarsening,
//! withheld labels and a mechanism: the baselines, or WCPQ over small codebooks built at
//! start-up) and loaded as a configuration file is. The request asks some of its questions
//! in some order (`wire::check_json`); the provider's answer is either arbitrary bytes or
//! an arbitrary document shaped like an answer (right and wrong types, labels, numbers,
//! extra fields and answers), read by `wire::Json::parse`.
//!
//! Oracle: nothing panics; a release is deterministic for its seed; where
//! `wire::read_answers` reads the answer (the proxy's first reading), `release_read`
//! releases exactly what `release` does (the same bytes or the same refusal); and what goes out is
//! only what the contract allows, checked here from the fuzzed parameters alone (never the
//! release code): the top-level members `model` (the pinned model, else the provider's),
//! `answers` and `usage`; answers only for asked questions, in request order, of the asked
//! type; per type, view and shape only the fields the view releases (the complete shape:
//! its type's required fields); labels only the question's released labels (coarse ones
//! when coarsened); numbers finite, in range and never `-0.0`; a withheld selection shows
//! nothing of the other classes; boxes valid; usage counts as the contract's `usage` says;
//! and no string anywhere that is not a field name, a type, an asked question id, a
//! released label, the score legend's text or the model.

#![no_main]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use releasegate_core::codebook;
use releasegate_core::config::{Config, Inputs};
use releasegate_core::contract::Contract;
use releasegate_core::release::{Options, release, release_read};
use releasegate_core::rng::Rng;
use releasegate_core::wire::json::with_arena;
use releasegate_core::wire::{Json, check_json, read_answers};
use releasegate_core::workflow::Spec;
use serde_json::{Map, Value, json};

/// The WCPQ codebooks over A..D for the standard workflows, by denominator (1 covers
/// little, so fallbacks happen; 4 covers more), as a configuration would read them.
const DENOMINATORS: [u32; 2] = [1, 4];

fn codebooks() -> &'static BTreeMap<String, Vec<u8>> {
    static CODEBOOKS: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    CODEBOOKS.get_or_init(|| {
        let classes: Vec<String> = ["A", "B", "C", "D"].map(String::from).to_vec();
        let spec = Spec::standard(classes.clone()).expect("the standard workflows");
        DENOMINATORS
            .iter()
            .map(|&denominator| {
                let built = codebook::build(&classes, denominator, &spec, &[], "fuzz".into())
                    .expect("a grid codebook");
                (
                    format!("wcpq-{denominator}.json"),
                    built.codebook.to_json_bytes(),
                )
            })
            .collect()
    })
}

const VIEWS: [&str; 4] = [
    "choice",
    "choice_confidence",
    "full_probabilities",
    "full_native",
];
const CHOICE_LABELS: [&str; 5] = ["A", "B", "C", "D", "E"];
const LEGEND: [&str; 5] = ["none", "low", "mid", "high", "top"];
const BOX_TEXT: &str = "Where is it?";
const NOUL_TEXT: &str = "Is it?";

#[derive(Arbitrary, Debug)]
enum Kind {
    Choice,
    Score,
    Noul,
    Box,
}

#[derive(Arbitrary, Debug)]
enum Mechanism {
    None,
    Quantize(u8, bool),
    TopK(u8, bool),
    Temperature(u8, bool),
    Gaussian(u8, Option<u8>, bool),
    /// Over the strict codebooks only (a budget needs a codebook learned for it).
    Wcpq {
        codebook: bool,
        fallback: u8,
        drop_confidence: bool,
    },
}

#[derive(Arbitrary, Debug)]
struct Question {
    kind: Kind,
    /// Classes: 2 to 5.
    classes: u8,
    view: u8,
    /// Fine class index → coarse group (only a few groups); empty: no coarsening.
    coarsen: Vec<u8>,
    /// Released label indices withheld.
    withhold: Vec<u8>,
    mechanism: Mechanism,
}

#[derive(Arbitrary, Debug)]
enum Number {
    /// k / 255: a valid probability.
    Unit(u8),
    /// A weight, normalized with the others of its vector.
    Weight(u8),
    Any(f64),
    Int(i64),
    Text(String),
    Null,
    Bool(bool),
}

#[derive(Arbitrary, Debug)]
enum Text {
    /// A class of the question (by index), as a provider names it.
    Label(u8),
    Free(String),
}

#[derive(Arbitrary, Debug)]
struct NativeAnswer {
    /// Which question (by index into the contract's), or an unknown id.
    question: Option<u8>,
    /// The type the answer says: the question's, another (by index), or any text.
    kind: Option<Result<u8, String>>,
    choice: Option<Text>,
    score: Option<Number>,
    noul: Option<Number>,
    probabilities: Option<Vec<(Text, Number)>>,
    confidence: Option<Number>,
    legend: Option<Vec<(String, String)>>,
    edges: Option<[Number; 4]>,
    extra: Option<(String, String)>,
}

/// One asked question's answer.
#[derive(Arbitrary, Debug)]
enum Answer {
    /// Well-formed for the question's type: probabilities from the weights (normalized;
    /// all zero: uniform), the choice any class, box edges in order.
    Valid {
        weights: Vec<u8>,
        choice: u8,
        confidence: Option<u8>,
        edges: [u8; 4],
        extra: Option<(String, String)>,
    },
    /// Anything shaped like an answer.
    Loose(NativeAnswer),
}

#[derive(Arbitrary, Debug)]
enum Native {
    Bytes(Vec<u8>),
    Shaped {
        /// `Label`: a well-formed id; `Free`: anything (`None`: no model).
        model: Option<Text>,
        /// The asked questions' answers, in turn (none: no answers).
        answers: Vec<Answer>,
        /// Answers to other or unknown questions.
        others: Vec<NativeAnswer>,
        usage: Option<Vec<(Text, Number)>>,
        extra: Option<(String, String)>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    complete: bool,
    usage: u8,
    pinned: bool,
    question: Question,
    more_questions: Vec<Question>,
    /// Question indices asked, in this order (repeats dropped).
    asked: Vec<u8>,
    state: String,
    native: Native,
    seed: u64,
    evaluate: bool,
}

/// What the contract releases of one question, known from the parameters alone.
#[derive(Debug)]
struct Rule {
    id: String,
    kind: &'static str,
    view: &'static str,
    /// The classes the provider answers with.
    fine: Vec<String>,
    /// The released labels (coarse ones when coarsened).
    labels: Vec<String>,
    withheld: BTreeSet<String>,
    /// The criteria the request sends (and the legend's text, for a score question).
    criteria: Vec<String>,
}

fn toml_string(text: &str) -> String {
    Value::from(text).to_string()
}

/// The question's TOML table and what it releases; `None` for parameters the template
/// does not write.
fn question(index: usize, q: &Question) -> Option<(String, Rule)> {
    let id = format!("q{index}");
    let n = usize::from(q.classes % 4) + 2;
    let kind = match q.kind {
        Kind::Choice => "choice",
        Kind::Score => "score",
        Kind::Noul => "noul",
        Kind::Box => "box",
    };
    let mut text = format!("[contracts.c.questions.{id}]\n");
    // What the template writes: WCPQ for four choice classes (its codebooks' labels), a
    // box question's only mechanism is `quantize`.
    let wcpq = matches!(q.mechanism, Mechanism::Wcpq { .. });
    let kind = if wcpq { "choice" } else { kind };
    let n = if wcpq { 4 } else { n };
    let (fine, criteria): (Vec<String>, Vec<String>) = match kind {
        "choice" => (
            CHOICE_LABELS[..n].iter().map(|s| s.to_string()).collect(),
            Vec::new(),
        ),
        "score" => (
            (0..n).map(|level| level.to_string()).collect(),
            LEGEND[..n].iter().map(|s| s.to_string()).collect(),
        ),
        "noul" => (vec!["false".into(), "true".into()], Vec::new()),
        _ => (Vec::new(), Vec::new()),
    };
    let view = match kind {
        "box" => ["choice", "full_native"][usize::from(q.view % 2)],
        _ => VIEWS[usize::from(q.view % 4)],
    };
    if kind == "box" {
        text += &format!("type = \"box\"\ninstructions = {}\n", toml_string(BOX_TEXT));
    } else {
        let classes: Vec<String> = fine.iter().map(|c| toml_string(c)).collect();
        text += &format!("classes = [{}]\n", classes.join(", "));
    }
    text += &format!("view = \"{view}\"\n");
    match kind {
        "score" => {
            let descriptions: Vec<String> = fine
                .iter()
                .zip(&criteria)
                .map(|(level, text)| format!("{} = {}", toml_string(level), toml_string(text)))
                .collect();
            text += &format!("descriptions = {{ {} }}\n", descriptions.join(", "));
        }
        "noul" => text += &format!("instructions = {}\n", toml_string(NOUL_TEXT)),
        _ => {}
    }
    // The coarsening (choice questions: the template's groups are `G0`.. `G2`).
    let mut labels = fine.clone();
    if kind == "choice" && !wcpq && !q.coarsen.is_empty() {
        let mut groups: Vec<String> = fine
            .iter()
            .zip(q.coarsen.iter().cycle())
            .map(|(_, &g)| format!("G{}", g % 3))
            .collect();
        // At least two released labels.
        if groups.iter().all(|g| g == &groups[0]) {
            groups[0] = "G9".into();
        }
        let pairs: Vec<String> = fine
            .iter()
            .zip(&groups)
            .map(|(class, group)| format!("{class} = \"{group}\""))
            .collect();
        text += &format!("coarsen = {{ {} }}\n", pairs.join(", "));
        labels = Vec::new();
        for group in groups {
            if !labels.contains(&group) {
                labels.push(group);
            }
        }
    }
    let mut withheld = BTreeSet::new();
    if kind != "box" && !q.withhold.is_empty() {
        for &w in &q.withhold {
            withheld.insert(labels[usize::from(w) % labels.len()].clone());
        }
        let list: Vec<String> = withheld.iter().map(|l| toml_string(l)).collect();
        text += &format!("withhold_labels = [{}]\n", list.join(", "));
    }
    let confidence = |native: bool| if native { "native" } else { "derived" };
    text += &match &q.mechanism {
        Mechanism::Quantize(step, _) if kind == "box" => format!(
            "mechanism = {{ kind = \"quantize\", step = {} }}\n",
            [0.05, 0.1, 0.25, 0.5, 0.3, 1.0][usize::from(step % 6)],
        ),
        _ if kind == "box" => String::new(),
        Mechanism::None => String::new(),
        Mechanism::Quantize(step, c) => format!(
            "mechanism = {{ kind = \"quantize\", step = {}, confidence = \"{}\" }}\n",
            // A class question's step divides 1 (0.3 is refused); a box's need not.
            [0.05, 0.1, 0.25, 0.5, 0.2, 1.0][usize::from(step % 6)],
            confidence(*c)
        ),
        Mechanism::TopK(k, c) => format!(
            "mechanism = {{ kind = \"top_k\", k = {}, confidence = \"{}\" }}\n",
            k % 6 + 1,
            confidence(*c)
        ),
        Mechanism::Temperature(tau, c) => format!(
            "mechanism = {{ kind = \"temperature\", tau = {}, confidence = \"{}\" }}\n",
            f64::from(*tau % 40 + 1) / 8.0,
            confidence(*c)
        ),
        Mechanism::Gaussian(sigma, seed, c) => format!(
            "mechanism = {{ kind = \"gaussian\", sigma = {}{}, confidence = \"{}\" }}\n",
            f64::from(*sigma % 50 + 1) / 100.0,
            seed.map_or(String::new(), |s| format!(", seed = {s}")),
            confidence(*c)
        ),
        Mechanism::Wcpq {
            codebook,
            fallback,
            drop_confidence,
        } => format!(
            "mechanism = {{ kind = \"wcpq\", codebook = \"wcpq-{}.json\", fallback = \"{}\", \
             confidence = \"{}\" }}\nworkflows = {{ preset = \"tuple-bench\" }}\n",
            DENOMINATORS[usize::from(*codebook)],
            ["native", "choice_only", "deny"][usize::from(fallback % 3)],
            if *drop_confidence { "drop" } else { "codeword" },
        ),
    };
    let rule = Rule {
        id,
        kind,
        view,
        fine,
        labels,
        withheld,
        criteria,
    };
    Some((text, rule))
}

/// The request's question as the caller asks it.
fn asked_question(rule: &Rule) -> Value {
    match rule.kind {
        "choice" => {
            let criteria: Map<String, Value> = rule
                .fine
                .iter()
                .rev()
                .map(|c| (c.clone(), Value::Null))
                .collect();
            json!({"type": "choice", "criteria": criteria})
        }
        "score" => json!({"type": "score", "criteria": rule.criteria}),
        "noul" => json!({"type": "noul", "instructions": NOUL_TEXT}),
        _ => json!({"type": "box"}),
    }
}

fn number(n: &Number, weights: u32) -> Value {
    match n {
        Number::Unit(k) => Value::from(f64::from(*k) / 255.0),
        Number::Weight(w) => Value::from(f64::from(*w) / f64::from(weights.max(1))),
        Number::Any(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
        Number::Int(i) => Value::from(*i),
        Number::Text(s) => Value::from(s.as_str()),
        Number::Null => Value::Null,
        Number::Bool(b) => Value::from(*b),
    }
}

fn text(t: &Text, classes: &[String]) -> String {
    match t {
        Text::Label(i) if !classes.is_empty() => classes[usize::from(*i) % classes.len()].clone(),
        Text::Label(i) => format!("L{i}"),
        Text::Free(s) => s.clone(),
    }
}

/// A well-formed answer to `rule`'s question.
fn valid_answer(
    rule: &Rule,
    weights: &[u8],
    choice: u8,
    confidence: Option<u8>,
    edges: [u8; 4],
) -> Map<String, Value> {
    let mut a = Map::new();
    a.insert("type".into(), Value::from(rule.kind));
    let n = rule.fine.len();
    let w: Vec<f64> = (0..n)
        .map(|i| f64::from(weights.get(i).copied().unwrap_or(0)))
        .collect();
    let sum: f64 = w.iter().sum();
    let p: Vec<f64> = w
        .iter()
        .map(|&x| if sum > 0.0 { x / sum } else { 1.0 / n as f64 })
        .collect();
    let unit = |k: u8| f64::from(k) / 255.0;
    match rule.kind {
        "choice" | "score" => {
            let map: Map<String, Value> = rule
                .fine
                .iter()
                .zip(&p)
                .map(|(c, &x)| (c.clone(), Value::from(x)))
                .collect();
            a.insert("probabilities".into(), Value::Object(map));
            if rule.kind == "choice" {
                // A valid choice is one of the most probable classes (any, on a tie).
                let top = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let most: Vec<usize> = (0..n).filter(|&i| p[i] == top).collect();
                let label = rule.fine[most[usize::from(choice) % most.len()]].clone();
                a.insert("choice".into(), Value::from(label));
            } else {
                let score: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x).sum();
                a.insert("score".into(), Value::from(score));
            }
        }
        "noul" => {
            a.insert("noul".into(), Value::from(p[1]));
        }
        _ => {
            let [a0, a1, b0, b1] = edges.map(unit);
            let edges = json!({"top": a0.min(a1), "bottom": a0.max(a1), "left": b0.min(b1), "right": b0.max(b1)});
            a.insert("box".into(), edges);
        }
    }
    if let Some(c) = confidence {
        a.insert("confidence".into(), Value::from(unit(c)));
    }
    a
}

/// The provider's answer shaped like one, from the arbitrary parameters.
fn shaped_native(
    rules: &[Rule],
    asked: &[usize],
    model: &Option<Text>,
    answers: &[Answer],
    others: &[NativeAnswer],
    usage: &Option<Vec<(Text, Number)>>,
    extra: &Option<(String, String)>,
) -> Value {
    let mut out = Map::new();
    if let Some(model) = model {
        out.insert("model".into(), Value::from(text(model, &["m-1".into()])));
    }
    let mut answer_map = Map::new();
    for (turn, &i) in asked.iter().enumerate() {
        let Some(answer) = answers.get(turn % answers.len().max(1)) else {
            break;
        };
        let rule = &rules[i];
        let value = match answer {
            Answer::Valid {
                weights,
                choice,
                confidence,
                edges,
                extra,
            } => {
                let mut a = valid_answer(rule, weights, *choice, *confidence, *edges);
                if let Some((k, v)) = extra {
                    a.insert(k.clone(), Value::from(v.as_str()));
                }
                a
            }
            Answer::Loose(loose) => loose_answer(rule, loose),
        };
        answer_map.insert(rule.id.clone(), Value::Object(value));
    }
    for answer in others {
        let rule = answer.question.and_then(|q| rules.get(usize::from(q)));
        let id = rule.map_or_else(|| "unasked".to_string(), |r| r.id.clone());
        if answer_map.contains_key(&id) {
            continue;
        }
        let value = match rule {
            Some(rule) => loose_answer(rule, answer),
            None => loose_answer(&rules[0], answer),
        };
        answer_map.insert(id, Value::Object(value));
    }
    out.insert("answers".into(), Value::Object(answer_map));
    if let Some(usage) = usage {
        let keys = ["input_tokens".to_string(), "output_tokens".to_string()];
        let map: Map<String, Value> = usage
            .iter()
            .map(|(k, n)| (text(k, &keys), number(n, 1)))
            .collect();
        out.insert("usage".into(), Value::Object(map));
    }
    if let Some((k, v)) = extra {
        out.insert(k.clone(), Value::from(v.as_str()));
    }
    Value::Object(out)
}

/// Anything shaped like an answer to `rule`'s question.
fn loose_answer(rule: &Rule, answer: &NativeAnswer) -> Map<String, Value> {
    let classes: &[String] = &rule.fine;
    let mut a = Map::new();
    let kind = match &answer.kind {
        None => rule.kind.to_string(),
        Some(Ok(k)) => ["choice", "score", "noul", "box"][usize::from(k % 4)].to_string(),
        Some(Err(other)) => other.clone(),
    };
    a.insert("type".into(), Value::from(kind));
    {
        if let Some(choice) = &answer.choice {
            a.insert("choice".into(), Value::from(text(choice, classes)));
        }
        if let Some(score) = &answer.score {
            a.insert("score".into(), number(score, 1));
        }
        if let Some(noul) = &answer.noul {
            a.insert("noul".into(), number(noul, 1));
        }
        if let Some(probabilities) = &answer.probabilities {
            let weights: u32 = probabilities
                .iter()
                .map(|(_, n)| match n {
                    Number::Weight(w) => u32::from(*w),
                    _ => 0,
                })
                .sum();
            let map: Map<String, Value> = probabilities
                .iter()
                .map(|(label, n)| (text(label, classes), number(n, weights)))
                .collect();
            a.insert("probabilities".into(), Value::Object(map));
        }
        if let Some(confidence) = &answer.confidence {
            a.insert("confidence".into(), number(confidence, 1));
        }
        if let Some(legend) = &answer.legend {
            let map: Map<String, Value> = legend
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            a.insert("legend".into(), Value::Object(map));
        }
        if let Some(edges) = &answer.edges {
            let map: Map<String, Value> = ["top", "bottom", "left", "right"]
                .iter()
                .zip(edges)
                .map(|(k, n)| (k.to_string(), number(n, 1)))
                .collect();
            a.insert("box".into(), Value::Object(map));
        }
        if let Some((k, v)) = &answer.extra {
            a.insert(k.clone(), Value::from(v.as_str()));
        }
    }
    a
}

const FIELDS: [&str; 17] = [
    "model",
    "answers",
    "usage",
    "type",
    "choice",
    "probabilities",
    "confidence",
    "score",
    "legend",
    "noul",
    "box",
    "top",
    "bottom",
    "left",
    "right",
    "input_tokens",
    "output_tokens",
];

/// Every string of `value` (keys and string values).
fn strings<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                strings(v, out);
            }
        }
        _ => {}
    }
}

fn unit(value: Option<&Value>, what: &str) -> f64 {
    let x = value
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{what} is not a number: {value:?}"));
    assert!(x.is_finite() && (0.0..=1.0).contains(&x), "{what} = {x}");
    // Zero has one spelling: a `-0.0` would tell a provider's number from a computed one.
    assert!(!x.is_sign_negative(), "{what} is -0.0");
    x
}

/// Holds one released answer to what the contract releases of its question.
fn check_answer(rule: &Rule, answer: &Value, complete: bool) {
    let answer = answer.as_object().expect("an answer is an object");
    assert_eq!(answer.get("type"), Some(&Value::from(rule.kind)), "type");
    let probabilities_view = matches!(rule.view, "full_probabilities" | "full_native");
    let confidence_view = matches!(rule.view, "choice_confidence" | "full_native");
    let mut allowed: Vec<&str> = vec!["type"];
    match rule.kind {
        "choice" | "score" => {
            allowed.push(if rule.kind == "choice" {
                "choice"
            } else {
                "score"
            });
            if rule.kind == "score" {
                allowed.push("legend");
            }
            if probabilities_view || complete {
                allowed.push("probabilities");
            }
            if confidence_view || complete {
                allowed.push("confidence");
            }
        }
        "noul" => allowed.push("noul"),
        _ => {
            allowed.push("box");
            if rule.view == "full_native" || complete {
                allowed.push("confidence");
            }
        }
    }
    for key in answer.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "{}: `{key}` is not released under {} ({})",
            rule.id,
            rule.view,
            if complete { "complete" } else { "minimal" }
        );
    }
    if let Some(probabilities) = answer.get("probabilities") {
        let map = probabilities.as_object().expect("probabilities are a map");
        for (label, p) in map {
            assert!(rule.labels.contains(label), "{}: label {label}", rule.id);
            unit(Some(p), "a probability");
        }
    }
    if let Some(confidence) = answer.get("confidence") {
        if rule.kind != "box" || !confidence.is_null() {
            unit(Some(confidence), "the confidence");
        }
    }
    // The complete shape: every field the type requires (the official clients' schema).
    if complete {
        let required: &[&str] = match rule.kind {
            "choice" => &["choice", "probabilities", "confidence"],
            "score" => &["score", "legend", "probabilities", "confidence"],
            "noul" => &["noul"],
            _ => &["box", "confidence"],
        };
        for key in required {
            assert!(
                answer.contains_key(*key),
                "{}: no `{key}` in {answer:?}",
                rule.id
            );
        }
    }
    // Minimal answers may hold `type` alone (a WCPQ `deny` fallback).
    if let Some(choice) = answer.get("choice") {
        let choice = choice.as_str().expect("a choice is a label");
        assert!(rule.labels.iter().any(|l| l == choice), "choice {choice}");
        if rule.withheld.contains(choice) {
            if !complete {
                assert!(answer.get("confidence").is_none(), "a withheld confidence");
            }
            // Nothing of the other classes: they are absent or all alike.
            if let Some(Value::Object(map)) = answer.get("probabilities") {
                let others: Vec<&Value> = map
                    .iter()
                    .filter(|(label, _)| label.as_str() != choice)
                    .map(|(_, p)| p)
                    .collect();
                assert!(
                    others.windows(2).all(|w| w[0] == w[1]),
                    "withheld {choice}, yet {map:?}"
                );
            }
        }
    }
    if let Some(score) = answer.get("score") {
        let score = score.as_f64().expect("a score is a number");
        let top = (rule.labels.len() - 1) as f64;
        assert!((0.0..=top).contains(&score), "score {score}");
    }
    if let Some(legend) = answer.get("legend") {
        for (level, text) in legend.as_object().expect("a legend") {
            assert!(rule.labels.contains(level), "legend level {level}");
            assert!(
                rule.criteria
                    .iter()
                    .any(|c| Some(c.as_str()) == text.as_str())
            );
        }
    }
    if answer.contains_key("noul") {
        unit(answer.get("noul"), "noul");
    }
    if let Some(edges) = answer.get("box") {
        let edges = edges.as_object().expect("a box");
        let keys: Vec<&str> = edges.keys().map(String::as_str).collect();
        assert_eq!(keys, ["top", "bottom", "left", "right"]);
        let [top, bottom, left, right] =
            ["top", "bottom", "left", "right"].map(|k| unit(edges.get(k), k));
        assert!(top <= bottom && left <= right, "an inverted box {edges:?}");
    }
}

fuzz_target!(|input: Input| {
    let mut tables = String::new();
    let mut rules = Vec::new();
    let questions = std::iter::once(&input.question).chain(&input.more_questions);
    for (index, q) in questions.take(4).enumerate() {
        let Some((table, rule)) = question(index, q) else {
            return;
        };
        tables += &table;
        rules.push(rule);
    }
    let usage = ["keep", "input", "drop"][usize::from(input.usage % 3)];
    let shape = if input.complete {
        "complete"
    } else {
        "minimal"
    };
    let pinned = input.pinned.then_some("pinned-model");
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nusage = \"{usage}\"\n\
         shape = \"{shape}\"\n{}{tables}",
        pinned.map_or(String::new(), |m| format!("model = \"{m}\"\n"))
    );
    CONFIGS.with(|configs| {
        let mut configs = configs.borrow_mut();
        if configs.len() > 1024 {
            configs.clear();
        }
        let config = configs.entry(text).or_insert_with_key(|text| load(text));
        // Parameters the configuration refuses (a coarsening a type does not take, ...)
        // release nothing.
        if let Some(contract) = config.as_ref().and_then(|c| c.contract("c")) {
            release_under(&input, &rules, usage, pinned, contract);
        }
    });
});

thread_local! {
    /// Configurations by their text: loading one costs more than the rest of a run, and
    /// most runs change only the request or the answer.
    static CONFIGS: RefCell<HashMap<String, Option<Config>>> = RefCell::new(HashMap::new());
}

/// The configuration `text` as a file holding it loads (its codebooks from memory).
fn load(text: &str) -> Option<Config> {
    let files = |path: &Path| {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        codebooks()
            .get(name)
            .cloned()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    };
    let inputs = Inputs {
        env: None,
        files: &files,
        codebooks: true,
    };
    Config::from_toml_with(text, "fuzz", Path::new("."), inputs).ok()
}

/// Asks `contract`'s questions, releases the answer and holds what goes out to the rules.
fn release_under(
    input: &Input,
    rules: &[Rule],
    usage: &str,
    pinned: Option<&str>,
    contract: &Contract,
) {
    // The request: the asked questions in the fuzzed order.
    let mut order: Vec<usize> = Vec::new();
    for &a in &input.asked {
        let i = usize::from(a) % rules.len();
        if !order.contains(&i) {
            order.push(i);
        }
    }
    if order.is_empty() {
        order = (0..rules.len()).collect();
    }
    let questions: Map<String, Value> = order
        .iter()
        .map(|&i| (rules[i].id.clone(), asked_question(&rules[i])))
        .collect();
    let request = json!({"model": "m", "state": input.state, "questions": questions});
    let request_bytes = serde_json::to_vec(&request).expect("a Value writes");
    let Ok(request_json) = Json::parse(&request_bytes) else {
        return;
    };
    let Ok(asked) = check_json(&request_json, contract) else {
        return;
    };

    let native_bytes = match &input.native {
        Native::Bytes(bytes) => bytes.clone(),
        Native::Shaped {
            model,
            answers,
            others,
            usage,
            extra,
        } => {
            let native = shaped_native(&rules, &order, model, answers, others, usage, extra);
            serde_json::to_vec(&native).expect("a Value writes")
        }
    };
    // The proxy first reads a response with `wire::read_answers`, where it can: what that
    // reading releases must be exactly what the reading here releases (the same bytes,
    // or the same refusal).
    let read_first = with_arena(|arena| {
        let read = read_answers(&native_bytes, arena, contract, &asked)?;
        let mut rng = Rng::new(input.seed);
        let mut options = Options {
            rng: &mut rng,
            evaluate: input.evaluate,
        };
        Some(release_read(contract, &asked, &read, &mut options).map(|released| released.to_bytes()))
    });
    let Ok(native) = Json::parse(&native_bytes) else {
        assert!(read_first.is_none(), "read_answers read bytes that are not JSON");
        return;
    };
    let run = || {
        let mut rng = Rng::new(input.seed);
        let mut options = Options {
            rng: &mut rng,
            evaluate: input.evaluate,
        };
        release(contract, &asked, &native, &mut options).map(|released| released.to_bytes())
    };
    if let Some(read_first) = read_first {
        assert_eq!(read_first, run(), "read_answers releases otherwise");
    }
    let Ok(bytes) = run() else {
        return;
    };
    assert_eq!(
        run().ok().as_ref(),
        Some(&bytes),
        "a release differs for the same seed"
    );

    // What went out, read back from its bytes.
    let body: Value = serde_json::from_slice(&bytes).expect("a release is JSON");
    let top = body.as_object().expect("a release is an object");
    let keys: Vec<&str> = top.keys().map(String::as_str).collect();
    assert_eq!(keys, ["model", "answers", "usage"], "top-level members");
    let native_value = native.to_value();
    let native_model = native_value.get("model").and_then(Value::as_str);
    let model = top["model"].as_str().expect("a model");
    match pinned {
        Some(pinned) => assert_eq!(model, pinned),
        None => assert_eq!(Some(model), native_model, "not the provider's model"),
    }

    let answers = top["answers"].as_object().expect("answers");
    let mut previous = None;
    for (id, answer) in answers {
        let position = order
            .iter()
            .position(|&i| &rules[i].id == id)
            .unwrap_or_else(|| panic!("an answer to `{id}`, which was not asked"));
        assert!(previous < Some(position), "answers out of request order");
        previous = Some(position);
        check_answer(&rules[order[position]], answer, input.complete);
    }

    // Both counts, always; a kept one is the provider's (absent or null: 0; a float
    // holding a whole number: that integer), a dropped one 0.
    let usage_out = top["usage"].as_object().expect("usage");
    let keys: Vec<&str> = usage_out.keys().map(String::as_str).collect();
    assert_eq!(keys, ["input_tokens", "output_tokens"], "usage members");
    let native_count = |key: &str| match native_value.get("usage").and_then(|u| u.get(key)) {
        None | Some(Value::Null) => Some(0),
        Some(v) => v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x < 9_007_199_254_740_992.0)
                .map(|x| x as u64)
        }),
    };
    for (key, count) in usage_out {
        let count = count
            .as_u64()
            .unwrap_or_else(|| panic!("usage.{key} = {count}"));
        let expected = match (usage, key.as_str()) {
            ("keep", "input_tokens" | "output_tokens") | ("input", "input_tokens") => {
                native_count(key)
            }
            ("input", "output_tokens") | ("drop", "input_tokens" | "output_tokens") => Some(0),
            _ => panic!("usage.{key} under usage = {usage}"),
        };
        assert_eq!(Some(count), expected, "usage.{key}");
    }

    // No string but the contract's vocabulary.
    let mut vocabulary: BTreeSet<&str> = FIELDS.into_iter().collect();
    vocabulary.extend(["choice", "score", "noul", "box"]);
    vocabulary.insert(model);
    for &i in &order {
        let rule = &rules[i];
        vocabulary.insert(&rule.id);
        vocabulary.extend(rule.labels.iter().map(String::as_str));
        vocabulary.extend(rule.criteria.iter().map(String::as_str));
    }
    let mut seen = Vec::new();
    strings(&body, &mut seen);
    for s in seen {
        assert!(
            vocabulary.contains(s),
            "`{s}` goes out, and the contract never says it"
        );
    }
}
