//! The feature matrices of one audit group under one subview: the context, the
//! class one-hot, the release per representation and the logistic maps.

use std::collections::BTreeMap;

use ndarray::{Array2, Axis, Slice};

use super::super::group::Group;
use super::super::representation::{self, FieldSet, Representation};
use super::MAX_QUADRATIC_COLUMNS;

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

    /// The release matrix of `rep` (no columns when the view has none).
    pub(super) fn release_matrix(&self, rep: Representation) -> Array2<f64> {
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
