//! Reading a codebook file: the checks of its header, its codewords, a learned codebook's
//! assignment and strict stage, before [`Codebook::from_json`](super::Codebook::from_json)
//! accepts it.

use std::cmp::Ordering;

use super::{
    Assignment, CONFIDENCE_LEVELS, CodebookFile, Codeword, Error, FORMAT, Learned, PRIORITY_ORDER,
    codeword_order, validate_classes,
};
use crate::workflow;

/// Checks a list of codewords over `n` classes (`field` names it in errors): in strict order
/// when `ordered`, otherwise free of duplicates (a learned assignment's order).
pub(super) fn check_codewords(
    field: &str,
    codewords: &[Codeword],
    n: usize,
    ordered: bool,
) -> Result<(), Error> {
    let invalid = |field: &str, message: String| Error::Invalid {
        field: field.to_string(),
        message,
    };
    if codewords.is_empty() {
        return Err(invalid(field, "empty".to_string()));
    }
    for (i, cw) in codewords.iter().enumerate() {
        let field = format!("{field}[{i}]");
        if cw.p.len() != n {
            return Err(invalid(
                &field,
                format!("expected {n} probabilities, got {}", cw.p.len()),
            ));
        }
        if !cw.p.iter().all(|v| v.is_finite() && *v >= 0.0) {
            return Err(invalid(
                &field,
                "probabilities must be finite and non-negative".to_string(),
            ));
        }
        let sum: f64 = cw.p.iter().sum();
        if (sum - 1.0).abs() > crate::wire::sum_tolerance(n) {
            return Err(invalid(&field, format!("probabilities sum to {sum}")));
        }
        if !cw.c.is_finite() {
            return Err(invalid(&field, "confidence is not finite".to_string()));
        }
        if ordered && i > 0 && codeword_order(&codewords[i - 1], cw) != Ordering::Less {
            return Err(invalid(&field, "out of order or duplicate".to_string()));
        }
    }
    if !ordered {
        let mut sorted: Vec<&Codeword> = codewords.iter().collect();
        sorted.sort_by(|a, b| codeword_order(a, b));
        if sorted
            .windows(2)
            .any(|w| codeword_order(w[0], w[1]) == Ordering::Equal)
        {
            return Err(invalid(field, "holds a duplicate".to_string()));
        }
    }
    Ok(())
}

/// An invalid field of a codebook file.
pub(super) fn invalid(field: &str, message: String) -> Error {
    Error::Invalid {
        field: field.to_string(),
        message,
    }
}

/// The file's format, classes, denominator, confidence levels, workflows (and their
/// hash) and codeword count.
pub(super) fn check_header(file: &CodebookFile) -> Result<(), Error> {
    if file.format != FORMAT {
        return Err(invalid(
            "format",
            format!("expected {FORMAT:?}, got {:?}", file.format),
        ));
    }
    validate_classes(&file.classes)?;
    if file.denominator == 0 {
        return Err(Error::Denominator);
    }
    if file.confidence_levels != CONFIDENCE_LEVELS {
        return Err(invalid(
            "confidence_levels",
            "expected [0.0, 0.5, 1.0]".to_string(),
        ));
    }
    // Written now: the canonical form's hash. Files written before recorded the legacy
    // hash (key order as written), and still load.
    let sha = workflow::canonical_sha256(&file.workflows);
    if sha != file.workflows_sha256
        && workflow::legacy_sha256(&file.workflows) != file.workflows_sha256
    {
        return Err(invalid(
            "workflows_sha256",
            format!("recorded {}, computed {sha}", file.workflows_sha256),
        ));
    }
    if file.workflows.get("classes") != Some(&serde_json::json!(file.classes)) {
        return Err(invalid(
            "workflows.classes",
            "differ from classes".to_string(),
        ));
    }
    if file.codeword_count != file.codewords.len() {
        return Err(invalid(
            "codeword_count",
            format!(
                "recorded {}, found {}",
                file.codeword_count,
                file.codewords.len()
            ),
        ));
    }
    Ok(())
}

/// How the file's codewords are assigned: coverage order, or a learned codebook's priority
/// order with its split penalty.
pub(super) fn assignment_of(file: &CodebookFile) -> Result<Assignment, Error> {
    match (file.order.as_deref(), file.split_penalty) {
        (None, None) => Ok(Assignment::Coverage),
        (Some(PRIORITY_ORDER), Some(split_penalty)) if file.budget.is_some() => {
            Ok(Assignment::Priority { split_penalty })
        }
        _ => Err(invalid(
            "order",
            format!(
                "a learned codebook records order {PRIORITY_ORDER:?} and split_penalty together, or neither"
            ),
        )),
    }
}

/// A learned codebook's strict stage: counted, valid, and holding every compact codeword.
pub(super) fn check_strict_stage(file: &CodebookFile, n: usize) -> Result<(), Error> {
    let Some(stage) = &file.strict_stage else {
        if file.strict_stage_count.is_some() {
            return Err(invalid(
                "strict_stage_count",
                "recorded without a strict stage".to_string(),
            ));
        }
        return Ok(());
    };
    if file.budget.is_none() {
        return Err(invalid(
            "strict_stage",
            "only a learned codebook carries a strict stage".to_string(),
        ));
    }
    if file.strict_stage_count != Some(stage.len()) {
        return Err(invalid(
            "strict_stage_count",
            format!(
                "recorded {:?}, found {}",
                file.strict_stage_count,
                stage.len()
            ),
        ));
    }
    check_codewords("strict_stage", stage, n, true)?;
    // The compact codewords are selected from the strict stage.
    if let Some(missing) = file.codewords.iter().position(|cw| {
        stage
            .binary_search_by(|other| codeword_order(other, cw))
            .is_err()
    }) {
        return Err(invalid(
            &format!("codewords[{missing}]"),
            "is not in the strict stage it was learned from".to_string(),
        ));
    }
    Ok(())
}

/// The other label sets a pooled codebook serves: valid, each as long as `classes`.
pub(super) fn check_other_class_sets(file: &CodebookFile) -> Result<(), Error> {
    for set in &file.other_class_sets {
        validate_classes(set)?;
        if set.len() != file.classes.len() {
            return Err(invalid(
                "other_class_sets",
                format!("every class set needs {} classes", file.classes.len()),
            ));
        }
    }
    Ok(())
}

/// A learned codebook's budget, codeword cap and pair weight (all three or none).
pub(super) fn learned_of(
    file: &CodebookFile,
    assignment: Assignment,
) -> Result<Option<Learned>, Error> {
    match (file.budget, file.max_codewords, file.pair_weight) {
        (None, None, None) => Ok(None),
        (Some(budget), Some(max_codewords), Some(pair_weight)) => {
            if !(budget.is_finite() && budget >= 0.0) {
                return Err(invalid(
                    "budget",
                    format!("must be finite and >= 0, got {budget}"),
                ));
            }
            if max_codewords == 0 || file.codewords.len() > max_codewords {
                return Err(invalid(
                    "max_codewords",
                    format!(
                        "{max_codewords} does not admit {} codewords",
                        file.codewords.len()
                    ),
                ));
            }
            Ok(Some(Learned {
                budget,
                max_codewords,
                pair_weight,
                assignment,
            }))
        }
        _ => Err(invalid(
            "budget",
            "a learned codebook records budget, max_codewords and pair_weight together".to_string(),
        )),
    }
}
