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

#[path = "release/native.rs"]
mod native;
#[path = "release/oracle.rs"]
mod oracle;
#[path = "release/questions.rs"]
mod questions;

use native::shaped_native;
use oracle::{FIELDS, check_answer, strings};
use questions::{asked_question, question};

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
        Some(
            release_read(contract, &asked, &read, &mut options).map(|released| released.to_bytes()),
        )
    });
    let Ok(native) = Json::parse(&native_bytes) else {
        assert!(
            read_first.is_none(),
            "read_answers read bytes that are not JSON"
        );
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
