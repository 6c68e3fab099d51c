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
use super::representation::{FieldSet, Representation};

mod features;
mod shared;
mod template;

pub use features::ViewFeatures;
use shared::shared_scorer;
use template::template;

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

    /// How far a mechanism mean is shrunk toward its class mean.
    fn mean_shrinkage(&self) -> f64 {
        match self {
            TemplateConfig::Diagonal0 => 0.0,
            TemplateConfig::Diagonal2 | TemplateConfig::Full2 => 2.0,
        }
    }

    /// Stable name.
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

/// Fits `specs` on `train` rows and predicts `q` for `targets`, one vector per spec.
/// Logistic fits along the C grid are warm-started from the previous C.
pub fn fit_predict(
    group: &Group,
    features: &ViewFeatures,
    specs: &[Spec],
    train: &[usize],
    targets: &[usize],
) -> Vec<Vec<f64>> {
    let mut fitter = Fitter::new(group, features, train, targets);
    specs.iter().map(|spec| fitter.predict(*spec)).collect()
}

/// Standardized `(train rows, target rows)` of one matrix.
type Standardized = (Array2<f64>, Array2<f64>);

/// A standardized logistic map, with X X' when it is wider than tall.
type Prepared = (Array2<f64>, Array2<f64>, Option<Array2<f64>>);

/// The fits of one group's specs on one (train, targets) split, with what the specs share:
/// standardized matrices per logistic map and representation, and warm starts.
struct Fitter<'a> {
    group: &'a Group,
    features: &'a ViewFeatures,
    train: &'a [usize],
    targets: &'a [usize],
    /// Training labels.
    y: Array1<f64>,
    /// The smoothed training frequency of `hi` being the secret.
    prior: f64,
    /// Whether every training label is the same.
    single_class: bool,
    /// The last logistic model per map (quadratic or not), warm-starting the next C.
    warm: BTreeMap<bool, logistic::Model>,
    /// Standardized logistic maps (and X X' when wide), shared along the C grid.
    logistic_inputs: BTreeMap<bool, Prepared>,
    /// Standardized `[context, release]` per representation.
    shared_inputs: BTreeMap<Representation, Standardized>,
    /// Standardized `[T one-hot, release]` per representation.
    template_inputs: BTreeMap<Representation, Standardized>,
}

// === impl Fitter ===

impl<'a> Fitter<'a> {
    /// A fitter with nothing prepared yet.
    fn new(
        group: &'a Group,
        features: &'a ViewFeatures,
        train: &'a [usize],
        targets: &'a [usize],
    ) -> Fitter<'a> {
        let y: Array1<f64> = train.iter().map(|&i| group.rows[i].y).collect();
        let single_class = y.iter().all(|&v| v == y[0]);
        let prior = (y.sum() + 1.0) / (y.len() as f64 + 2.0);
        Fitter {
            group,
            features,
            train,
            targets,
            y,
            prior,
            single_class,
            warm: BTreeMap::new(),
            logistic_inputs: BTreeMap::new(),
            shared_inputs: BTreeMap::new(),
            template_inputs: BTreeMap::new(),
        }
    }

    /// Fits one spec and predicts `q` for the targets.
    fn predict(&mut self, spec: Spec) -> Vec<f64> {
        match spec {
            Spec::Prior => vec![self.prior; self.targets.len()],
            Spec::Logistic { quadratic, c } => {
                if self.single_class || self.train.is_empty() {
                    vec![self.prior; self.targets.len()]
                } else {
                    self.logistic(quadratic, c)
                }
            }
            Spec::Shared { representation, c } => {
                let (features, train, targets) = (self.features, self.train, self.targets);
                let (zt, zp) = self.shared_inputs.entry(representation).or_insert_with(|| {
                    let z_all =
                        concat_columns(&features.context, &features.release_matrix(representation));
                    standardized(&z_all, train, targets)
                });
                shared_scorer(self.group, zt, zp, c, train, &self.y, targets)
            }
            Spec::Template {
                representation,
                config,
            } => {
                let (features, train, targets) = (self.features, self.train, self.targets);
                let (rt, rp) = self
                    .template_inputs
                    .entry(representation)
                    .or_insert_with(|| {
                        let r_all = concat_columns(
                            &features.class_one_hot,
                            &features.release_matrix(representation),
                        );
                        standardized(&r_all, train, targets)
                    });
                template(self.group, rt, rp, config, train, targets)
            }
        }
    }

    /// A logistic fit on the linear or quadratic map, warm-started from the previous C's.
    fn logistic(&mut self, quadratic: bool, c: f64) -> Vec<f64> {
        let (features, train, targets) = (self.features, self.train, self.targets);
        let (xt, xp, gram) = self.logistic_inputs.entry(quadratic).or_insert_with(|| {
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
            self.y.view(),
            logistic::Options::with_c(c),
            self.warm.get(&quadratic),
            gram.as_ref(),
        );
        let q = model.predict(xp.view()).to_vec();
        self.warm.insert(quadratic, model);
        q
    }
}

/// Standardizes on training rows; returns (train rows, target rows).
fn standardized(x: &Array2<f64>, train: &[usize], targets: &[usize]) -> (Array2<f64>, Array2<f64>) {
    let xt = x.select(Axis(0), train);
    let scaler = Standardizer::fit(xt.view());
    let xp = x.select(Axis(0), targets);
    (scaler.transform(xt.view()), scaler.transform(xp.view()))
}

/// The columns of `a` followed by those of `b`.
fn concat_columns(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    let mut out = Array2::<f64>::zeros((a.nrows(), a.ncols() + b.ncols()));
    out.slice_axis_mut(Axis(1), Slice::from(..a.ncols()))
        .assign(a);
    out.slice_axis_mut(Axis(1), Slice::from(a.ncols()..))
        .assign(b);
    out
}
