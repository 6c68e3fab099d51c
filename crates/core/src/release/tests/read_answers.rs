//! `wire::read_answers` with `release_read` against the reading it stands in for
//! (`Doc::read`, else `Json::parse`, then `release`): on generated responses, right and
//! wrong in every way the reader must notice, the same bytes out and the same refusal,
//! and read by it exactly when every answer is one `parse_answer` accepts.

use bumpalo::Bump;
use proptest::prelude::*;

use super::*;
use crate::rng::Rng;
use crate::wire::json::Doc;

/// Questions of three kinds of labels: plain, ones JSON must escape, and non-ASCII.
const QUESTIONS: &str = r#"
[contracts.c.questions.q]
classes = ["A", "B", "C", "D"]
view = "full_native"
[contracts.c.questions.w]
classes = ["x\"y", "é", "z\\"]
view = "full_native"
[contracts.c.questions.s]
classes = ["0", "1", "2", "3", "4"]
view = "choice_confidence"
descriptions = { "0" = "none", "1" = "low", "2" = "mid", "3" = "high", "4" = "top" }
[contracts.c.questions.longer_question_id]
classes = ["DELIVERY_RECORD", "ADDRESS", "DAMAGE"]
view = "full_probabilities"
mechanism = { kind = "quantize", step = 0.25 }
"#;

fn test_contract(shape: &str) -> std::sync::Arc<Contract> {
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nshape = \"{shape}\"\n{QUESTIONS}"
    );
    crate::config::Config::from_toml(&text).unwrap().contracts["c"].clone()
}

/// Each question's id, whether it is a score question, and its labels.
fn questions() -> Vec<(&'static str, bool, Vec<&'static str>)> {
    vec![
        ("q", false, vec!["A", "B", "C", "D"]),
        ("w", false, vec!["x\"y", "é", "z\\"]),
        ("s", true, vec!["0", "1", "2", "3", "4"]),
        (
            "longer_question_id",
            false,
            vec!["DELIVERY_RECORD", "ADDRESS", "DAMAGE"],
        ),
    ]
}

/// A member of an object being written: writes itself.
type Member<'m> = Box<dyn Fn(&mut Writer) + 'm>;

/// A response generator: JSON text written token by token, so that spellings (escapes,
/// numbers, whitespace) and faults (repeated keys, wrong types) can be chosen.
struct Writer {
    rng: Rng,
    out: String,
    /// Whether every answer is one `parse_answer` accepts and the document one
    /// `Doc::read` reads.
    valid: bool,
}

impl Writer {
    fn chance(&mut self, in_n: usize) -> bool {
        self.rng.below(in_n) == 0
    }

    fn space(&mut self) {
        if self.chance(6) {
            self.out
                .push_str([" ", "\n", "\t ", "\r\n  "][self.rng.below(4)]);
        }
    }

    /// A string, sometimes with an escape where none is needed.
    fn string(&mut self, text: &str) {
        self.out.push('"');
        let escape_first = self.chance(8);
        for (i, ch) in text.chars().enumerate() {
            match ch {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                c if i == 0 && escape_first => self.out.push_str(&format!("\\u{:04x}", c as u32)),
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn key(&mut self, key: &str) {
        self.space();
        self.string(key);
        self.space();
        self.out.push(':');
        self.space();
    }

    /// `hundredths / 100` in one of several spellings that all read to that number.
    fn number(&mut self, hundredths: u32) {
        let spelled = match self.rng.below(6) {
            0 => format!("{}", f64::from(hundredths) / 100.0),
            1 if hundredths < 100 => format!("0.{hundredths:02}"),
            2 => format!("{hundredths}e-2"),
            3 => format!("{:.3}", f64::from(hundredths) / 100.0),
            4 if hundredths == 0 => "-0".to_string(),
            4 if hundredths == 100 => "1".to_string(),
            _ => format!("{}E-2", hundredths),
        };
        self.out.push_str(&spelled);
    }

    /// An object of `members` (each written by its closure), shuffled, sometimes with a
    /// member repeated.
    fn object(&mut self, mut members: Vec<Member<'_>>) {
        self.rng.shuffle(&mut members);
        self.out.push('{');
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                self.space();
                self.out.push(',');
            }
            member(self);
        }
        self.space();
        self.out.push('}');
    }
}

/// One generated response to `asked` (ids in the order asked) and whether its answers
/// should be read by `read_answers`.
fn response(seed: u64, asked: &[&str]) -> (String, bool) {
    let mut w = Writer {
        rng: Rng::new(seed),
        out: String::new(),
        valid: true,
    };
    let all = questions();
    // Every choice made up front, so that the writing closures need only the writer.
    let mut answers: Vec<(String, String)> = Vec::new();
    let mut answered: Vec<&str> = asked.to_vec();
    if w.chance(12) {
        answered.pop();
    }
    if w.chance(12) {
        answered.push(if w.chance(2) { "q" } else { "elsewhere" });
    }
    // Exactly the asked questions, each once.
    let mut sorted = answered.clone();
    sorted.sort_unstable();
    let mut wanted = asked.to_vec();
    wanted.sort_unstable();
    w.valid = sorted == wanted;
    for id in answered {
        let Some((_, score, labels)) = all.iter().find(|(q, _, _)| *q == id).cloned() else {
            answers.push((id.to_string(), "{\"type\": \"choice\"}".to_string()));
            continue;
        };
        let text = answer(&mut w, score, &labels);
        answers.push((id.to_string(), text));
    }
    let answers_text = {
        let mut inner = Writer {
            rng: w.rng.fork("answers"),
            out: String::new(),
            valid: true,
        };
        inner.object(
            answers
                .iter()
                .map(|(id, text)| {
                    Box::new(move |w: &mut Writer| {
                        w.key(id);
                        w.out.push_str(text);
                    }) as Member<'_>
                })
                .collect(),
        );
        inner.out
    };
    let model_bad = w.chance(16);
    let usage = match w.rng.below(4) {
        0 => None,
        1 => Some("null".to_string()),
        2 => Some("{\"input_tokens\": 12, \"output_tokens\": 3}".to_string()),
        _ => Some("{\"input_tokens\": 1.5}".to_string()),
    };
    let extra = w.chance(3);
    let repeat_top = w.chance(20);
    if repeat_top {
        w.valid = false;
    }
    let answers_text = &answers_text;
    let usage = &usage;
    let mut members: Vec<Member<'_>> = vec![
        Box::new(move |w: &mut Writer| {
            w.key("model");
            if model_bad {
                w.out.push('7');
            } else {
                w.string("jev-1.0");
            }
        }),
        Box::new(move |w: &mut Writer| {
            w.key("answers");
            w.out.push_str(answers_text);
        }),
    ];
    if let Some(usage) = usage {
        members.push(Box::new(move |w: &mut Writer| {
            w.key("usage");
            w.out.push_str(usage);
        }));
    }
    if extra {
        members.push(Box::new(|w: &mut Writer| {
            w.key("id");
            w.out
                .push_str("{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"d\"}");
        }));
    }
    if repeat_top {
        members.push(Box::new(|w: &mut Writer| {
            w.key("model");
            w.string("again");
        }));
    }
    w.object(members);
    w.space();
    (w.out, w.valid)
}

/// One answer's text (written with `w`'s choices; `w.valid` cleared on a fault).
fn answer(w: &mut Writer, score: bool, labels: &[&str]) -> String {
    let n = labels.len();
    // Probabilities in hundredths summing to 100.
    let mut cuts: Vec<u32> = (0..n - 1).map(|_| w.rng.below(101) as u32).collect();
    cuts.sort_unstable();
    let mut parts = Vec::with_capacity(n);
    let mut last = 0;
    for cut in cuts.iter().copied().chain([100]) {
        parts.push(cut - last);
        last = cut;
    }
    let top = parts.iter().copied().max().unwrap_or(0);
    let mut choice = parts.iter().position(|&p| p == top).unwrap_or(0);
    let fault = if w.chance(4) {
        w.rng.below(11)
    } else {
        usize::MAX
    };
    let mut valid = fault == usize::MAX;
    let mut probability_members: Vec<(String, String)> = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let mut sub = Writer {
            rng: w.rng.fork("p"),
            out: String::new(),
            valid: true,
        };
        sub.key(label);
        match fault {
            0 if i == 0 => sub.out.push_str("1.5"),
            1 if i == 0 => sub.out.push_str("\"0.5\""),
            _ => sub.number(parts[i]),
        }
        probability_members.push((label.to_string(), sub.out));
    }
    match fault {
        2 => {
            probability_members.pop();
        }
        3 => probability_members.push(("other".into(), "\"other\": 0".into())),
        4 => {
            let first = probability_members[0].clone();
            probability_members.push(first);
        }
        _ => {}
    }
    if fault == 5 {
        choice = (choice + 1) % n;
        // A tie keeps the answer valid, and a score's level is not checked against
        // its probabilities.
        valid |= parts[choice] == top || score;
    }
    let mut members: Vec<String> = Vec::new();
    let kind = match fault {
        6 => "noul",
        _ if score => "score",
        _ => "choice",
    };
    let mut type_writer = Writer {
        rng: w.rng.fork("t"),
        out: String::new(),
        valid: true,
    };
    type_writer.key("type");
    type_writer.string(kind);
    if fault != 7 {
        members.push(type_writer.out);
    }
    let mut probabilities = Writer {
        rng: w.rng.fork("ps"),
        out: String::new(),
        valid: true,
    };
    probabilities.key("probabilities");
    probabilities.object(
        probability_members
            .iter()
            .map(|(_, text)| Box::new(move |w: &mut Writer| w.out.push_str(text)) as Member<'_>)
            .collect(),
    );
    if fault != 8 {
        members.push(probabilities.out);
    }
    let mut rest = Writer {
        rng: w.rng.fork("r"),
        out: String::new(),
        valid: true,
    };
    if score {
        rest.key("score");
        match fault {
            9 => rest.out.push_str("null"),
            _ => rest.number(100 + 25 * choice as u32),
        }
    } else {
        rest.key("choice");
        match fault {
            9 => rest.string("not a label"),
            _ => rest.string(labels[choice]),
        }
    }
    members.push(std::mem::take(&mut rest.out));
    let confidence = if fault == 10 { 3 } else { rest.rng.below(4) };
    match confidence {
        0 => {}
        1 => {
            rest.key("confidence");
            rest.out.push_str("null");
        }
        _ => {
            rest.key("confidence");
            if fault == 10 {
                rest.out.push_str("-0.5");
            } else {
                let hundredths = rest.rng.below(101) as u32;
                rest.number(hundredths);
            }
        }
    }
    if !rest.out.is_empty() {
        members.push(std::mem::take(&mut rest.out));
    }
    if rest.chance(3) {
        rest.key("rationale");
        rest.string("because");
        members.push(std::mem::take(&mut rest.out));
    }
    if rest.chance(20) {
        // A repeated member the reader does not read: `Doc::read` gives up all the same.
        rest.key("rationale");
        rest.string("twice");
        members.push(std::mem::take(&mut rest.out));
        rest.key("rationale");
        rest.string("twice");
        members.push(std::mem::take(&mut rest.out));
        valid = false;
    }
    w.valid &= valid;
    let mut out = Writer {
        rng: w.rng.fork("a"),
        out: String::new(),
        valid: true,
    };
    out.object(
        members
            .iter()
            .map(|text| Box::new(move |w: &mut Writer| w.out.push_str(text)) as Member<'_>)
            .collect(),
    );
    out.out
}

/// A release's bytes and records (without mapping times), or its refusal.
type Outcome = Result<(Vec<u8>, Vec<AnswerRecord>), Invalid>;

fn outcome(released: Result<Release<'_>, Invalid>) -> Outcome {
    released.map(|released| {
        let records = released
            .answers
            .iter()
            .cloned()
            .map(|mut record| {
                record.mapping_seconds = None;
                record
            })
            .collect();
        (released.to_bytes(), records)
    })
}

fn options(rng: &mut Rng) -> Options<'_> {
    Options {
        rng,
        evaluate: true,
    }
}

/// The release of `bytes` as the reading `read_answers` stands in for makes it.
fn two_step(c: &Contract, asked: &crate::wire::Asked, bytes: &[u8]) -> Outcome {
    let arena = Bump::new();
    let mut rng = Rng::new(3);
    match Doc::read(bytes, &arena) {
        Some(doc) => outcome(release(c, asked, &doc, &mut options(&mut rng))),
        None => match crate::wire::Json::parse(bytes) {
            Ok(json) => outcome(release(c, asked, &json, &mut options(&mut rng))),
            Err(_) => Err(Invalid::NotJson),
        },
    }
}

/// The release of `bytes` through `read_answers`, where it reads them.
fn read_first(c: &Contract, asked: &crate::wire::Asked, bytes: &[u8]) -> Option<Outcome> {
    let arena = Bump::new();
    let read = crate::wire::read_answers(bytes, &arena, c, asked)?;
    let mut rng = Rng::new(3);
    Some(outcome(release_read(
        c,
        asked,
        &read,
        &mut options(&mut rng),
    )))
}

/// The request asking `ids` in that order.
fn asking(ids: &[&str]) -> Value {
    let all = questions();
    let questions: serde_json::Map<String, Value> = ids
        .iter()
        .map(|id| {
            let (_, score, labels) = all.iter().find(|(q, _, _)| q == id).unwrap();
            let question = if *score {
                json!({"type": "score", "criteria": ["none", "low", "mid", "high", "top"]})
            } else {
                let criteria: serde_json::Map<String, Value> = labels
                    .iter()
                    .map(|l| (l.to_string(), Value::Null))
                    .collect();
                json!({"type": "choice", "criteria": criteria})
            };
            (id.to_string(), question)
        })
        .collect();
    json!({"model": "m", "state": "s", "questions": questions})
}

fn check(seed: u64) -> bool {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut ids: Vec<&str> = questions().iter().map(|(id, _, _)| *id).collect();
    rng.shuffle(&mut ids);
    ids.truncate(1 + rng.below(ids.len()));
    let c = test_contract(if rng.below(2) == 0 {
        "minimal"
    } else {
        "complete"
    });
    let asked = check_request(&asking(&ids), &c).unwrap();
    let (text, valid) = response(seed, &ids);
    let bytes = text.as_bytes();
    let fast = read_first(&c, &asked, bytes);
    let reference = two_step(&c, &asked, bytes);
    if let Some(fast) = &fast {
        assert_eq!(fast, &reference, "{text}");
    }
    assert_eq!(fast.is_some(), valid, "{text}\n{reference:?}");
    valid
}

#[test]
fn read_answers_releases_as_the_two_step_reading() {
    let read = (0..3000).filter(|&seed| check(seed)).count();
    // Both kinds of response occur: the check above is not vacuous.
    assert!((500..2900).contains(&read), "{read} of 3000 read");
}

proptest! {
    #[test]
    fn read_answers_releases_as_the_two_step_reading_on_any_seed(seed in any::<u64>()) {
        check(seed);
    }

    #[test]
    fn read_answers_never_reads_bytes_the_two_step_reading_refuses(
        cut in 0usize..400,
        seed in any::<u64>(),
    ) {
        let c = test_contract("minimal");
        let asked = check_request(&asking(&["q", "w"]), &c).unwrap();
        let (text, _) = response(seed, &["q", "w"]);
        // A response cut short, or with a byte changed: never read differently.
        let mut bytes = text.into_bytes();
        let at = cut % bytes.len().max(1);
        if seed % 2 == 0 {
            bytes.truncate(at);
        } else if let Some(byte) = bytes.get_mut(at) {
            *byte = b"\"{}[],:\\ 0a-e"[(seed % 13) as usize];
        }
        if let Some(fast) = read_first(&c, &asked, &bytes) {
            prop_assert_eq!(fast, two_step(&c, &asked, &bytes));
        }
    }
}
