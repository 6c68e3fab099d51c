//! The base decoder library and the per-view feature matrices it reads.
//!
//! Every decoder works on the canonical hypothesis order (names sorted, `lo`
//! before `hi`) and returns `q = P(hi is the secret)`. Mapping back to the
//! caller's order happens in one place (see `audit::group`), which makes the
//! whole library hypothesis-order equivariant by construction.

use std::collections::BTreeMap;

use ndarray::{Array1, Array2, Axis, Slice};
use serde::Serialize;

use super::group::Group;
use super::logistic::{self, Standardizer};
use super::representation::{self, FieldSet, Representation};

/// Regularization grid for logistic regression and the shared scorer.
pub const C_GRID: [f64; 3] = [0.1, 1.0, 10.0];
/// Quadratic logistic maps are trimmed (pair interactions first, then
/// cross products) to stay at or below this many columns.
pub const MAX_QUADRATIC_COLUMNS: usize = 768;
/// Ridge added to every template covariance (paper D.4).
pub const TEMPLATE_RIDGE: f64 = 0.05;
/// Diagonal shrinkage of the full template covariance (paper D.4).
pub const FULL_COVARIANCE_DIAGONAL_SHRINKAGE: f64 = 0.75;
/// Above this many template columns the full-covariance configuration falls
/// back to the diagonal covariance (keeps huge class counts tractable).
pub const MAX_FULL_TEMPLATE_DIM: usize = 160;

/// Decoder family (used for family-winner ensembles and reporting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Training frequency of the canonical hypothesis index.
    Prior,
    /// Pairwise L2 logistic regression.
    Logistic,
    /// Shared mechanism scorer.
    Shared,
    /// Shrinkage-template decoder.
    Template,
}

/// Covariance / mean-shrinkage configuration of the template decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateConfig {
    /// Diagonal covariance, mean shrinkage 0.
    Diagonal0,
    /// Diagonal covariance, mean shrinkage 2.
    Diagonal2,
    /// Full covariance shrunk 75% toward its diagonal, mean shrinkage 2.
    Full2,
}

/// One base decoder configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    /// Empirical prior.
    Prior,
    /// Logistic regression on the fixed raw feature map.
    Logistic {
        /// Add squares, cross products and class/pair interactions.
        quadratic: bool,
        /// Inverse regularization strength.
        c: f64,
    },
    /// Shared mechanism scorer `u_s(z) = w_s . z + b_s`.
    Shared {
        /// Release representation.
        representation: Representation,
        /// Inverse regularization strength.
        c: f64,
    },
    /// Shrinkage-template decoder.
    Template {
        /// Release representation.
        representation: Representation,
        /// Covariance / shrinkage configuration.
        config: TemplateConfig,
    },
}

/// Feature matrices of one group under one subview (all rows).
#[derive(Debug)]
pub struct ViewFeatures {
    /// Public features followed by the authorized-class one-hot.
    pub context: Array2<f64>,
    /// Authorized-class one-hot alone (template decoders use no public text).
    pub class_one_hot: Array2<f64>,
    /// Release features per representation, with numeric-column flags.
    pub release: BTreeMap<Representation, (Array2<f64>, Vec<bool>)>,
    /// Logistic linear map.
    pub logistic_linear: Array2<f64>,
    /// Logistic quadratic map.
    pub logistic_quadratic: Array2<f64>,
}

// === impl Family ===

impl Family {
    /// Stable name.
    pub fn name(&self) -> &'static str {
        match self {
            Family::Prior => "prior",
            Family::Logistic => "logistic",
            Family::Shared => "shared",
            Family::Template => "template",
        }
    }
}

// === impl TemplateConfig ===

impl TemplateConfig {
    /// All configurations in library order.
    pub const ALL: [TemplateConfig; 3] = [
        TemplateConfig::Diagonal0,
        TemplateConfig::Diagonal2,
        TemplateConfig::Full2,
    ];

    fn mean_shrinkage(&self) -> f64 {
        match self {
            TemplateConfig::Diagonal0 => 0.0,
            TemplateConfig::Diagonal2 | TemplateConfig::Full2 => 2.0,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            TemplateConfig::Diagonal0 => "diag_k0",
            TemplateConfig::Diagonal2 => "diag_k2",
            TemplateConfig::Full2 => "full_k2",
        }
    }
}

// === impl Spec ===

impl Spec {
    /// The family this configuration belongs to.
    pub fn family(&self) -> Family {
        match self {
            Spec::Prior => Family::Prior,
            Spec::Logistic { .. } => Family::Logistic,
            Spec::Shared { .. } => Family::Shared,
            Spec::Template { .. } => Family::Template,
        }
    }

    /// Stable name, e.g. `logistic_quadratic_c1`, `template_residual_full_k2`.
    pub fn name(&self) -> String {
        match self {
            Spec::Prior => "prior".to_string(),
            Spec::Logistic { quadratic, c } => {
                format!(
                    "logistic_{}_c{}",
                    if *quadratic { "quadratic" } else { "linear" },
                    c
                )
            }
            Spec::Shared { representation, c } => {
                format!("shared_{}_c{}", representation.name(), c)
            }
            Spec::Template {
                representation,
                config,
            } => {
                format!("template_{}_{}", representation.name(), config.name())
            }
        }
    }

    /// The library for a view, in the fixed candidate order: prior, logistic
    /// (linear then quadratic, C ascending), shared scorers and templates per
    /// representation. 13 configurations without probabilities, 25 with.
    pub fn library(fields: FieldSet) -> Vec<Spec> {
        let mut out = vec![Spec::Prior];
        for quadratic in [false, true] {
            for c in C_GRID {
                out.push(Spec::Logistic { quadratic, c });
            }
        }
        for representation in fields.representations() {
            for c in C_GRID {
                out.push(Spec::Shared { representation, c });
            }
        }
        for representation in fields.representations() {
            for config in TemplateConfig::ALL {
                out.push(Spec::Template {
                    representation,
                    config,
                });
            }
        }
        out
    }
}

// === impl ViewFeatures ===

impl ViewFeatures {
    /// Builds every matrix for `group` under `fields`.
    pub fn build(group: &Group, fields: FieldSet) -> ViewFeatures {
        let n = group.rows.len();
        let k = group.class_count;
        let dp = group.public_width;
        let mut context = Array2::<f64>::zeros((n, dp + k));
        let mut class_one_hot = Array2::<f64>::zeros((n, k));
        for (i, row) in group.rows.iter().enumerate() {
            for (j, v) in row.public.iter().enumerate() {
                context[[i, j]] = *v;
            }
            if row.t_index < k {
                context[[i, dp + row.t_index]] = 1.0;
                class_one_hot[[i, row.t_index]] = 1.0;
            }
        }
        let mut release = BTreeMap::new();
        for rep in fields.representations() {
            let rows: Vec<representation::Row> = group
                .rows
                .iter()
                .map(|r| representation::release_row(&r.release, r.t_index, k, fields, rep))
                .collect();
            let width = rows.first().map_or(0, |r| r.values.len());
            let numeric = rows.first().map_or_else(Vec::new, |r| r.numeric.clone());
            let mut m = Array2::<f64>::zeros((n, width));
            for (i, r) in rows.iter().enumerate() {
                for (j, v) in r.values.iter().enumerate().take(width) {
                    m[[i, j]] = *v;
                }
            }
            release.insert(rep, (m, numeric));
        }
        let empty = (Array2::<f64>::zeros((n, 0)), Vec::new());
        let raw = release.get(&Representation::Raw).unwrap_or(&empty);
        let logistic_linear = logistic_linear(group, &context, &raw.0);
        let logistic_quadratic = logistic_quadratic(group, &logistic_linear, &raw.0, &raw.1);
        ViewFeatures {
            context,
            class_one_hot,
            release,
            logistic_linear,
            logistic_quadratic,
        }
    }

    fn release_matrix(&self, rep: Representation) -> Array2<f64> {
        match self.release.get(&rep) {
            Some((m, _)) => m.clone(),
            None => Array2::zeros((self.context.nrows(), 0)),
        }
    }
}

/// `[public, T one-hot, lo one-hot, hi one-hot, hypothesis-pair one-hot, raw release]`.
fn logistic_linear(group: &Group, context: &Array2<f64>, raw: &Array2<f64>) -> Array2<f64> {
    let n = group.rows.len();
    let m = group.mechanisms.len();
    let p = group.pairs.len();
    let dc = context.ncols();
    let dr = raw.ncols();
    let mut x = Array2::<f64>::zeros((n, dc + 2 * m + p + dr));
    for (i, row) in group.rows.iter().enumerate() {
        x.row_mut(i)
            .slice_axis_mut(Axis(0), Slice::from(..dc))
            .assign(&context.row(i));
        x[[i, dc + row.lo]] = 1.0;
        x[[i, dc + m + row.hi]] = 1.0;
        x[[i, dc + 2 * m + row.hyp_pair]] = 1.0;
        x.row_mut(i)
            .slice_axis_mut(Axis(0), Slice::from(dc + 2 * m + p..))
            .assign(&raw.row(i));
    }
    x
}

/// Linear map plus squares and cross products of numeric release columns and
/// release-feature interactions with the authorized class and hypothesis pair.
fn logistic_quadratic(
    group: &Group,
    linear: &Array2<f64>,
    raw: &Array2<f64>,
    numeric: &[bool],
) -> Array2<f64> {
    let n = group.rows.len();
    let k = group.class_count;
    let p = group.pairs.len();
    let dr = raw.ncols();
    let numeric_cols: Vec<usize> = (0..dr)
        .filter(|&j| numeric.get(j).copied().unwrap_or(false))
        .collect();
    let squares = numeric_cols.len();
    let all_products = squares * (squares + 1) / 2;
    let base = linear.ncols();
    let mut use_pairs = true;
    let mut use_products = true;
    let width = |pairs: bool, products: bool| {
        base + if products { all_products } else { squares }
            + dr * k
            + if pairs { dr * p } else { 0 }
    };
    if width(use_pairs, use_products) > MAX_QUADRATIC_COLUMNS {
        use_pairs = false;
    }
    if width(use_pairs, use_products) > MAX_QUADRATIC_COLUMNS {
        use_products = false;
    }
    let class_width = if width(use_pairs, use_products) > MAX_QUADRATIC_COLUMNS {
        0
    } else {
        dr * k
    };
    let total = base
        + if use_products { all_products } else { squares }
        + class_width
        + if use_pairs { dr * p } else { 0 };
    let mut x = Array2::<f64>::zeros((n, total));
    x.slice_axis_mut(Axis(1), Slice::from(..base))
        .assign(linear);
    for (i, row) in group.rows.iter().enumerate() {
        let mut col = base;
        for (a, &ja) in numeric_cols.iter().enumerate() {
            for &jb in &numeric_cols[a..] {
                if !use_products && ja != jb {
                    continue;
                }
                x[[i, col]] = raw[[i, ja]] * raw[[i, jb]];
                col += 1;
            }
        }
        if class_width > 0 {
            if row.t_index < k {
                for j in 0..dr {
                    x[[i, col + row.t_index * dr + j]] = raw[[i, j]];
                }
            }
            col += class_width;
        }
        if use_pairs {
            for j in 0..dr {
                x[[i, col + row.hyp_pair * dr + j]] = raw[[i, j]];
            }
        }
    }
    x
}

/// Fits `specs` on `train` rows and predicts `q` for `targets`, one vector per spec.
/// Logistic fits along the C grid are warm-started from the previous C.
pub fn fit_predict(
    group: &Group,
    features: &ViewFeatures,
    specs: &[Spec],
    train: &[usize],
    targets: &[usize],
) -> Vec<Vec<f64>> {
    let y: Array1<f64> = train.iter().map(|&i| group.rows[i].y).collect();
    let single_class = y.iter().all(|&v| v == y[0]);
    let prior = (y.sum() + 1.0) / (y.len() as f64 + 2.0);
    let mut warm: BTreeMap<bool, logistic::Model> = BTreeMap::new();
    // Standardized matrices (and X X' when wide) per logistic map, shared along the C grid.
    type Prepared = (Array2<f64>, Array2<f64>, Option<Array2<f64>>);
    let mut prepared: BTreeMap<bool, Prepared> = BTreeMap::new();
    let mut shared_inputs: BTreeMap<Representation, (Array2<f64>, Array2<f64>)> = BTreeMap::new();
    let mut template_inputs: BTreeMap<Representation, (Array2<f64>, Array2<f64>)> = BTreeMap::new();
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let q = match *spec {
            Spec::Prior => vec![prior; targets.len()],
            Spec::Logistic { quadratic, c } => {
                if single_class || train.is_empty() {
                    vec![prior; targets.len()]
                } else {
                    let (xt, xp, gram) = prepared.entry(quadratic).or_insert_with(|| {
                        let x = if quadratic {
                            &features.logistic_quadratic
                        } else {
                            &features.logistic_linear
                        };
                        let (xt, xp) = standardized(x, train, targets);
                        let gram = (xt.ncols() > xt.nrows()).then(|| xt.dot(&xt.t()));
                        (xt, xp, gram)
                    });
                    let model = logistic::fit_with_gram(
                        xt.view(),
                        y.view(),
                        logistic::Options::with_c(c),
                        warm.get(&quadratic),
                        gram.as_ref(),
                    );
                    let q = model.predict(xp.view()).to_vec();
                    warm.insert(quadratic, model);
                    q
                }
            }
            Spec::Shared { representation, c } => {
                let (zt, zp) = shared_inputs.entry(representation).or_insert_with(|| {
                    let z_all =
                        concat_columns(&features.context, &features.release_matrix(representation));
                    standardized(&z_all, train, targets)
                });
                shared_scorer(group, zt, zp, c, train, &y, targets)
            }
            Spec::Template {
                representation,
                config,
            } => {
                let (rt, rp) = template_inputs.entry(representation).or_insert_with(|| {
                    let r_all = concat_columns(
                        &features.class_one_hot,
                        &features.release_matrix(representation),
                    );
                    standardized(&r_all, train, targets)
                });
                template(group, rt, rp, config, train, targets)
            }
        };
        out.push(q);
    }
    out
}

/// Standardizes on training rows; returns (train rows, target rows).
fn standardized(x: &Array2<f64>, train: &[usize], targets: &[usize]) -> (Array2<f64>, Array2<f64>) {
    let xt = x.select(Axis(0), train);
    let scaler = Standardizer::fit(xt.view());
    let xp = x.select(Axis(0), targets);
    (scaler.transform(xt.view()), scaler.transform(xp.view()))
}

fn concat_columns(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    let mut out = Array2::<f64>::zeros((a.nrows(), a.ncols() + b.ncols()));
    out.slice_axis_mut(Axis(1), Slice::from(..a.ncols()))
        .assign(a);
    out.slice_axis_mut(Axis(1), Slice::from(a.ncols()..))
        .assign(b);
    out
}

/// Shared mechanism scorer: one linear score per mechanism over `[context, release]`,
/// fitted on pairwise score differences with L2 logistic loss and no intercept
/// (paper D.4). The objective separates over connected components of the
/// "appears in the same hypothesis pair" graph, so each component is fitted alone.
/// `zt`/`zp` are the standardized `[context, release]` rows of `train`/`targets`.
fn shared_scorer(
    group: &Group,
    zt: &Array2<f64>,
    zp: &Array2<f64>,
    c: f64,
    train: &[usize],
    y: &Array1<f64>,
    targets: &[usize],
) -> Vec<f64> {
    let dz = zt.ncols() + 1;
    let m = group.mechanisms.len();
    // Union-find over mechanisms seen together in training pairs.
    let mut parent: Vec<usize> = (0..m).collect();
    fn find(parent: &mut [usize], mut a: usize) -> usize {
        while parent[a] != a {
            parent[a] = parent[parent[a]];
            a = parent[a];
        }
        a
    }
    let mut seen = vec![false; m];
    for &i in train {
        let row = &group.rows[i];
        seen[row.lo] = true;
        seen[row.hi] = true;
        let (a, b) = (find(&mut parent, row.lo), find(&mut parent, row.hi));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut components: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (s, _) in seen.iter().enumerate().filter(|(_, seen)| **seen) {
        let r = find(&mut parent, s);
        components.entry(r).or_default().push(s);
    }
    // weights[s] = (w_s, b_s) flattened, zero for mechanisms never seen.
    let mut weights = Array2::<f64>::zeros((m, dz));
    for members in components.values() {
        let local: BTreeMap<usize, usize> =
            members.iter().enumerate().map(|(l, &s)| (s, l)).collect();
        let rows: Vec<usize> = (0..train.len())
            .filter(|&r| local.contains_key(&group.rows[train[r]].lo))
            .collect();
        let mut x = Array2::<f64>::zeros((rows.len(), members.len() * dz));
        for (ri, &r) in rows.iter().enumerate() {
            let row = &group.rows[train[r]];
            let (lo, hi) = (local[&row.lo], local[&row.hi]);
            for j in 0..dz {
                let v = if j + 1 == dz { 1.0 } else { zt[[r, j]] };
                x[[ri, hi * dz + j]] += v;
                x[[ri, lo * dz + j]] -= v;
            }
        }
        let yc: Array1<f64> = rows.iter().map(|&r| y[r]).collect();
        let options = logistic::Options {
            intercept: false,
            ..logistic::Options::with_c(c)
        };
        let model = logistic::fit(x.view(), yc.view(), options, None);
        for (l, &s) in members.iter().enumerate() {
            for j in 0..dz {
                weights[[s, j]] = model.weights[l * dz + j];
            }
        }
    }
    targets
        .iter()
        .enumerate()
        .map(|(ti, &i)| {
            let row = &group.rows[i];
            let mut u = weights[[row.hi, dz - 1]] - weights[[row.lo, dz - 1]];
            for j in 0..dz - 1 {
                u += (weights[[row.hi, j]] - weights[[row.lo, j]]) * zp[[ti, j]];
            }
            logistic::sigmoid(u)
        })
        .collect()
}

/// Shrinkage-template decoder: a mean per mechanism (shrunk toward its coarse
/// class mean) and a covariance shared within the coarse class; each hypothesis
/// is scored by its Gaussian log density and `q = sigmoid(score_hi - score_lo)`.
/// Covariances exist only for classes seen in training (plus an all-class pool
/// for unseen ones); above [`MAX_FULL_TEMPLATE_DIM`] columns the full
/// configuration uses the diagonal covariance.
/// `rt`/`rp` are the standardized `[T one-hot, release]` rows of `train`/`targets`.
fn template(
    group: &Group,
    rt: &Array2<f64>,
    rp: &Array2<f64>,
    config: TemplateConfig,
    train: &[usize],
    targets: &[usize],
) -> Vec<f64> {
    let d = rt.ncols();
    let secret = |i: usize| {
        let row = &group.rows[i];
        if row.y >= 0.5 { row.hi } else { row.lo }
    };
    let full = config == TemplateConfig::Full2 && d <= MAX_FULL_TEMPLATE_DIM;
    // Mechanism and class sums.
    let mut mech_sum: BTreeMap<usize, (Array1<f64>, f64, usize)> = BTreeMap::new();
    let mut class_sum: BTreeMap<usize, (Array1<f64>, f64)> = BTreeMap::new();
    for (r, &i) in train.iter().enumerate() {
        let t = group.rows[i].t_index;
        let e = mech_sum
            .entry(secret(i))
            .or_insert_with(|| (Array1::zeros(d), 0.0, t));
        e.0.scaled_add(1.0, &rt.row(r));
        e.1 += 1.0;
        let c = class_sum
            .entry(t)
            .or_insert_with(|| (Array1::zeros(d), 0.0));
        c.0.scaled_add(1.0, &rt.row(r));
        c.1 += 1.0;
    }
    let mech_mean: BTreeMap<usize, (Array1<f64>, f64, usize)> = mech_sum
        .into_iter()
        .map(|(s, (sum, n, t))| (s, (sum / n, n, t)))
        .collect();
    let class_mean: BTreeMap<usize, Array1<f64>> = class_sum
        .into_iter()
        .map(|(t, (sum, n))| (t, sum / n))
        .collect();
    // Pooled within-mechanism scatter per seen class (key usize::MAX = all classes).
    let mut scatter: BTreeMap<usize, (Array2<f64>, f64)> = BTreeMap::new();
    let shape = if full { (d, d) } else { (1, d) };
    for (r, &i) in train.iter().enumerate() {
        let Some((mu, _, _)) = mech_mean.get(&secret(i)) else {
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
    // Precision (full) or inverse variances (diagonal) per key.
    let precision: BTreeMap<usize, Precision> = scatter
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
        .collect();
    let kappa = config.mean_shrinkage();
    let template_of = |s: usize, t: usize| -> Array1<f64> {
        let (class, own) = match mech_mean.get(&s) {
            Some((mu, n, c)) => (*c, Some((mu, *n))),
            None => (t, None),
        };
        let cm = class_mean.get(&class);
        match (own, cm) {
            (Some((mu, n)), Some(cm)) if kappa > 0.0 => (mu * n + cm * kappa) / (n + kappa),
            (Some((mu, _)), _) => mu.clone(),
            (None, Some(cm)) => cm.clone(),
            (None, None) => Array1::zeros(d),
        }
    };
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
            let dist = |mu: &Array1<f64>| {
                let dev = &x - mu;
                match prec {
                    Precision::Diagonal(inv) => dev
                        .iter()
                        .zip(inv.iter())
                        .map(|(v, w)| v * v * w)
                        .sum::<f64>(),
                    Precision::Cholesky(l) => {
                        let sol = logistic::cholesky_solve(l, &dev);
                        dev.dot(&sol)
                    }
                }
            };
            let score = 0.5
                * (dist(&template_of(row.lo, row.t_index))
                    - dist(&template_of(row.hi, row.t_index)));
            logistic::sigmoid(score)
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
