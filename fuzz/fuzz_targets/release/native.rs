//! The fuzzed provider answers: a document shaped like an answer to the asked questions
//! (right and wrong types, labels, numbers, extra fields and answers), from the fuzzed
//! parameters.

use super::*;

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
pub(super) fn shaped_native(
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
