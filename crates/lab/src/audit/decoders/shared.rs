//! The shared mechanism scorer: one linear score per mechanism, fitted on pairwise
//! score differences, one connected component of mechanisms at a time.

use std::collections::BTreeMap;

use ndarray::{Array1, Array2};

use super::super::group::Group;
use super::super::logistic;

/// Shared mechanism scorer: one linear score per mechanism over `[context, release]`,
/// fitted on pairwise score differences with L2 logistic loss and no intercept
/// (paper D.4). The objective separates over connected components of the
/// "appears in the same hypothesis pair" graph, so each component is fitted alone.
/// `zt`/`zp` are the standardized `[context, release]` rows of `train`/`targets`.
pub(super) fn shared_scorer(
    group: &Group,
    zt: &Array2<f64>,
    zp: &Array2<f64>,
    c: f64,
    train: &[usize],
    y: &Array1<f64>,
    targets: &[usize],
) -> Vec<f64> {
    let dz = zt.ncols() + 1;
    // weights[s] = (w_s, b_s) flattened, zero for mechanisms never seen.
    let mut weights = Array2::<f64>::zeros((group.mechanisms.len(), dz));
    for members in components(group, train).values() {
        let component = Component {
            group,
            members,
            zt,
            train,
        };
        component.fit(y, c, &mut weights);
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

/// The mechanisms seen in training, grouped (union-find) into the connected components of
/// the "appears in the same hypothesis pair" graph, keyed by their smallest member.
fn components(group: &Group, train: &[usize]) -> BTreeMap<usize, Vec<usize>> {
    let m = group.mechanisms.len();
    let mut parent: Vec<usize> = (0..m).collect();
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
    components
}

/// The root of `a` in the union-find forest `parent` (halving the path on the way).
fn find(parent: &mut [usize], mut a: usize) -> usize {
    while parent[a] != a {
        parent[a] = parent[parent[a]];
        a = parent[a];
    }
    a
}

/// One connected component of mechanisms and the training rows it is fitted on.
struct Component<'a> {
    group: &'a Group,
    /// The component's mechanisms, ascending.
    members: &'a [usize],
    /// Standardized `[context, release]` rows of `train`.
    zt: &'a Array2<f64>,
    train: &'a [usize],
}

// === impl Component ===

impl Component<'_> {
    /// Fits the component's scores on its training pairs and writes them into `weights`.
    fn fit(&self, y: &Array1<f64>, c: f64, weights: &mut Array2<f64>) {
        let dz = self.zt.ncols() + 1;
        let local: BTreeMap<usize, usize> = self
            .members
            .iter()
            .enumerate()
            .map(|(l, &s)| (s, l))
            .collect();
        let rows: Vec<usize> = (0..self.train.len())
            .filter(|&r| local.contains_key(&self.group.rows[self.train[r]].lo))
            .collect();
        let mut x = Array2::<f64>::zeros((rows.len(), self.members.len() * dz));
        for (ri, &r) in rows.iter().enumerate() {
            let row = &self.group.rows[self.train[r]];
            let (lo, hi) = (local[&row.lo], local[&row.hi]);
            for j in 0..dz {
                let v = if j + 1 == dz { 1.0 } else { self.zt[[r, j]] };
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
        for (l, &s) in self.members.iter().enumerate() {
            for j in 0..dz {
                weights[[s, j]] = model.weights[l * dz + j];
            }
        }
    }
}
