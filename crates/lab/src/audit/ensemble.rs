//! Grouped out-of-fold fitting, ensemble candidates (equal-weight and the
//! constrained OOF stack) and validation-only strategy selection.

use serde::Serialize;

use super::Split;
use super::decoders::{self, Family, Spec, ViewFeatures};
use super::group::Group;
use super::representation::FieldSet;

/// Shrinkage strengths of the stacking weights toward equal weighting (paper eq. 7).
pub const STACK_LAMBDAS: [f64; 2] = [0.01, 0.1];
/// Probabilities are clipped to `[LOSS_EPS, 1 - LOSS_EPS]` inside log losses.
pub const LOSS_EPS: f64 = 1e-15;
/// Log-loss differences up to this are ties in selection.
pub const LOSS_TIE: f64 = 1e-12;

/// Predictions of every base configuration of one subview.
#[derive(Debug, Clone, PartialEq)]
pub struct SubviewFit {
    /// The subview.
    pub fields: FieldSet,
    /// Library configurations, in candidate order.
    pub specs: Vec<Spec>,
    /// `preds[spec][row]`: canonical `q`; out-of-fold for training rows, from the
    /// full-training fit for every other row.
    pub preds: Vec<Vec<f64>>,
}

/// What a candidate strategy is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// A single base configuration.
    Base {
        /// Its family.
        family: Family,
    },
    /// Equal-weight average of each family's OOF winner.
    EqualFamilyWinners,
    /// Equal-weight average of all base configurations of the subview.
    EqualAll,
    /// Constrained OOF stack with shrinkage `lambda`.
    Stack {
        /// Shrinkage toward equal weights.
        lambda: f64,
    },
}

/// One candidate strategy with its predictions on every row.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderCandidate {
    /// Name, e.g. `full/template_residual_diag_k2` or `full/stack_0.1`.
    pub name: String,
    /// The subview it reads.
    pub fields: FieldSet,
    /// Kind of strategy.
    pub kind: Kind,
    /// Members with weights (a base candidate has itself with weight 1).
    pub members: Vec<(String, f64)>,
    /// Canonical `q` per row.
    pub preds: Vec<f64>,
}

/// Accuracy and log loss of a prediction vector on some rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Score {
    /// Correct predictions.
    pub correct: usize,
    /// Rows scored.
    pub n: usize,
    /// Mean log loss.
    pub log_loss: f64,
}

// === impl Score ===

impl Score {
    /// Accuracy (0 when empty).
    pub fn accuracy(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.correct as f64 / self.n as f64
        }
    }

    /// Whether `self` beats `other`: more correct, then lower log loss (log losses
    /// within [`LOSS_TIE`] count as equal, so rounding noise never decides).
    /// Both must be on the same rows.
    pub fn beats(&self, other: &Score) -> bool {
        self.correct > other.correct
            || (self.correct == other.correct && self.log_loss < other.log_loss - LOSS_TIE)
    }
}

/// Canonical decision: `hi` when `q > 0.5`; an exact tie goes to the
/// lexicographically smaller mechanism name (`lo`), never to a position.
pub fn predicts_hi(q: f64) -> bool {
    q > 0.5
}

/// Log loss of a canonical prediction against the canonical label.
pub fn log_loss(q: f64, y: f64) -> f64 {
    let q = if q.is_finite() {
        q.clamp(LOSS_EPS, 1.0 - LOSS_EPS)
    } else {
        0.5
    };
    -(y * q.ln() + (1.0 - y) * (1.0 - q).ln())
}

/// Scores `preds` on `rows` of `group`.
pub fn score(group: &Group, preds: &[f64], rows: &[usize]) -> Score {
    let mut correct = 0;
    let mut loss = 0.0;
    for &i in rows {
        let q = preds.get(i).copied().unwrap_or(0.5);
        let y = group.rows[i].y;
        if predicts_hi(q) == (y >= 0.5) {
            correct += 1;
        }
        loss += log_loss(q, y);
    }
    Score {
        correct,
        n: rows.len(),
        log_loss: if rows.is_empty() {
            0.0
        } else {
            loss / rows.len() as f64
        },
    }
}

/// Fits the whole library on one subview: `n_folds` grouped OOF fits on the
/// training split, then one fit on the complete training split for all other rows.
pub fn fit_subview(group: &Group, fields: FieldSet, n_folds: usize) -> SubviewFit {
    let features = ViewFeatures::build(group, fields);
    let specs = Spec::library(fields);
    let n = group.rows.len();
    let mut preds = vec![vec![0.5; n]; specs.len()];
    let train = group.original_rows(Split::Train);
    let folds = group.folds(n_folds);
    let n_folds_used = folds.iter().copied().max().map_or(0, |m| m + 1);
    for f in 0..n_folds_used {
        let fit_rows: Vec<usize> = train
            .iter()
            .zip(&folds)
            .filter(|(_, fo)| **fo != f)
            .map(|(i, _)| *i)
            .collect();
        let held: Vec<usize> = train
            .iter()
            .zip(&folds)
            .filter(|(_, fo)| **fo == f)
            .map(|(i, _)| *i)
            .collect();
        if held.is_empty() || fit_rows.is_empty() {
            continue;
        }
        let out = decoders::fit_predict(group, &features, &specs, &fit_rows, &held);
        for (s, q) in out.into_iter().enumerate() {
            for (j, &i) in held.iter().enumerate() {
                preds[s][i] = q[j];
            }
        }
    }
    let others: Vec<usize> = (0..n)
        .filter(|&i| group.rows[i].swapped_copy || group.rows[i].split != Split::Train)
        .collect();
    let out = decoders::fit_predict(group, &features, &specs, &train, &others);
    for (s, q) in out.into_iter().enumerate() {
        for (j, &i) in others.iter().enumerate() {
            preds[s][i] = q[j];
        }
    }
    SubviewFit {
        fields,
        specs,
        preds,
    }
}

/// All candidates of one subview in the fixed order: base configurations in
/// library order, equal-weight family winners, equal-weight all, stacks.
pub fn candidates(group: &Group, fit: &SubviewFit) -> Vec<DecoderCandidate> {
    let view = fit.fields.name();
    let train = group.original_rows(Split::Train);
    let mut out = Vec::new();
    for (spec, preds) in fit.specs.iter().zip(&fit.preds) {
        out.push(DecoderCandidate {
            name: format!("{view}/{}", spec.name()),
            fields: fit.fields,
            kind: Kind::Base {
                family: spec.family(),
            },
            members: vec![(spec.name(), 1.0)],
            preds: preds.clone(),
        });
    }
    if fit.specs.is_empty() {
        return out;
    }
    let winners = family_winners(group, fit, &train);
    out.push(weighted(
        group,
        fit,
        "equal_family_winners",
        Kind::EqualFamilyWinners,
        &equal(&winners),
    ));
    let all: Vec<usize> = (0..fit.specs.len()).collect();
    out.push(weighted(
        group,
        fit,
        "equal_all",
        Kind::EqualAll,
        &equal(&all),
    ));
    let labels: Vec<f64> = train.iter().map(|&i| group.rows[i].y).collect();
    let oof: Vec<Vec<f64>> = fit
        .preds
        .iter()
        .map(|p| train.iter().map(|&i| p[i]).collect())
        .collect();
    for lambda in STACK_LAMBDAS {
        let weights = stack_weights(&oof, &labels, lambda);
        let w: Vec<(usize, f64)> = weights.into_iter().enumerate().collect();
        out.push(weighted(
            group,
            fit,
            &format!("stack_{lambda}"),
            Kind::Stack { lambda },
            &w,
        ));
    }
    out
}

/// Each family's best base decoder by OOF accuracy, then OOF log loss, then library order.
fn family_winners(group: &Group, fit: &SubviewFit, train: &[usize]) -> Vec<usize> {
    let mut winners: Vec<usize> = Vec::new();
    for family in [
        Family::Prior,
        Family::Logistic,
        Family::Shared,
        Family::Template,
    ] {
        let mut best: Option<(usize, Score)> = None;
        for (s, spec) in fit.specs.iter().enumerate() {
            if spec.family() != family {
                continue;
            }
            let sc = score(group, &fit.preds[s], train);
            if best.as_ref().is_none_or(|(_, b)| sc.beats(b)) {
                best = Some((s, sc));
            }
        }
        if let Some((s, _)) = best {
            winners.push(s);
        }
    }
    winners
}

/// Equal weights over `members`.
fn equal(members: &[usize]) -> Vec<(usize, f64)> {
    let w = 1.0 / members.len().max(1) as f64;
    members.iter().map(|&s| (s, w)).collect()
}

/// The ensemble `suffix` of the subview: the weighted sum of its base decoders' predictions.
fn weighted(
    group: &Group,
    fit: &SubviewFit,
    suffix: &str,
    kind: Kind,
    weights: &[(usize, f64)],
) -> DecoderCandidate {
    let preds = (0..group.rows.len())
        .map(|i| {
            weights
                .iter()
                .map(|&(s, w)| w * fit.preds[s][i])
                .sum::<f64>()
        })
        .collect();
    DecoderCandidate {
        name: format!("{}/{suffix}", fit.fields.name()),
        fields: fit.fields,
        kind,
        members: weights
            .iter()
            .map(|&(s, w)| (fit.specs[s].name(), w))
            .collect(),
        preds,
    }
}

/// Simplex weights minimizing `-(1/n) sum_i log(sum_m w_m q_im(y_i)) + lambda sum_m (w_m - 1/M)^2`
/// (paper eq. 7) by projected gradient descent with backtracking, from equal weights.
pub fn stack_weights(oof: &[Vec<f64>], labels: &[f64], lambda: f64) -> Vec<f64> {
    let m = oof.len();
    if m == 0 {
        return Vec::new();
    }
    let stack = Stack::new(oof, labels, lambda);
    let mut w = vec![stack.target; m];
    let mut obj = stack.objective(&w);
    let mut step = 1.0;
    for _ in 0..500 {
        let grad = stack.gradient(&w);
        let mut improved = false;
        for _ in 0..40 {
            let cand: Vec<f64> = project_simplex(
                &w.iter()
                    .zip(&grad)
                    .map(|(a, g)| a - step * g)
                    .collect::<Vec<_>>(),
            );
            let cand_obj = stack.objective(&cand);
            if cand_obj < obj - 1e-15 {
                let change = cand
                    .iter()
                    .zip(&w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                w = cand;
                obj = cand_obj;
                improved = change > 1e-12;
                step *= 2.0;
                break;
            }
            step *= 0.5;
        }
        if !improved {
            break;
        }
    }
    w
}

/// The stacking objective: mean log loss of the weighted mixture plus `lambda` times the
/// squared distance of the weights from equal weights.
struct Stack {
    /// `lik[i][k]`: the probability model k assigns to world i's observed label.
    lik: Vec<Vec<f64>>,
    /// Worlds (at least 1, as a divisor).
    nn: f64,
    lambda: f64,
    /// Equal weight `1 / m`.
    target: f64,
}

// === impl Stack ===

impl Stack {
    /// The objective of `oof` predictions (one vector per model) against `labels`.
    fn new(oof: &[Vec<f64>], labels: &[f64], lambda: f64) -> Stack {
        let n = labels.len();
        let lik: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                oof.iter()
                    .map(|q| {
                        let qi = q.get(i).copied().unwrap_or(0.5);
                        let p = if labels[i] >= 0.5 { qi } else { 1.0 - qi };
                        p.clamp(LOSS_EPS, 1.0)
                    })
                    .collect()
            })
            .collect();
        Stack {
            lik,
            nn: n.max(1) as f64,
            lambda,
            target: 1.0 / oof.len() as f64,
        }
    }

    /// The mixture's probability of one world's label.
    fn mix(w: &[f64], row: &[f64]) -> f64 {
        w.iter()
            .zip(row)
            .map(|(a, b)| a * b)
            .sum::<f64>()
            .max(LOSS_EPS)
    }

    /// The objective at weights `w`.
    fn objective(&self, w: &[f64]) -> f64 {
        let loss: f64 = self.lik.iter().map(|row| -Stack::mix(w, row).ln()).sum();
        loss / self.nn
            + self.lambda
                * w.iter()
                    .map(|v| (v - self.target) * (v - self.target))
                    .sum::<f64>()
    }

    /// The objective's gradient at weights `w`.
    fn gradient(&self, w: &[f64]) -> Vec<f64> {
        let mut grad = vec![0.0; w.len()];
        for row in &self.lik {
            let total = Stack::mix(w, row);
            for (g, l) in grad.iter_mut().zip(row) {
                *g -= l / total;
            }
        }
        for (g, wk) in grad.iter_mut().zip(w) {
            *g = *g / self.nn + 2.0 * self.lambda * (wk - self.target);
        }
        grad
    }
}

/// Euclidean projection onto the probability simplex.
pub fn project_simplex(v: &[f64]) -> Vec<f64> {
    let m = v.len();
    if m == 0 {
        return Vec::new();
    }
    let clean: Vec<f64> = v
        .iter()
        .map(|x| if x.is_finite() { *x } else { 0.0 })
        .collect();
    let mut sorted = clean.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut cumulative = 0.0;
    let mut theta = 0.0;
    for (j, &u) in sorted.iter().enumerate() {
        cumulative += u;
        let t = (cumulative - 1.0) / (j + 1) as f64;
        if u - t > 0.0 {
            theta = t;
        }
    }
    clean.iter().map(|x| (x - theta).max(0.0)).collect()
}

/// Index of the validation winner among `candidates`: most correct, then lowest
/// log loss, then the earliest in the fixed order. `None` when empty.
pub fn select(group: &Group, candidates: &[DecoderCandidate]) -> Option<(usize, Score)> {
    let validation = group.original_rows(Split::Validation);
    let mut best: Option<(usize, Score)> = None;
    for (c, cand) in candidates.iter().enumerate() {
        let sc = score(group, &cand.preds, &validation);
        if best.as_ref().is_none_or(|(_, b)| sc.beats(b)) {
            best = Some((c, sc));
        }
    }
    best
}
