//! Raw (deserialized) workflow configuration of one contract question and its validation.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::cost::{CostBase, DEFAULT_C_CHECK, DEFAULT_C_REVIEW, DEFAULT_C_WRONG, Family, Profile};
use super::posterior::{LogisticModel, Posterior};
use super::{Error, Spec};

/// `[contracts.NAME.questions.Q.workflows]` as written in the config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkflows {
    /// `"tuple-bench"`: the TUPLE-Bench paper's delivery-domain model (all three families, all
    /// six profiles, its costs and 4-class matrix), for replication; then `families`,
    /// `profiles` and `costs` must be left out.
    #[serde(default)]
    pub preset: Option<String>,
    /// Cost base: every key required unless `preset` is given.
    #[serde(default)]
    pub costs: Option<RawCosts>,
    /// Family names; default all three.
    #[serde(default)]
    pub families: Option<Vec<String>>,
    /// Profile names; default all six.
    #[serde(default)]
    pub profiles: Option<Vec<String>>,
    /// `"native"` (default), `{kind = "prior", probabilities = [..]}` or
    /// `{kind = "logistic", model = "PATH"}` (PATH relative to the config's base directory).
    #[serde(default)]
    pub posterior: Option<RawPosterior>,
}

/// The `costs` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCosts {
    /// Default 10.
    #[serde(default)]
    pub c_wrong: Option<f64>,
    /// Default 2.
    #[serde(default)]
    pub c_review: Option<f64>,
    /// Default 0.4.
    #[serde(default)]
    pub c_check: Option<f64>,
    /// `(n+1) x n`; defaults to the authored matrix only for 4 classes.
    #[serde(default)]
    pub matrix: Option<Vec<Vec<f64>>>,
}

/// The `posterior` key: a bare name or a table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawPosterior {
    /// Only `"native"` is accepted.
    Name(String),
    /// `{kind = "prior" | "logistic", ...}`.
    Table(RawPosteriorTable),
}

/// The table form of `posterior`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPosteriorTable {
    /// `native`, `prior` or `logistic`.
    pub kind: String,
    /// Prior vector (kind `prior`).
    #[serde(default)]
    pub probabilities: Option<Vec<f64>>,
    /// Model file path (kind `logistic`).
    #[serde(default)]
    pub model: Option<String>,
}

/// The name of the TUPLE-Bench paper's delivery-domain workflow model.
const TUPLE_BENCH_PRESET: &str = "tuple-bench";

/// Tolerance of the prior's sum.
const PRIOR_SUM_TOLERANCE: f64 = 1e-6;

// === impl Spec (raw config) ===

impl Spec {
    /// Validates a raw workflow config for `classes` (canonical order). A logistic model path is
    /// resolved against `base_dir` and read through `read`. Errors name the config key.
    pub fn from_raw(
        raw: &RawWorkflows,
        classes: &[String],
        base_dir: &Path,
        read: crate::config::ReadFile<'_>,
    ) -> Result<Spec, Error> {
        let n = classes.len();
        match raw.preset.as_deref() {
            Some(TUPLE_BENCH_PRESET) => {
                if raw.costs.is_some() || raw.families.is_some() || raw.profiles.is_some() {
                    return Err(Error::invalid(
                        "preset",
                        "the tuple-bench preset fixes families, profiles and costs: leave them out",
                    ));
                }
                if n != 4 {
                    return Err(Error::invalid(
                        "preset",
                        format!(
                            "the tuple-bench preset is a 4-class model; this question has {n} classes"
                        ),
                    ));
                }
            }
            Some(other) => {
                return Err(Error::invalid(
                    "preset",
                    format!("unknown preset {other:?} (the only one is \"{TUPLE_BENCH_PRESET}\")"),
                ));
            }
            None => {
                let costs = raw.costs.clone().unwrap_or_default();
                let missing: Vec<&str> = [
                    ("families", raw.families.is_none()),
                    ("profiles", raw.profiles.is_none()),
                    ("costs.c_wrong", costs.c_wrong.is_none()),
                    ("costs.c_review", costs.c_review.is_none()),
                    ("costs.c_check", costs.c_check.is_none()),
                    ("costs.matrix", costs.matrix.is_none()),
                ]
                .into_iter()
                .filter_map(|(key, missing)| missing.then_some(key))
                .collect();
                if !missing.is_empty() {
                    return Err(Error::invalid(
                        missing[0],
                        format!(
                            "declare the recipient's own decision rules; missing: {}. Write \
                             families = [\"selective\", \"clarification\", \"asymmetric\"] (those its \
                             workflows use), profiles = [\"authored\", ...] (the cost variants to \
                             guarantee), costs = {{ c_wrong = ..., c_review = ..., c_check = ..., \
                             matrix = [{} rows of {n} costs: one per action, the last is review] }} \
                             (docs/workflows.md); the paper's delivery model is \
                             preset = \"{TUPLE_BENCH_PRESET}\" (4 classes, for replication only)",
                            missing.join(", "),
                            n + 1
                        ),
                    ));
                }
            }
        }
        let costs = raw.costs.clone().unwrap_or_default();
        let scalar = |key: &str, v: Option<f64>, default: f64| -> Result<f64, Error> {
            let v = v.unwrap_or(default);
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(Error::invalid(
                    key,
                    format!("must be a finite non-negative number, got {v}"),
                ))
            }
        };
        let c_wrong = scalar("costs.c_wrong", costs.c_wrong, DEFAULT_C_WRONG)?;
        let c_review = scalar("costs.c_review", costs.c_review, DEFAULT_C_REVIEW)?;
        let c_check = scalar("costs.c_check", costs.c_check, DEFAULT_C_CHECK)?;
        let matrix = match costs.matrix {
            Some(m) => m,
            None if n == 4 => CostBase::authored_4().matrix,
            None => {
                return Err(Error::invalid(
                    "costs.matrix",
                    format!("required for {n} classes (the authored default exists only for 4)"),
                ));
            }
        };
        let base = CostBase {
            c_wrong,
            c_review,
            c_check,
            matrix,
        };
        let families = parse_names(
            "families",
            raw.families.as_deref(),
            &Family::ALL,
            Family::from_name,
        )?;
        let profiles = parse_names(
            "profiles",
            raw.profiles.as_deref(),
            &Profile::ALL,
            Profile::from_name,
        )?;
        let posterior = parse_posterior(raw.posterior.as_ref(), classes, base_dir, read)?;
        Spec::new(classes.to_vec(), base, &families, &profiles, posterior)
    }
}

/// Parses a name list, rejecting unknown and repeated names, and sorts it into the fixed order.
fn parse_names<T: Copy + Ord>(
    key: &str,
    names: Option<&[String]>,
    all: &[T],
    parse: fn(&str) -> Option<T>,
) -> Result<Vec<T>, Error> {
    let Some(names) = names else {
        return Ok(all.to_vec());
    };
    if names.is_empty() {
        return Err(Error::invalid(key, "must not be empty"));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let item = parse(name).ok_or_else(|| {
            Error::invalid(&format!("{key}[{i}]"), format!("unknown name {name:?}"))
        })?;
        if out.contains(&item) {
            return Err(Error::invalid(
                &format!("{key}[{i}]"),
                format!("duplicate name {name:?}"),
            ));
        }
        out.push(item);
    }
    out.sort();
    Ok(out)
}

fn parse_posterior(
    raw: Option<&RawPosterior>,
    classes: &[String],
    base_dir: &Path,
    read: crate::config::ReadFile<'_>,
) -> Result<Posterior, Error> {
    let table = match raw {
        None => return Ok(Posterior::Native),
        Some(RawPosterior::Name(name)) if name == "native" => return Ok(Posterior::Native),
        Some(RawPosterior::Name(name)) => {
            return Err(Error::invalid(
                "posterior",
                format!("unknown posterior {name:?} (expected \"native\" or a table with kind)"),
            ));
        }
        Some(RawPosterior::Table(t)) => t,
    };
    let unexpected = |field: &str| {
        Error::invalid(
            &format!("posterior.{field}"),
            format!("not allowed for kind {:?}", table.kind),
        )
    };
    match table.kind.as_str() {
        "native" => {
            if table.probabilities.is_some() {
                return Err(unexpected("probabilities"));
            }
            if table.model.is_some() {
                return Err(unexpected("model"));
            }
            Ok(Posterior::Native)
        }
        "prior" => {
            if table.model.is_some() {
                return Err(unexpected("model"));
            }
            let key = "posterior.probabilities";
            let p = table
                .probabilities
                .clone()
                .ok_or_else(|| Error::invalid(key, "required for kind \"prior\""))?;
            if p.len() != classes.len() {
                return Err(Error::invalid(
                    key,
                    format!("expected {} values, got {}", classes.len(), p.len()),
                ));
            }
            if let Some(i) = p.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(Error::invalid(
                    &format!("{key}[{i}]"),
                    "must be finite and non-negative",
                ));
            }
            let sum: f64 = p.iter().sum();
            if (sum - 1.0).abs() > PRIOR_SUM_TOLERANCE {
                return Err(Error::invalid(key, format!("must sum to 1, sums to {sum}")));
            }
            Ok(Posterior::Prior(p))
        }
        "logistic" => {
            if table.probabilities.is_some() {
                return Err(unexpected("probabilities"));
            }
            let rel = table.model.as_ref().ok_or_else(|| {
                Error::invalid("posterior.model", "required for kind \"logistic\"")
            })?;
            let path = base_dir.join(rel);
            let model = read_logistic(&path, read)?;
            model.validate(classes).map_err(|m| {
                Error::invalid("posterior.model", format!("{}: {m}", path.display()))
            })?;
            Ok(Posterior::Logistic(Box::new(model)))
        }
        other => Err(Error::invalid(
            "posterior.kind",
            format!("unknown kind {other:?} (expected native, prior or logistic)"),
        )),
    }
}

/// Reads (through `read`) and parses a logistic model file (not validated against classes).
pub fn read_logistic(
    path: &Path,
    read: crate::config::ReadFile<'_>,
) -> Result<LogisticModel, Error> {
    let bytes = read(path).map_err(|source| Error::ModelRead {
        path: PathBuf::from(path),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| Error::ModelParse {
        path: PathBuf::from(path),
        source,
    })
}
