//! A contract's questions, built from their raw tables: classes, the pinned question text,
//! coarsening, withheld labels, workflows and the release mechanism.

use std::path::Path;

use super::{Inputs, MAX_COST, limits, raw};
use crate::contract::{Coarsening, Pinned, QuestionRule, View};
use crate::mechanism::Mechanism;
use crate::wire::Kind;
use crate::workflow::Spec;

/// The question `key` of a contract whose providers are `providers`: its rule (released with
/// the first provider's mechanism) and, for a WCPQ question of a contract of several
/// providers, the mechanism of each further provider (its own codebook) in their order;
/// empty when every provider's answers are released alike.
pub(crate) fn build_question(
    key: &str,
    mut raw: raw::RawQuestion,
    base_dir: &Path,
    inputs: &Inputs<'_>,
    providers: &[String],
    problems: &mut Vec<String>,
) -> Option<(QuestionRule, Vec<Mechanism>)> {
    if raw.kind == Some(Kind::Box) {
        return build_box_question(key, raw, problems).map(|rule| (rule, Vec::new()));
    }
    let n_problems = problems.len();
    let classes = std::mem::take(&mut raw.classes);
    check_classes(key, &classes, problems);
    if raw.view == View::NoOutput {
        problems.push(no_output_view(key));
    }
    let question = pin_question(key, &raw, &classes, problems);
    let (min_levels, max_levels) = limits::SCORE_LEVELS;
    if question.kind == Kind::Score && !(min_levels..=max_levels).contains(&classes.len()) {
        problems.push(format!(
            "{key}.classes: a score question has {min_levels} to {max_levels} levels (the System \
             One API's documented limit), got {}",
            classes.len()
        ));
    }
    let coarsen = if raw.coarsen.is_empty() {
        None
    } else {
        Some(coarsening(key, &raw, &question, &classes, problems))
    };
    let released: &[String] = coarsen.as_ref().map_or(&classes, |c| &c.labels);
    let withhold = withheld(key, &raw.withhold_labels, released, problems);
    check_costs(key, &raw, problems);
    if problems.len() > n_problems {
        return None;
    }
    let workflows = workflows(key, &raw, released, base_dir, inputs, problems);
    let mut mechanisms = mechanisms(
        key,
        raw.mechanism,
        (released, workflows.as_ref()),
        base_dir,
        inputs,
        providers,
        problems,
    )
    .into_iter();
    let rule = (problems.len() == n_problems).then(|| QuestionRule {
        plain_classes: classes
            .iter()
            .all(|class| crate::wire::json::is_plain(class)),
        classes,
        question,
        view: raw.view,
        coarsen,
        withhold,
        mechanism: mechanisms.next().unwrap_or_default(),
        workflows,
        pinned_upstream: Default::default(),
        codewords: Default::default(),
    });
    let rule = checked(key, rule?, problems)?;
    let others: Vec<Mechanism> = mechanisms.collect();
    for (provider, mechanism) in providers[1..].iter().zip(&others) {
        if let Err(reason) = crate::contract::check_release(&rule, rule.view, mechanism) {
            problems.push(format!("{key}.mechanism.codebooks.{provider}: {reason}"));
            return None;
        }
    }
    Some((rule, others))
}

/// Checks the class labels: between the allowed counts, none blank, none listed twice.
fn check_classes(key: &str, classes: &[String], problems: &mut Vec<String>) {
    let (min_classes, max_classes) = limits::CLASSES;
    if !(min_classes..=max_classes).contains(&classes.len()) {
        problems.push(format!(
            "{key}.classes: needs {min_classes} to {max_classes} classes, got {}",
            classes.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for class in classes {
        if class.trim().is_empty() {
            problems.push(format!("{key}.classes: a class label is blank"));
        }
        if !seen.insert(class.as_str()) {
            problems.push(format!("{key}.classes: `{class}` is listed twice"));
        }
    }
}

/// Why a question the contract allows cannot have the view `no_output`.
fn no_output_view(key: &str) -> String {
    // Typed clients read every asked question's answer (Python `answers[id]`, the JS
    // SDK's types): an allowed question that releases nothing breaks them. The
    // audit's candidate views still include `no_output` (`Contract::with_release`).
    format!(
        "{key}.view: `no_output` on a question the contract allows leaves its answer out, which typed clients cannot read; remove the question from the contract instead (asking it is then 403 `question_not_released`)"
    )
}

/// `coarsen`: each class mapped to the released label it merges into (a choice question only).
fn coarsening(
    key: &str,
    raw: &raw::RawQuestion,
    question: &Pinned,
    classes: &[String],
    problems: &mut Vec<String>,
) -> Coarsening {
    if question.kind != Kind::Choice {
        problems.push(format!(
            "{key}.coarsen: applies to choice questions only (this one is {})",
            question.kind.as_str()
        ));
    }
    for fine in raw.coarsen.keys() {
        if !classes.contains(fine) {
            problems.push(format!("{key}.coarsen: `{fine}` is not one of the classes"));
        }
    }
    let mut labels: Vec<String> = Vec::new();
    let mut map = Vec::with_capacity(classes.len());
    for class in classes {
        let coarse = raw.coarsen.get(class).unwrap_or(class);
        let index = match labels.iter().position(|label| label == coarse) {
            Some(index) => index,
            None => {
                labels.push(coarse.clone());
                labels.len() - 1
            }
        };
        map.push(index);
    }
    if labels.len() < 2 {
        problems.push(format!(
            "{key}.coarsen: leaves fewer than two released labels"
        ));
    }
    Coarsening { labels, map }
}

/// `withhold_labels`: which released labels are withheld.
fn withheld(
    key: &str,
    labels: &[String],
    released: &[String],
    problems: &mut Vec<String>,
) -> Vec<bool> {
    let mut withhold = vec![false; released.len()];
    for label in labels {
        match released.iter().position(|l| l == label) {
            Some(index) => withhold[index] = true,
            None => problems.push(format!(
                "{key}.withhold_labels: `{label}` is not a released label"
            )),
        }
    }
    withhold
}

/// Keeps every workflow cost within `MAX_COST`.
fn check_costs(key: &str, raw: &raw::RawQuestion, problems: &mut Vec<String>) {
    if let Some(costs) = raw.workflows.as_ref().and_then(|w| w.costs.as_ref()) {
        // Profiles double costs and plans sum them: keep every sum finite.
        let values = [costs.c_wrong, costs.c_review, costs.c_check];
        let matrix = costs.matrix.iter().flatten().flatten().copied();
        if values
            .into_iter()
            .flatten()
            .chain(matrix)
            .any(|v| v.abs() > MAX_COST)
        {
            problems.push(format!(
                "{key}.workflows.costs: every cost must be at most {MAX_COST:e}"
            ));
        }
    }
}

/// `workflows`: the question's workflow spec, read against its released labels.
fn workflows(
    key: &str,
    raw: &raw::RawQuestion,
    released: &[String],
    base_dir: &Path,
    inputs: &Inputs<'_>,
    problems: &mut Vec<String>,
) -> Option<Spec> {
    match &raw.workflows {
        None => None,
        Some(table) => match Spec::from_raw(table, released, base_dir, inputs.files) {
            Ok(spec) => Some(spec),
            Err(error) => {
                problems.push(format!("{key}.workflows.{error}"));
                None
            }
        },
    }
}

/// `mechanism`: the release mechanism, once for a question every provider's answers are
/// released alike by; a WCPQ question's once per provider of `providers`, in their order, each
/// with that provider's codebook (every one `none` when codebooks are not loaded; which
/// provider has which codebook is checked either way).
fn mechanisms(
    key: &str,
    raw: crate::mechanism::Raw,
    (released, workflows): (&[String], Option<&Spec>),
    base_dir: &Path,
    inputs: &Inputs<'_>,
    providers: &[String],
    problems: &mut Vec<String>,
) -> Vec<Mechanism> {
    let build = |raw, problems: &mut Vec<String>| match Mechanism::from_raw(
        raw,
        released,
        workflows,
        base_dir,
        inputs.files,
    ) {
        Ok(mechanism) => mechanism,
        Err(reason) => {
            problems.push(format!("{key}.mechanism: {reason}"));
            Mechanism::None
        }
    };
    let crate::mechanism::Raw::Wcpq {
        codebook,
        codebooks,
        admissibility,
        fallback,
        confidence,
    } = raw
    else {
        return vec![build(raw, problems)];
    };
    let Some(paths) = codebook_paths(key, codebook, codebooks, providers, problems) else {
        return vec![Mechanism::None];
    };
    if !inputs.codebooks {
        return vec![Mechanism::None];
    }
    let mut loaded: Vec<(String, Mechanism)> = Vec::new();
    let mut mechanisms = Vec::with_capacity(paths.len());
    for path in paths {
        // A codebook several providers share is read and checked once.
        if let Some((_, mechanism)) = loaded.iter().find(|(p, _)| *p == path) {
            mechanisms.push(mechanism.clone());
            continue;
        }
        let raw = crate::mechanism::Raw::Wcpq {
            codebook: Some(path.clone()),
            codebooks: Default::default(),
            admissibility,
            fallback,
            confidence,
        };
        let mechanism = build(raw, problems);
        loaded.push((path, mechanism.clone()));
        mechanisms.push(mechanism);
    }
    mechanisms
}

/// The codebook path of each provider of `providers` (in their order): `codebooks`' entry for
/// it, else for the first provider `codebook`. A provider without one, a `codebooks` key that
/// is not a provider of the contract, and a `codebook` that serves no provider (the first one
/// is in `codebooks`) are problems.
fn codebook_paths(
    key: &str,
    codebook: Option<String>,
    mut codebooks: std::collections::BTreeMap<String, String>,
    providers: &[String],
    problems: &mut Vec<String>,
) -> Option<Vec<String>> {
    let n_problems = problems.len();
    for name in codebooks.keys().filter(|name| !providers.contains(name)) {
        problems.push(format!(
            "{key}.mechanism.codebooks.{name}: `{name}` is not one of the contract's providers ({})",
            providers.join(", ")
        ));
    }
    let first = providers.first().map(String::as_str).unwrap_or_default();
    let mut codebook = codebook;
    if codebook.is_some() && codebooks.contains_key(first) {
        problems.push(format!(
            "{key}.mechanism.codebook: serves the first provider `{first}`, which `codebooks` names too: keep one"
        ));
    }
    let mut paths = Vec::with_capacity(providers.len());
    for (index, provider) in providers.iter().enumerate() {
        let own = codebooks.remove(provider);
        let path = if index == 0 {
            own.or(codebook.take())
        } else {
            own
        };
        match path {
            Some(path) => paths.push(path),
            None if index == 0 && providers.len() == 1 => problems.push(format!(
                "{key}.mechanism: wcpq needs a `codebook` (the codebook built from provider `{provider}`'s answers)"
            )),
            None => problems.push(format!(
                "{key}.mechanism.codebooks: provider `{provider}` of the contract has no codebook for this question (add `{provider} = \"PATH\"`, the codebook built from its answers)"
            )),
        }
    }
    (problems.len() == n_problems).then_some(paths)
}

/// A `type = "box"` question: no classes, labels or workflows; the view `full_native` (box
/// and confidence) or `choice` (the box alone); no mechanism, or `quantize` (edges and
/// confidence rounded to its step).
fn build_box_question(
    key: &str,
    raw: raw::RawQuestion,
    problems: &mut Vec<String>,
) -> Option<QuestionRule> {
    let n_problems = problems.len();
    let mut refuse = |field: &str, present: bool| {
        if present {
            problems.push(format!(
                "{key}.{field}: a box question has no classes, so no `{field}`"
            ));
        }
    };
    refuse("classes", !raw.classes.is_empty());
    refuse("descriptions", !raw.descriptions.is_empty());
    refuse("coarsen", !raw.coarsen.is_empty());
    refuse("withhold_labels", !raw.withhold_labels.is_empty());
    refuse("workflows", raw.workflows.is_some());
    check_box_view(key, raw.view, problems);
    let mechanism = box_mechanism(key, raw.mechanism, problems);
    if let Some(instructions) = &raw.instructions {
        content(format!("{key}.instructions"), instructions, problems);
    }
    let rule = (problems.len() == n_problems).then(|| QuestionRule {
        classes: Vec::new(),
        plain_classes: true,
        question: Pinned {
            kind: Kind::Box,
            instructions: raw.instructions,
            descriptions: Vec::new(),
            caller_text: raw.caller_text,
        },
        view: raw.view,
        coarsen: None,
        withhold: Vec::new(),
        mechanism,
        workflows: None,
        pinned_upstream: Default::default(),
        codewords: Default::default(),
    });
    checked(key, rule?, problems)
}

/// A box question is released as `full_native` or `choice`.
fn check_box_view(key: &str, view: View, problems: &mut Vec<String>) {
    match view {
        View::FullNative | View::Choice => {}
        View::NoOutput => problems.push(no_output_view(key)),
        other => problems.push(format!(
            "{key}.view: a box question is released as `full_native` (box and confidence) or `choice` (the box alone), not `{}`",
            other.as_str()
        )),
    }
}

/// A box question's mechanism: none, or `quantize` with a valid step and the derived confidence.
fn box_mechanism(key: &str, raw: crate::mechanism::Raw, problems: &mut Vec<String>) -> Mechanism {
    match raw {
        crate::mechanism::Raw::None => Mechanism::None,
        crate::mechanism::Raw::Quantize {
            step,
            confidence: crate::mechanism::ConfidenceSource::Derived,
        } if crate::baseline::step_nanos(step).is_some() => Mechanism::Quantize {
            step,
            confidence: crate::mechanism::ConfidenceSource::Derived,
        },
        crate::mechanism::Raw::Quantize { step, confidence } => {
            problems.push(format!(
                "{key}.mechanism: a box question's quantize takes a `step` (a decimal in [1e-9, 1] with at most 9 decimal places, got {step}) and rounds the confidence to it{}",
                if confidence == crate::mechanism::ConfidenceSource::Derived {
                    ""
                } else {
                    " (no `confidence` option)"
                }
            ));
            Mechanism::None
        }
        _ => {
            problems.push(format!(
                "{key}.mechanism: a box question takes no mechanism or `{{ kind = \"quantize\", step = ... }}` (the others rewrite class probabilities, which a box has none of)"
            ));
            Mechanism::None
        }
    }
}

/// `rule` when its view and mechanism pass the rules every derived release passes too
/// (`contract::check_release`); otherwise the reason goes to `problems`.
fn checked(key: &str, rule: QuestionRule, problems: &mut Vec<String>) -> Option<QuestionRule> {
    match crate::contract::check_release(&rule, rule.view, &rule.mechanism) {
        Ok(()) => Some(rule),
        Err(reason) => {
            problems.push(format!("{key}: {reason}"));
            None
        }
    }
}

/// The question a contract asks: its type (declared, or implied by the classes: `"false"`
/// and `"true"` make a noul question, the levels `"0".."N-1"` a score question, anything
/// else a choice question) and its text.
fn pin_question(
    key: &str,
    raw: &raw::RawQuestion,
    classes: &[String],
    problems: &mut Vec<String>,
) -> Pinned {
    let is_noul = {
        let mut sorted: Vec<&str> = classes.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted == ["false", "true"]
    };
    let is_score = crate::wire::is_level_permutation(classes);
    let kind = match raw.kind {
        Some(Kind::Noul) if !is_noul => {
            problems.push(format!(
                "{key}.type: a noul question's classes must be \"false\" and \"true\""
            ));
            Kind::Noul
        }
        Some(Kind::Score) if !is_score => {
            problems.push(format!(
                "{key}.type: a score question's classes must be its levels \"0\"..\"{}\"",
                classes.len().saturating_sub(1)
            ));
            Kind::Score
        }
        Some(kind) => kind,
        None if is_noul => Kind::Noul,
        None if is_score => Kind::Score,
        None => Kind::Choice,
    };
    if let Some(instructions) = &raw.instructions {
        content(format!("{key}.instructions"), instructions, problems);
    }
    for (class, description) in &raw.descriptions {
        if classes.contains(class) {
            content(format!("{key}.descriptions.{class}"), description, problems);
        } else {
            problems.push(format!(
                "{key}.descriptions: `{class}` is not one of the classes ({})",
                classes.join(", ")
            ));
        }
    }
    Pinned {
        kind,
        instructions: raw.instructions.clone(),
        descriptions: classes
            .iter()
            .map(|class| raw.descriptions.get(class).cloned())
            .collect(),
        caller_text: raw.caller_text,
    }
}

/// Checks that a pinned text is System One content: a string (not blank), a table or an array.
fn content(field: String, value: &serde_json::Value, problems: &mut Vec<String>) {
    match value {
        serde_json::Value::String(text) if text.trim().is_empty() => {
            problems.push(format!("{field}: must not be blank"));
        }
        serde_json::Value::String(_)
        | serde_json::Value::Object(_)
        | serde_json::Value::Array(_) => {}
        _ => problems.push(format!(
            "{field}: must be System One content: a string, a table or an array"
        )),
    }
}
