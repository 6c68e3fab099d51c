//! A rule's WCPQ codewords as released answers: each written and read back from its bytes
//! on its first release, then sent as those bytes.
//!
//! A covered answer is its codeword's candidate (D's choice and field availability with
//! the codeword's values), and its encoding is a pure function of the candidate, the
//! rule's form and the contract's shape. So the first release of a candidate writes it,
//! reads the bytes back as the recipient does, and keeps both: the mapper checks the read
//! back on every request as before, and the same bytes go out. An entry is used only for
//! exactly the candidate and shape it was made for (compared bit for bit); any other
//! candidate of the same codeword (another choice on an argmax tie, another availability)
//! is written afresh and not kept.

use std::sync::OnceLock;

use super::form::Form;
use crate::contract::Shape;
use crate::mechanism::{Mechanism, Released};
use crate::wcpq::{Candidate, Stage, same_bits};
use crate::wire::json::Written;
use crate::wire::{Json, Kind};
use crate::workflow::Release;

/// The places of one stage's codewords, one per codeword index.
type Places = Box<[OnceLock<Option<Box<Entry>>>]>;

/// A rule's kept codeword answers: per stage (compact, strict) one place per codeword,
/// the stage's places made on its first use. A clone starts empty (a derived rule may
/// release differently).
#[derive(Default)]
pub struct Codewords {
    stages: [OnceLock<Places>; 2],
}

impl Clone for Codewords {
    fn clone(&self) -> Codewords {
        Codewords::default()
    }
}

impl std::fmt::Debug for Codewords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codewords")
    }
}

/// One kept codeword answer: what it was made for, and its encoding.
#[derive(Debug)]
pub(super) struct Entry {
    shape: Shape,
    candidate: Release,
    /// The candidate as the release path hands it to the encoder.
    pub(super) released: Released,
    /// The answer object as it goes out.
    pub(super) written: Written,
    /// The bytes read back as the recipient reads them (`Form::read`).
    pub(super) back: Option<Release>,
}

impl Codewords {
    /// Codewords that keep nothing: every candidate is written afresh (what the release
    /// path did before it kept them; the tests' reference).
    #[cfg(test)]
    pub(crate) fn unkept() -> Codewords {
        let none = || OnceLock::from(Places::default());
        Codewords {
            stages: [none(), none()],
        }
    }

    /// The kept answer of `candidate` under `form`, made now if its place is empty;
    /// `None` when it cannot be kept (a question other than a choice question, a
    /// codeword outside the codebook, an answer left out) or its place holds another
    /// candidate's: the caller then writes it afresh.
    pub(super) fn get<'r, 'j>(
        &'r self,
        mechanism: &Mechanism,
        form: &Form<'_>,
        candidate: Candidate<'_>,
        encode: impl FnOnce() -> (Released, Option<Json<'j>>),
    ) -> Option<&'r Entry> {
        if form.question.kind != Kind::Choice {
            return None;
        }
        let count = codeword_count(mechanism, candidate.stage)?;
        let stage = match candidate.stage {
            Stage::Compact => 0,
            Stage::Strict => 1,
        };
        let places = self.stages[stage]
            .get_or_init(|| (0..count).map(|_| OnceLock::new()).collect::<Places>());
        let entry = places
            .get(candidate.index)?
            .get_or_init(|| {
                let (released, value) = encode();
                let written = Written::new(&value?)?;
                let back = Json::parse(written.bytes())
                    .ok()
                    .and_then(|read| form.read(&read));
                Some(Box::new(Entry {
                    shape: form.shape,
                    candidate: candidate.release.clone(),
                    released,
                    written,
                    back,
                }))
            })
            .as_deref()?;
        (entry.shape == form.shape && same_bits(&entry.candidate, candidate.release))
            .then_some(entry)
    }
}

/// How many codewords the stage's codebook of a WCPQ mechanism holds.
fn codeword_count(mechanism: &Mechanism, stage: Stage) -> Option<usize> {
    let Mechanism::Wcpq(wcpq) = mechanism else {
        return None;
    };
    let mapper = &wcpq.mapper;
    let mapper = if mapper.stage() == stage {
        mapper
    } else {
        mapper
            .strict_stage()
            .filter(|strict| strict.stage() == stage)?
    };
    Some(mapper.codebook().codewords().len())
}
