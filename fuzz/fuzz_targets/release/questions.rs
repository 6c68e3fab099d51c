//! The fuzzed contract: each question's TOML table from its fuzzed parameters (views,
//! coarsening, withheld labels, mechanisms), and the question as a request asks it.

use super::*;

fn toml_string(text: &str) -> String {
    Value::from(text).to_string()
}

/// The question's TOML table and what it releases; `None` for parameters the template
/// does not write.
pub(super) fn question(index: usize, q: &Question) -> Option<(String, Rule)> {
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
pub(super) fn asked_question(rule: &Rule) -> Value {
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
