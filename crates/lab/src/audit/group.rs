//! One (release, domain) audit group: validated, canonicalized rows, the
//! hypothesis dictionaries, grouped folds and the content key used to share
//! identical subview fits between releases.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::representation::FieldSet;
use super::{Error, Example, JointPart, ReleasedFeatures, Split};

/// Largest accepted class count.
pub const MAX_CLASSES: usize = 255;

/// One canonicalized world (or an appended hypothesis-swapped test copy).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Index of the source example in the caller's release list.
    pub source: usize,
    /// Whether this row is the hypothesis-swapped copy used by the equivariance check.
    pub swapped_copy: bool,
    /// Split of the world.
    pub split: Split,
    /// Pair identifier (grouping only, never a feature).
    pub pair_id: String,
    /// Mechanism id of the lexicographically smaller hypothesis.
    pub lo: usize,
    /// Mechanism id of the larger hypothesis.
    pub hi: usize,
    /// Id of the (lo, hi) hypothesis pair.
    pub hyp_pair: usize,
    /// Whether the caller listed the hypotheses as (hi, lo).
    pub reversed: bool,
    /// Canonical label: 1 when `hi` is the secret.
    pub y: f64,
    /// Authorized class index.
    pub t_index: usize,
    /// Public features (non-finite values replaced by 0, padded to the group width).
    pub public: Vec<f64>,
    /// Released fields with non-finite numbers treated as missing.
    pub release: ReleasedFeatures,
}

/// All rows of one (release, domain) group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Release name.
    pub release: String,
    /// Domain name.
    pub domain: String,
    /// Rows: the caller's worlds in input order, then swapped test copies.
    pub rows: Vec<Row>,
    /// Class slots (largest class count in the group).
    pub class_count: usize,
    /// Public feature width (largest in the group).
    pub public_width: usize,
    /// Sorted mechanism names.
    pub mechanisms: Vec<String>,
    /// Sorted (lo, hi) hypothesis pairs.
    pub pairs: Vec<(usize, usize)>,
    /// Fields present in at least one world of the group.
    pub fields: FieldSet,
}

// === impl Row ===

impl Row {
    /// Maps a canonical `q = P(hi is S)` to `P(hypothesis index 1 is S)` in the caller's order.
    pub fn to_caller(&self, q: f64) -> f64 {
        if self.reversed { 1.0 - q } else { q }
    }
}

// === impl Group ===

impl Group {
    /// Validates and canonicalizes `examples` (caller index, example) of one group.
    pub fn prepare(
        release: &str,
        domain: &str,
        examples: &[(usize, &Example)],
    ) -> Result<Group, Error> {
        let first_shape: Vec<usize> = examples
            .first()
            .map(|(_, first)| joint_shape(first))
            .unwrap_or_default();
        let mut class_count = 0;
        let mut public_width = 0;
        let mut names = BTreeSet::new();
        for &(index, ex) in examples {
            check_example(ex, &first_shape).map_err(|reason| Error::InvalidExample {
                release: release.to_string(),
                index,
                reason: reason.to_string(),
            })?;
            class_count = class_count.max(ex.class_count);
            public_width = public_width.max(ex.public.len());
            names.insert(ex.hypotheses[0].clone());
            names.insert(ex.hypotheses[1].clone());
        }
        let mechanisms: Vec<String> = names.into_iter().collect();
        let mut rows: Vec<Row> = examples
            .iter()
            .map(|&(index, ex)| canonical_row(index, ex, &mechanisms, public_width))
            .collect();
        let pairs: Vec<(usize, usize)> = rows
            .iter()
            .map(|row| (row.lo, row.hi))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for row in &mut rows {
            row.hyp_pair = pairs.binary_search(&(row.lo, row.hi)).unwrap_or(0);
        }
        let copies = swapped_test_copies(&rows);
        rows.extend(copies);
        let fields = FieldSet::observed(examples.iter().map(|(_, ex)| *ex));
        let group = Group {
            release: release.to_string(),
            domain: domain.to_string(),
            rows,
            class_count,
            public_width,
            mechanisms,
            pairs,
            fields,
        };
        group.check_splits()?;
        Ok(group)
    }

    /// Every split holds at least one of the caller's rows, and training spans two pairs.
    fn check_splits(&self) -> Result<(), Error> {
        for split in [Split::Train, Split::Validation, Split::Test] {
            if self.original_rows(split).is_empty() {
                return Err(Error::EmptySplit {
                    release: self.release.clone(),
                    domain: self.domain.clone(),
                    split,
                });
            }
        }
        let train_pairs: BTreeSet<&str> = self
            .original_rows(Split::Train)
            .iter()
            .map(|&i| self.rows[i].pair_id.as_str())
            .collect();
        if train_pairs.len() < 2 {
            return Err(Error::TooFewTrainingPairs {
                release: self.release.clone(),
                domain: self.domain.clone(),
            });
        }
        Ok(())
    }

    /// Indices of the caller's rows (not swapped copies) in `split`.
    pub fn original_rows(&self, split: Split) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| !self.rows[i].swapped_copy && self.rows[i].split == split)
            .collect()
    }

    /// Indices of the swapped test copies, aligned with `original_rows(Split::Test)`.
    pub fn swapped_rows(&self) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| self.rows[i].swapped_copy)
            .collect()
    }

    /// Grouped fold of every training row (aligned with `original_rows(Split::Train)`).
    /// Pairs are ordered by the SHA-256 of their id and dealt round-robin, so both
    /// worlds of a pair share a fold and the assignment ignores input order.
    pub fn folds(&self, n_folds: usize) -> Vec<usize> {
        let train = self.original_rows(Split::Train);
        let mut keyed: Vec<([u8; 32], &str)> = train
            .iter()
            .map(|&i| self.rows[i].pair_id.as_str())
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .map(|p| (Sha256::digest(p.as_bytes()).into(), p))
            .collect();
        keyed.sort();
        let n_folds = n_folds.clamp(2, keyed.len().max(2));
        let fold_of: BTreeMap<&str, usize> = keyed
            .iter()
            .enumerate()
            .map(|(r, (_, p))| (*p, r % n_folds))
            .collect();
        train
            .iter()
            .map(|&i| {
                fold_of
                    .get(self.rows[i].pair_id.as_str())
                    .copied()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Content key of this group's data as seen through `fields`: equal keys give
    /// identical fits, so subviews shared by several releases are fitted once.
    pub fn key(&self, fields: FieldSet, n_folds: usize) -> [u8; 32] {
        let mut h = Sha256::new();
        let mut put = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        put(&(self.class_count as u64).to_le_bytes());
        put(&(self.public_width as u64).to_le_bytes());
        put(&(n_folds as u64).to_le_bytes());
        put(&[
            fields.choice as u8,
            fields.probabilities as u8,
            fields.confidence as u8,
            fields.usage as u8,
        ]);
        for row in &self.rows {
            put(&[row.swapped_copy as u8, row.reversed as u8, row.split as u8]);
            put(row.pair_id.as_bytes());
            put(self
                .mechanisms
                .get(row.lo)
                .map_or(&[][..], |s| s.as_bytes()));
            put(self
                .mechanisms
                .get(row.hi)
                .map_or(&[][..], |s| s.as_bytes()));
            put(&row.y.to_bits().to_le_bytes());
            put(&(row.t_index as u64).to_le_bytes());
            for v in &row.public {
                put(&v.to_bits().to_le_bytes());
            }
            if fields.choice {
                put(&row
                    .release
                    .choice
                    .map_or(u64::MAX, |c| c as u64)
                    .to_le_bytes());
            }
            if fields.probabilities {
                match &row.release.probabilities {
                    None => put(b"none"),
                    Some(p) => {
                        for v in p {
                            put(&v.map_or(u64::MAX, f64::to_bits).to_le_bytes());
                        }
                    }
                }
            }
            if fields.confidence {
                put(&row
                    .release
                    .confidence
                    .map_or(u64::MAX, f64::to_bits)
                    .to_le_bytes());
            }
            if fields.usage {
                let usage = &row.release.usage;
                for count in [usage.input_tokens, usage.output_tokens] {
                    put(&count.map_or(u64::MAX, f64::to_bits).to_le_bytes());
                }
            }
        }
        h.finalize().into()
    }
}

/// The class counts of an example's joint releases, in order.
fn joint_shape(ex: &Example) -> Vec<usize> {
    ex.release.joint.iter().map(|p| p.class_count).collect()
}

/// Why `ex` cannot be audited, if it cannot; `first_shape` is the group's first joint shape.
fn check_example(ex: &Example, first_shape: &[usize]) -> Result<(), &'static str> {
    if ex.class_count < 2 || ex.class_count > MAX_CLASSES {
        return Err("class count must be in 2..=255");
    }
    if ex.t_index >= ex.class_count {
        return Err("authorized class index out of range");
    }
    if ex.release.choice.is_some_and(|c| c >= ex.class_count) {
        return Err("choice out of range");
    }
    if ex
        .release
        .probabilities
        .as_ref()
        .is_some_and(|p| p.len() != ex.class_count)
    {
        return Err("probability vector length differs from class count");
    }
    if !ex.release.joint.iter().all(joint_part_fits) {
        return Err("a joint release does not fit its class count");
    }
    if joint_shape(ex) != first_shape {
        return Err("joint releases differ in number or class count");
    }
    if ex.hypotheses[0] == ex.hypotheses[1] {
        return Err("the two hypotheses are equal");
    }
    match ex.s_index {
        Some(0) | Some(1) => Ok(()),
        Some(_) => Err("secret index must be 0 or 1"),
        None => Err("missing secret label"),
    }
}

/// Whether a joint release's fields fit its own class count.
fn joint_part_fits(part: &JointPart) -> bool {
    (2..=MAX_CLASSES).contains(&part.class_count)
        && part.t_index < part.class_count
        && part.choice.is_none_or(|c| c < part.class_count)
        && part
            .probabilities
            .as_ref()
            .is_none_or(|p| p.len() == part.class_count)
}

/// One validated example as a canonical row (`hyp_pair` still 0).
fn canonical_row(index: usize, ex: &Example, mechanisms: &[String], public_width: usize) -> Row {
    let id = |name: &str| {
        mechanisms
            .binary_search_by(|m| m.as_str().cmp(name))
            .unwrap_or(0)
    };
    let (a, b) = (id(&ex.hypotheses[0]), id(&ex.hypotheses[1]));
    let reversed = a > b;
    let (lo, hi) = if reversed { (b, a) } else { (a, b) };
    let s = ex.s_index.unwrap_or(0);
    let y = if (s == 1) != reversed { 1.0 } else { 0.0 };
    let mut public: Vec<f64> = ex
        .public
        .iter()
        .map(|v| if v.is_finite() { *v } else { 0.0 })
        .collect();
    public.resize(public_width, 0.0);
    Row {
        source: index,
        swapped_copy: false,
        split: ex.split,
        pair_id: ex.pair_id.clone(),
        lo,
        hi,
        hyp_pair: 0,
        reversed,
        y,
        t_index: ex.t_index,
        public,
        release: finite_release(&ex.release),
    }
}

/// The released fields with non-finite numbers treated as missing.
fn finite_release(release: &ReleasedFeatures) -> ReleasedFeatures {
    ReleasedFeatures {
        choice: release.choice,
        probabilities: release.probabilities.as_ref().map(|p| finite_slots(p)),
        confidence: release.confidence.filter(|v| v.is_finite()),
        usage: release.usage.finite(),
        joint: release
            .joint
            .iter()
            .map(|part| JointPart {
                probabilities: part.probabilities.as_ref().map(|p| finite_slots(p)),
                confidence: part.confidence.filter(|v| v.is_finite()),
                usage: part.usage.finite(),
                ..part.clone()
            })
            .collect(),
    }
}

/// A probability vector with non-finite slots treated as missing.
fn finite_slots(p: &[Option<f64>]) -> Vec<Option<f64>> {
    p.iter().map(|v| v.filter(|x| x.is_finite())).collect()
}

/// The hypothesis-swapped copies of the test rows, in row order.
fn swapped_test_copies(rows: &[Row]) -> Vec<Row> {
    rows.iter()
        .filter(|r| r.split == Split::Test)
        .map(|r| Row {
            swapped_copy: true,
            reversed: !r.reversed,
            ..r.clone()
        })
        .collect()
}
