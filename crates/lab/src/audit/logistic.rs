//! L2-regularized logistic regression fitted by damped Newton (IRLS).
//!
//! Objective: `sum_i logloss(y_i, sigmoid(x_i . w + b)) + ||w||^2 / (2 C)`, with the
//! intercept `b` unpenalized. When there are more columns than rows the Newton
//! system is solved in row space (Woodbury identity with the intercept eliminated
//! through its Schur complement), so wide interaction feature maps stay cheap.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis, Slice};

/// A fitted logistic model: `P(y = 1 | x) = sigmoid(x . weights + intercept)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// One weight per column.
    pub weights: Array1<f64>,
    /// The unpenalized intercept (0 when fitted without one).
    pub intercept: f64,
}

/// Column standardization fitted on training rows (population standard deviation;
/// constant columns keep scale 1 so they are only centred).
#[derive(Debug, Clone, PartialEq)]
pub struct Standardizer {
    /// Column means.
    pub mean: Array1<f64>,
    /// Column scales (never zero).
    pub scale: Array1<f64>,
}

/// Fit options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Inverse regularization strength `C` (> 0).
    pub c: f64,
    /// Whether to fit an unpenalized intercept.
    pub intercept: bool,
    /// Newton iteration cap.
    pub max_iter: usize,
    /// Stop when the largest absolute Newton step falls below this.
    pub tol: f64,
}

const MIN_CURVATURE: f64 = 1e-12;

// === impl Model ===

impl Model {
    /// The linear score `x . w + b` for every row.
    pub fn decision(&self, x: ArrayView2<'_, f64>) -> Array1<f64> {
        let mut z = x.dot(&self.weights);
        z.mapv_inplace(|v| v + self.intercept);
        z
    }

    /// `P(y = 1)` for every row.
    pub fn predict(&self, x: ArrayView2<'_, f64>) -> Array1<f64> {
        self.decision(x).mapv(sigmoid)
    }
}

// === impl Standardizer ===

impl Standardizer {
    /// Fits means and scales on `x` (all rows are training rows).
    pub fn fit(x: ArrayView2<'_, f64>) -> Standardizer {
        let n = x.nrows().max(1) as f64;
        let mean = x.sum_axis(Axis(0)) / n;
        let mut scale = Array1::zeros(x.ncols());
        for (j, col) in x.axis_iter(Axis(1)).enumerate() {
            let m = mean[j];
            let var = col.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n;
            let sd = var.sqrt();
            scale[j] = if sd.is_finite() && sd > 1e-12 {
                sd
            } else {
                1.0
            };
        }
        Standardizer { mean, scale }
    }

    /// Applies the fitted transform to any rows.
    pub fn transform(&self, x: ArrayView2<'_, f64>) -> Array2<f64> {
        let mut out = x.to_owned();
        for mut row in out.axis_iter_mut(Axis(0)) {
            for ((v, m), s) in row.iter_mut().zip(self.mean.iter()).zip(self.scale.iter()) {
                *v = (*v - m) / s;
            }
        }
        out
    }
}

// === impl Options ===

impl Options {
    /// Defaults used by the audit: intercept on, 100 iterations, step tolerance 1e-10.
    pub fn with_c(c: f64) -> Options {
        Options {
            c,
            intercept: true,
            max_iter: 100,
            tol: 1e-10,
        }
    }
}

/// Numerically stable logistic function.
pub fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// `log(1 + exp(z))` without overflow.
pub fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

/// The penalized objective at `(w, b)`.
pub fn objective(x: ArrayView2<'_, f64>, y: ArrayView1<'_, f64>, model: &Model, c: f64) -> f64 {
    let z = model.decision(x);
    let data: f64 = z
        .iter()
        .zip(y.iter())
        .map(|(&zi, &yi)| softplus(zi) - yi * zi)
        .sum();
    data + model.weights.dot(&model.weights) / (2.0 * c)
}

/// The gradient of [`objective`]: weights first, then the intercept.
#[cfg(test)]
pub(crate) fn gradient(
    x: ArrayView2<'_, f64>,
    y: ArrayView1<'_, f64>,
    model: &Model,
    c: f64,
) -> (Array1<f64>, f64) {
    let p = model.predict(x);
    let r = &p - &y;
    let gw = x.t().dot(&r) + &model.weights / c;
    (gw, r.sum())
}

/// Fits the model. Labels must be 0 or 1 (any real in [0, 1] works as a soft label).
/// `init` warm-starts Newton (e.g. from the fit at a neighbouring `C`).
/// Non-finite or non-positive `C` is treated as 1. Never panics; on a numerically
/// singular system it returns the best iterate found so far.
pub fn fit(
    x: ArrayView2<'_, f64>,
    y: ArrayView1<'_, f64>,
    options: Options,
    init: Option<&Model>,
) -> Model {
    fit_with_gram(x, y, options, init, None)
}

/// [`fit`] with an optional precomputed `X X'` (used only when there are more
/// columns than rows), so fits along a `C` grid share it.
pub fn fit_with_gram(
    x: ArrayView2<'_, f64>,
    y: ArrayView1<'_, f64>,
    options: Options,
    init: Option<&Model>,
    gram: Option<&Array2<f64>>,
) -> Model {
    let (n, d) = x.dim();
    let c = if options.c.is_finite() && options.c > 0.0 {
        options.c
    } else {
        1.0
    };
    let mut model = initial_model(init, d, options.intercept);
    if n == 0 {
        return model;
    }
    let dual = d > n;
    let owned_gram;
    let gram = match (dual, gram) {
        (false, _) => None,
        (true, Some(g)) if g.dim() == (n, n) => Some(g),
        (true, _) => {
            owned_gram = x.dot(&x.t());
            Some(&owned_gram)
        }
    };
    let mut obj = objective(x, y, &model, c);
    for _ in 0..options.max_iter {
        let z = model.decision(x);
        let p = z.mapv(sigmoid);
        let s = p.mapv(|v| (v * (1.0 - v)).max(MIN_CURVATURE));
        let r = &p - &y;
        let gw = x.t().dot(&r) + &model.weights / c;
        let gb = if options.intercept { r.sum() } else { 0.0 };
        let step = match gram {
            Some(k) => newton_step_dual(x, k, &s, &gw, gb, c, options.intercept),
            None => newton_step_primal(x, &s, &gw, gb, c, options.intercept),
        };
        let Some((dw, db)) = step else { break };
        let max_step = dw.iter().fold(db.abs(), |m, v| m.max(v.abs()));
        if !max_step.is_finite() {
            break;
        }
        let Some((cand, cand_obj, t)) = backtrack(x, y, &model, (&dw, db), c, obj) else {
            break;
        };
        model = cand;
        obj = cand_obj;
        if max_step * t < options.tol {
            break;
        }
    }
    model
}

/// The warm start `init` when it has `d` weights, else zeros; no intercept unless fitted.
fn initial_model(init: Option<&Model>, d: usize, intercept: bool) -> Model {
    let mut model = match init {
        Some(m) if m.weights.len() == d => m.clone(),
        _ => Model {
            weights: Array1::zeros(d),
            intercept: 0.0,
        },
    };
    if !intercept {
        model.intercept = 0.0;
    }
    model
}

/// Backtracking along the Newton step `(dw, db)`: halves the step (at most 30 times) until
/// the objective does not increase; the accepted model, its objective and the step size.
fn backtrack(
    x: ArrayView2<'_, f64>,
    y: ArrayView1<'_, f64>,
    model: &Model,
    (dw, db): (&Array1<f64>, f64),
    c: f64,
    obj: f64,
) -> Option<(Model, f64, f64)> {
    let mut t = 1.0;
    for _ in 0..30 {
        let cand = Model {
            weights: &model.weights - &(dw * t),
            intercept: model.intercept - db * t,
        };
        let cand_obj = objective(x, y, &cand, c);
        if cand_obj.is_finite() && cand_obj <= obj + 1e-12 * obj.abs().max(1.0) {
            return Some((cand, cand_obj, t));
        }
        t *= 0.5;
    }
    None
}

/// Newton direction (to be subtracted) from the explicit `d x d` Hessian.
fn newton_step_primal(
    x: ArrayView2<'_, f64>,
    s: &Array1<f64>,
    gw: &Array1<f64>,
    gb: f64,
    c: f64,
    intercept: bool,
) -> Option<(Array1<f64>, f64)> {
    let d = x.ncols();
    let dim = if intercept { d + 1 } else { d };
    let mut xs = x.to_owned();
    for (mut row, &si) in xs.axis_iter_mut(Axis(0)).zip(s.iter()) {
        row.mapv_inplace(|v| v * si);
    }
    let xtsx = x.t().dot(&xs);
    let mut h = Array2::<f64>::zeros((dim, dim));
    h.slice_axis_mut(Axis(0), Slice::from(..d))
        .slice_axis_mut(Axis(1), Slice::from(..d))
        .assign(&xtsx);
    for j in 0..d {
        h[[j, j]] += 1.0 / c + 1e-10;
    }
    let mut g = Array1::<f64>::zeros(dim);
    g.slice_axis_mut(Axis(0), Slice::from(..d)).assign(gw);
    if intercept {
        let col = xs.sum_axis(Axis(0));
        for j in 0..d {
            h[[j, d]] = col[j];
            h[[d, j]] = col[j];
        }
        h[[d, d]] = s.sum() + 1e-10;
        g[d] = gb;
    }
    let l = cholesky(&h)?;
    let sol = cholesky_solve(&l, &g);
    let dw = sol.slice_axis(Axis(0), Slice::from(..d)).to_owned();
    let db = if intercept { sol[d] } else { 0.0 };
    Some((dw, db))
}

/// Newton direction in row space: `A = X' S X + I / C` is inverted through
/// `A^-1 v = C v - C^2 X' S^1/2 (I + C S^1/2 K S^1/2)^-1 S^1/2 X v` with `K = X X'`,
/// and the intercept is eliminated through its Schur complement.
fn newton_step_dual(
    x: ArrayView2<'_, f64>,
    gram: &Array2<f64>,
    s: &Array1<f64>,
    gw: &Array1<f64>,
    gb: f64,
    c: f64,
    intercept: bool,
) -> Option<(Array1<f64>, f64)> {
    let n = x.nrows();
    let sq = s.mapv(f64::sqrt);
    let mut b = Array2::<f64>::zeros((n, n));
    for i in 0..n {
        for j in 0..n {
            b[[i, j]] = c * sq[i] * gram[[i, j]] * sq[j];
        }
        b[[i, i]] += 1.0;
    }
    let l = cholesky(&b)?;
    let apply_inv = |v: &Array1<f64>| -> Array1<f64> {
        let xv = x.dot(v);
        let rhs = &xv * &sq;
        let sol = cholesky_solve(&l, &rhs);
        let back = x.t().dot(&(&sol * &sq));
        v * c - back * (c * c)
    };
    let u1 = apply_inv(gw);
    if !intercept {
        return Some((u1, 0.0));
    }
    let xts = x.t().dot(s);
    let u2 = apply_inv(&xts);
    let schur = s.sum() - xts.dot(&u2);
    if !(schur.is_finite() && schur > 0.0) {
        return None;
    }
    let db = (gb - xts.dot(&u1)) / schur;
    let dw = &u1 - &(&u2 * db);
    Some((dw, db))
}

/// Lower-triangular Cholesky factor of a symmetric positive definite matrix,
/// or `None` when a pivot is not positive (numerically singular or indefinite).
pub fn cholesky(a: &Array2<f64>) -> Option<Array2<f64>> {
    let n = a.nrows();
    if a.ncols() != n {
        return None;
    }
    let src: Vec<f64> = a.iter().copied().collect();
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let (done, rest) = l.split_at_mut(j * n);
        let row_j = &mut rest[..n];
        // Row j of L: entries k < j, then the pivot.
        for k in 0..j {
            let row_k = &done[k * n..k * n + k];
            let dot: f64 = row_k.iter().zip(&row_j[..k]).map(|(a, b)| a * b).sum();
            row_j[k] = (src[j * n + k] - dot) / done[k * n + k];
        }
        let diag = src[j * n + j] - row_j[..j].iter().map(|v| v * v).sum::<f64>();
        if !(diag.is_finite() && diag > 0.0) {
            return None;
        }
        row_j[j] = diag.sqrt();
    }
    Array2::from_shape_vec((n, n), l).ok()
}

/// Solves `L L' x = b` given the Cholesky factor `L`.
pub fn cholesky_solve(l: &Array2<f64>, b: &Array1<f64>) -> Array1<f64> {
    let n = l.nrows();
    let flat: Vec<f64>;
    let lf: &[f64] = match l.as_slice() {
        Some(s) => s,
        None => {
            flat = l.iter().copied().collect();
            &flat
        }
    };
    let mut y = vec![0.0; n];
    for i in 0..n {
        let row = &lf[i * n..i * n + i];
        let dot: f64 = row.iter().zip(&y[..i]).map(|(a, b)| a * b).sum();
        y[i] = (b[i] - dot) / lf[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let mut v = y[i];
        for k in (i + 1)..n {
            v -= lf[k * n + i] * x[k];
        }
        x[i] = v / lf[i * n + i];
    }
    Array1::from(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;
    use releasegate_core::rng::Rng;

    fn random_problem(n: usize, d: usize, seed: u64) -> (Array2<f64>, Array1<f64>) {
        let mut rng = Rng::new(seed);
        let x = Array2::from_shape_fn((n, d), |_| rng.normal());
        let y = Array1::from_shape_fn(n, |i| {
            let z: f64 = x
                .row(i)
                .iter()
                .enumerate()
                .map(|(j, v)| v * (j as f64 - 1.0))
                .sum();
            if rng.uniform() < sigmoid(z + 0.3) {
                1.0
            } else {
                0.0
            }
        });
        (x, y)
    }

    #[test]
    fn gradient_vanishes_at_optimum_primal_and_dual() {
        for &(n, d) in &[(60, 4), (20, 45)] {
            let (x, y) = random_problem(n, d, 7);
            for &c in &[0.1, 1.0, 10.0] {
                let m = fit(x.view(), y.view(), Options::with_c(c), None);
                let (gw, gb) = gradient(x.view(), y.view(), &m, c);
                let gmax = gw.iter().fold(gb.abs(), |a, v| a.max(v.abs()));
                assert!(gmax < 1e-6, "n={n} d={d} c={c} grad={gmax}");
            }
        }
    }

    #[test]
    fn primal_and_dual_agree() {
        let (x, y) = random_problem(30, 30, 3);
        let primal = fit(x.view(), y.view(), Options::with_c(1.0), None);
        // 31 columns > 30 rows switches to the dual path; a zero column changes nothing.
        let mut wide = Array2::zeros((30, 31));
        wide.slice_axis_mut(Axis(1), Slice::from(..30)).assign(&x);
        let dual = fit(wide.view(), y.view(), Options::with_c(1.0), None);
        for j in 0..30 {
            assert!((primal.weights[j] - dual.weights[j]).abs() < 1e-7);
        }
        assert!(dual.weights[30].abs() < 1e-12);
        assert!((primal.intercept - dual.intercept).abs() < 1e-7);
    }

    #[test]
    fn known_solution_one_feature() {
        // Symmetric data: x = -1 -> y = 0 and x = 1 -> y = 1, each once.
        // Intercept is 0 by symmetry; w solves 2 (sigmoid(w) - 1) * 1 ... i.e.
        // d/dw [2 softplus(-w)] + w / C = 0  ->  -2 sigmoid(-w) + w / C = 0.
        let x = array![[-1.0], [1.0]];
        let y = array![0.0, 1.0];
        let m = fit(x.view(), y.view(), Options::with_c(1.0), None);
        let w = m.weights[0];
        assert!(m.intercept.abs() < 1e-9);
        assert!((-2.0 * sigmoid(-w) + w).abs() < 1e-9, "w={w}");
        // Root of 2 sigmoid(-w) = w is about 0.674832.
        assert!((w - 0.674_832).abs() < 1e-5, "w={w}");
    }

    #[test]
    fn single_class_and_degenerate_inputs_do_not_panic() {
        let x = Array2::from_elem((5, 2), 1.0);
        let y = Array1::from_elem(5, 1.0);
        let m = fit(x.view(), y.view(), Options::with_c(1.0), None);
        assert!(
            m.predict(x.view())
                .iter()
                .all(|p| p.is_finite() && *p > 0.5)
        );
        let empty = Array2::<f64>::zeros((0, 3));
        let m = fit(
            empty.view(),
            Array1::zeros(0).view(),
            Options::with_c(f64::NAN),
            None,
        );
        assert_eq!(m.weights.len(), 3);
    }

    #[test]
    fn sigmoid_is_stable() {
        assert_eq!(sigmoid(1000.0), 1.0);
        assert_eq!(sigmoid(-1000.0), 0.0);
        assert!((softplus(-1000.0)).abs() < 1e-300);
        assert!((softplus(1000.0) - 1000.0).abs() < 1e-9);
    }
}
