//! The checks across the worlds of a file, or of several files read as one: unique world
//! ids, and both worlds of a pair in one split.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Error, Split, World};

/// What must hold across the worlds of a file, or of several files read as one: world ids
/// are unique (`docs/worlds.md`), and both worlds of a pair share a split, so that no pair
/// has one world trained on and the other tested. [`Reader`](super::Reader) checks every
/// world it reads; a caller that parses lines itself
/// ([`Reader::next_line`](super::Reader::next_line), [`World::from_line`]) checks each
/// world with [`Seen::check`], in input order.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every world id read, by the provider that answered it (worlds collected from two
    /// providers for the same requests share their ids), and where.
    ids: HashMap<(Option<String>, String), Place>,
    /// Every pair read (its provider, domain and pair id: the audit groups pairs within a
    /// domain), the split of its first world and where that world was read.
    pairs: HashMap<(Option<String>, String, String), (Split, Place)>,
    /// The file being read, as the caller names it (`None`: a single unnamed input).
    file: Option<Arc<str>>,
    /// The contract's first provider, where the reader knows it: a world naming it and
    /// a world naming no provider are then the same provider's.
    first_provider: Option<String>,
}

/// What [`Seen`] checks of a world.
#[derive(Debug, Clone, Copy)]
pub struct WorldIds<'a> {
    /// The provider that answered it (`None`: the contract's first).
    pub provider: Option<&'a str>,
    pub domain: &'a str,
    pub world_id: &'a str,
    pub pair_id: &'a str,
    pub split: Split,
}

/// Where a world was read.
#[derive(Debug, Clone)]
struct Place {
    file: Option<Arc<str>>,
    line: usize,
}

impl Seen {
    /// The worlds checked from now on are read from the file `name` (several files read as
    /// one): errors then say in which file an earlier world was read.
    pub fn set_file(&mut self, name: impl Into<Arc<str>>) {
        self.file = Some(name.into());
    }

    /// The worlds' contract answers first through `provider`: a world without `provider`
    /// is that provider's (`docs/worlds.md`), so its id and pair are checked against the
    /// worlds naming it. Without it, a world naming no provider and one naming the first
    /// are told apart.
    pub fn set_first_provider(&mut self, provider: impl Into<String>) {
        self.first_provider = Some(provider.into());
    }

    /// Checks `world`, read on `line`, against every world checked before it: its id must be
    /// new among its provider's worlds, and its pair's split must be that of the pair's
    /// first world (a pair within its provider and domain).
    pub fn check(&mut self, world: &World, line: usize) -> Result<(), Error> {
        let ids = WorldIds {
            provider: world.provider.as_deref(),
            domain: &world.domain,
            world_id: &world.world_id,
            pair_id: &world.pair_id,
            split: world.split,
        };
        self.check_ids(line, &ids)
    }

    /// As [`Seen::check`], for a world known by its ids and split.
    pub fn check_ids(&mut self, line: usize, world: &WorldIds<'_>) -> Result<(), Error> {
        let here = Place {
            file: self.file.clone(),
            line,
        };
        // The first provider named is kept as no provider: both are the same provider's.
        let provider = world
            .provider
            .filter(|named| self.first_provider.as_deref() != Some(*named))
            .map(str::to_string);
        let id = (provider.clone(), world.world_id.to_string());
        if let Some(first) = self.ids.get(&id) {
            return Err(Error::DuplicateWorldId {
                line,
                world_id: world.world_id.to_string(),
                first: self.describe(first),
            });
        }
        let pair = (
            provider,
            world.domain.to_string(),
            world.pair_id.to_string(),
        );
        if let Some((first_split, first)) = self.pairs.get(&pair) {
            if *first_split != world.split {
                return Err(Error::PairAcrossSplits {
                    line,
                    pair_id: world.pair_id.to_string(),
                    split: world.split,
                    first_split: *first_split,
                    first: self.describe(first),
                });
            }
        } else {
            self.pairs.insert(pair, (world.split, here.clone()));
        }
        self.ids.insert(id, here);
        Ok(())
    }

    /// `line N`, and `of FILE` when it is not the file being read.
    fn describe(&self, place: &Place) -> String {
        match &place.file {
            Some(file) if place.file != self.file => format!("line {} of {file}", place.line),
            _ => format!("line {}", place.line),
        }
    }
}
