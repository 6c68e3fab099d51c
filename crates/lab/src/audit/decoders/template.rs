//! The shrinkage-template decoder: Gaussian templates per mechanism, scored by their
//! log densities.

use std::collections::BTreeMap;

use ndarray::{Array1, Array2};

use super::super::group::Group;
use super::super::logistic;
use super::{
    FULL_COVARIANCE_DIAGONAL_SHRINKAGE, MAX_FULL_TEMPLATE_DIM, TEMPLATE_RIDGE, TemplateConfig,
};

/// Shrinkage-template decoder: a mean per mechanism (shrunk toward its coarse
/// class mean) and a covariance shared within the coarse class; each hypothesis
/// is scored by its Gaussian log density and `q = sigmoid(score_hi - score_lo)`.
/// Covariances exist only for classes seen in training (plus an all-class pool
/// for unseen ones); above [`MAX_FULL_TEMPLATE_DIM`] columns the full
/// configuration uses the diagonal covariance.
/// `rt`/`rp` are the standardized `[T one-hot, release]` rows of `train`/`targets`.
pub(super) fn template(
    group: &Group,
    rt: &Array2<f64>,
    rp: &Array2<f64>,
    config: TemplateConfig,
    train: &[usize],
    targets: &[usize],
) -> Vec<f64> {
    let d = rt.ncols();
    let full = config == TemplateConfig::Full2 && d <= MAX_FULL_TEMPLATE_DIM;
    let means = Means::fit(group, rt, train, config.mean_shrinkage());
    let precision = precisions(scatter(group, rt, train, &means, full), full, d);
    targets
        .iter()
        .enumerate()
        .map(|(ti, &i)| {
            let row = &group.rows[i];
            let Some(prec) = precision
                .get(&row.t_index)
                .or_else(|| precision.get(&usize::MAX))
            else {
                return 0.5;
            };
            let x = rp.row(ti);
            let dist = |mu: &Array1<f64>| prec.distance(&(&x - mu));
            let score = 0.5
                * (dist(&means.template(row.lo, row.t_index))
                    - dist(&means.template(row.hi, row.t_index)));
            logistic::sigmoid(score)
        })
        .collect()
}

/// The secret mechanism of row `i`.
fn secret(group: &Group, i: usize) -> usize {
    let row = &group.rows[i];
    if row.y >= 0.5 { row.hi } else { row.lo }
}

/// The training means: per secret mechanism (with its count and class) and per class.
struct Means {
    /// Mean, count and authorized class of each mechanism seen as the secret.
    mechanism: BTreeMap<usize, (Array1<f64>, f64, usize)>,
    /// Mean of each authorized class.
    class: BTreeMap<usize, Array1<f64>>,
    /// Mean shrinkage κ.
    kappa: f64,
    /// Columns.
    d: usize,
}

// === impl Means ===

impl Means {
    /// The means of the training rows `rt` (rows of `train`).
    fn fit(group: &Group, rt: &Array2<f64>, train: &[usize], kappa: f64) -> Means {
        let d = rt.ncols();
        let mut mech_sum: BTreeMap<usize, (Array1<f64>, f64, usize)> = BTreeMap::new();
        let mut class_sum: BTreeMap<usize, (Array1<f64>, f64)> = BTreeMap::new();
        for (r, &i) in train.iter().enumerate() {
            let t = group.rows[i].t_index;
            let e = mech_sum
                .entry(secret(group, i))
                .or_insert_with(|| (Array1::zeros(d), 0.0, t));
            e.0.scaled_add(1.0, &rt.row(r));
            e.1 += 1.0;
            let c = class_sum
                .entry(t)
                .or_insert_with(|| (Array1::zeros(d), 0.0));
            c.0.scaled_add(1.0, &rt.row(r));
            c.1 += 1.0;
        }
        Means {
            mechanism: mech_sum
                .into_iter()
                .map(|(s, (sum, n, t))| (s, (sum / n, n, t)))
                .collect(),
            class: class_sum
                .into_iter()
                .map(|(t, (sum, n))| (t, sum / n))
                .collect(),
            kappa,
            d,
        }
    }

    /// The template of mechanism `s` for a row of class `t`: its mean shrunk toward its
    /// class mean, or the class mean when it was never the secret.
    fn template(&self, s: usize, t: usize) -> Array1<f64> {
        let kappa = self.kappa;
        let (class, own) = match self.mechanism.get(&s) {
            Some((mu, n, c)) => (*c, Some((mu, *n))),
            None => (t, None),
        };
        let cm = self.class.get(&class);
        match (own, cm) {
            (Some((mu, n)), Some(cm)) if kappa > 0.0 => (mu * n + cm * kappa) / (n + kappa),
            (Some((mu, _)), _) => mu.clone(),
            (None, Some(cm)) => cm.clone(),
            (None, None) => Array1::zeros(self.d),
        }
    }
}

/// Pooled within-mechanism scatter and row count per seen class (key `usize::MAX`: all
/// classes); a `d × d` matrix when `full`, else the squared deviations as one row.
fn scatter(
    group: &Group,
    rt: &Array2<f64>,
    train: &[usize],
    means: &Means,
    full: bool,
) -> BTreeMap<usize, (Array2<f64>, f64)> {
    let d = rt.ncols();
    let mut scatter: BTreeMap<usize, (Array2<f64>, f64)> = BTreeMap::new();
    let shape = if full { (d, d) } else { (1, d) };
    for (r, &i) in train.iter().enumerate() {
        let Some((mu, _, _)) = means.mechanism.get(&secret(group, i)) else {
            continue;
        };
        let dev = &rt.row(r) - mu;
        for key in [group.rows[i].t_index, usize::MAX] {
            let entry = scatter
                .entry(key)
                .or_insert_with(|| (Array2::zeros(shape), 0.0));
            if full {
                for a in 0..d {
                    if dev[a] != 0.0 {
                        entry.0.row_mut(a).scaled_add(dev[a], &dev);
                    }
                }
            } else {
                for a in 0..d {
                    entry.0[[0, a]] += dev[a] * dev[a];
                }
            }
            entry.1 += 1.0;
        }
    }
    scatter
}

/// Precision (full) or inverse variances (diagonal) per scatter key; a full covariance
/// whose Cholesky factor does not exist is left out.
fn precisions(
    scatter: BTreeMap<usize, (Array2<f64>, f64)>,
    full: bool,
    d: usize,
) -> BTreeMap<usize, Precision> {
    scatter
        .into_iter()
        .filter_map(|(key, (sc, n))| {
            let cov = sc / n.max(1.0);
            if !full {
                return Some((
                    key,
                    Precision::Diagonal(cov.row(0).mapv(|v| 1.0 / (v + TEMPLATE_RIDGE))),
                ));
            }
            let diag = Array2::from_diag(&cov.diag().to_owned());
            let mut cov = cov * (1.0 - FULL_COVARIANCE_DIAGONAL_SHRINKAGE)
                + diag * FULL_COVARIANCE_DIAGONAL_SHRINKAGE;
            for j in 0..d {
                cov[[j, j]] += TEMPLATE_RIDGE;
            }
            let l = logistic::cholesky(&cov)?;
            Some((key, Precision::Cholesky(l)))
        })
        .collect()
}

/// A template covariance in the form used for scoring.
enum Precision {
    /// Inverse variances.
    Diagonal(Array1<f64>),
    /// Cholesky factor of the covariance.
    Cholesky(Array2<f64>),
}

// === impl Precision ===

impl Precision {
    /// The squared Mahalanobis length of `dev`.
    fn distance(&self, dev: &Array1<f64>) -> f64 {
        match self {
            Precision::Diagonal(inv) => dev
                .iter()
                .zip(inv.iter())
                .map(|(v, w)| v * v * w)
                .sum::<f64>(),
            Precision::Cholesky(l) => {
                let sol = logistic::cholesky_solve(l, dev);
                dev.dot(&sol)
            }
        }
    }
}
