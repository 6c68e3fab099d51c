//! Cost bases, the six cost profiles, the three workflow families and the resolved frozen policies.

use serde::Serialize;

/// Default cost of a wrong route (selective routing and clarification).
pub const DEFAULT_C_WRONG: f64 = 10.0;
/// Default cost of a trusted review.
pub const DEFAULT_C_REVIEW: f64 = 2.0;
/// Default cost of one clarification check.
pub const DEFAULT_C_CHECK: f64 = 0.4;

/// The authored asymmetric matrix for four classes: rows are the four class actions in canonical
/// order, then general inspection; columns are the true class in canonical order.
pub const AUTHORED_MATRIX_4: [[f64; 4]; 5] = [
    [0.0, 4.0, 10.0, 12.0],
    [5.0, 0.0, 9.0, 10.0],
    [8.0, 8.0, 0.0, 6.0],
    [8.0, 6.0, 4.0, 0.0],
    [1.8, 1.8, 1.8, 1.8],
];

/// A question's cost base: scalar costs plus an `(n+1) x n` action-by-true-class matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostBase {
    /// Cost of a wrong final route.
    pub c_wrong: f64,
    /// Cost of a trusted review.
    pub c_review: f64,
    /// Cost of one clarification check.
    pub c_check: f64,
    /// Rows: the n class actions in canonical order, then general inspection. Columns: true class.
    pub matrix: Vec<Vec<f64>>,
}

/// One of the six fixed cost profiles, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The base unchanged.
    Authored,
    /// `c_review` and the inspection row halved.
    ReviewHalf,
    /// `c_review` and the inspection row doubled.
    ReviewDouble,
    /// `c_check` quartered.
    CheckQuarter,
    /// `c_wrong` and every class-action row doubled (inspection row unchanged).
    ErrorDouble,
    /// Column 0 of every class-action row doubled (inspection row unchanged).
    AsymmetricClass0Double,
}

/// One of the three workflow families, in their fixed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Route to a class or pay for trusted review.
    Selective,
    /// Route now or buy one deterministic class check first.
    Clarification,
    /// Pick the action with the least expected cost under the matrix.
    Asymmetric,
}

/// One frozen policy: a family under a profile, with the profile already applied to the base.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    /// The workflow family.
    pub family: Family,
    /// The cost profile.
    pub profile: Profile,
    /// The cost base after applying the profile.
    pub costs: CostBase,
}

// === impl CostBase ===

impl CostBase {
    /// The authored base for four classes (defaults plus [`AUTHORED_MATRIX_4`]).
    pub fn authored_4() -> CostBase {
        CostBase {
            c_wrong: DEFAULT_C_WRONG,
            c_review: DEFAULT_C_REVIEW,
            c_check: DEFAULT_C_CHECK,
            matrix: AUTHORED_MATRIX_4.iter().map(|row| row.to_vec()).collect(),
        }
    }

    /// The number of classes (columns of the matrix).
    pub fn class_count(&self) -> usize {
        self.matrix.first().map_or(0, Vec::len)
    }

    /// Applies a profile. Every factor is a power of two, so the result is exact.
    pub fn apply(&self, profile: Profile) -> CostBase {
        let mut out = self.clone();
        let n_actions = out.matrix.len().saturating_sub(1);
        match profile {
            Profile::Authored => {}
            Profile::ReviewHalf | Profile::ReviewDouble => {
                let factor = if profile == Profile::ReviewHalf {
                    0.5
                } else {
                    2.0
                };
                out.c_review *= factor;
                if let Some(row) = out.matrix.last_mut() {
                    row.iter_mut().for_each(|v| *v *= factor);
                }
            }
            Profile::CheckQuarter => out.c_check *= 0.25,
            Profile::ErrorDouble => {
                out.c_wrong *= 2.0;
                for row in out.matrix.iter_mut().take(n_actions) {
                    row.iter_mut().for_each(|v| *v *= 2.0);
                }
            }
            Profile::AsymmetricClass0Double => {
                for row in out.matrix.iter_mut().take(n_actions) {
                    if let Some(v) = row.first_mut() {
                        *v *= 2.0;
                    }
                }
            }
        }
        out
    }
}

// === impl Profile ===

impl Profile {
    /// All profiles in table order.
    pub const ALL: [Profile; 6] = [
        Profile::Authored,
        Profile::ReviewHalf,
        Profile::ReviewDouble,
        Profile::CheckQuarter,
        Profile::ErrorDouble,
        Profile::AsymmetricClass0Double,
    ];

    /// The config and artifact name, e.g. `review_half`.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Authored => "authored",
            Profile::ReviewHalf => "review_half",
            Profile::ReviewDouble => "review_double",
            Profile::CheckQuarter => "check_quarter",
            Profile::ErrorDouble => "error_double",
            Profile::AsymmetricClass0Double => "asymmetric_class0_double",
        }
    }

    /// Parses a config name.
    pub fn from_name(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == name)
    }
}

// === impl Family ===

impl Family {
    /// All families in their fixed order.
    pub const ALL: [Family; 3] = [Family::Selective, Family::Clarification, Family::Asymmetric];

    /// The config and artifact name, e.g. `clarification`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Selective => "selective",
            Family::Clarification => "clarification",
            Family::Asymmetric => "asymmetric",
        }
    }

    /// Parses a config name.
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }
}
