//! A caller's question sets checked before: a request whose `questions` are byte for byte
//! a set its room sent and the contract passed is not read or checked again.
//!
//! Checking a request's questions is a pure function of the contract and the bytes of its
//! `questions` value (its ids, types, options and text against the contract's rules;
//! nothing else of the request enters). So a contract keeps, per room (a recipient), the
//! last few `questions` values it passed, with what checking them gave: the questions as
//! asked and their upstream forms. Reading a request looks for those bytes where its
//! `questions` value stands (`Json::parse_request`), and a match stands for that value
//! without reading it. Every other member (`model`, `state`, `assets`, unknown ones) is
//! read and checked as always. Rooms are the recipients': what one recipient sent never
//! changes how fast another's request is read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{AskedQuestion, UpstreamQuestion};

/// Question sets a room keeps (the oldest is replaced first).
pub(super) const ROOM_SETS: usize = 4;

/// The largest `questions` value kept, in bytes.
pub(super) const MAX_KEPT_BYTES: usize = 8 * 1024;

/// One `questions` value a contract passed, and what checking it gave.
#[derive(Debug)]
pub struct KnownQuestions {
    pub(super) bytes: Box<[u8]>,
    pub(super) questions: Vec<AskedQuestion>,
    pub(super) upstream_questions: Vec<(String, Arc<UpstreamQuestion>)>,
}

impl KnownQuestions {
    /// The value's bytes as the request held them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A contract's known question sets, per room. A clone starts empty (a derived contract
/// may check otherwise).
#[derive(Default)]
pub struct KnownRooms {
    rooms: Mutex<HashMap<String, Room>>,
}

/// A room's sets, and the place the next one takes once it is full.
#[derive(Default)]
struct Room {
    sets: Vec<Arc<KnownQuestions>>,
    next: usize,
}

impl Clone for KnownRooms {
    fn clone(&self) -> KnownRooms {
        KnownRooms::default()
    }
}

impl std::fmt::Debug for KnownRooms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KnownRooms")
    }
}

impl KnownRooms {
    /// The sets `room` keeps now.
    pub fn sets(&self, room: &str) -> Vec<Arc<KnownQuestions>> {
        let rooms = self
            .rooms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        rooms
            .get(room)
            .map(|room| room.sets.clone())
            .unwrap_or_default()
    }

    /// Keeps `set` in `room` (replacing the room's oldest when it is full), unless its
    /// bytes are too many or the room holds them already.
    pub(super) fn keep(&self, room: &str, set: KnownQuestions) {
        if set.bytes.len() > MAX_KEPT_BYTES {
            return;
        }
        let mut rooms = self
            .rooms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = rooms.entry(room.to_string()).or_default();
        if room.sets.iter().any(|kept| kept.bytes == set.bytes) {
            return;
        }
        let set = Arc::new(set);
        if room.sets.len() < ROOM_SETS {
            room.sets.push(set);
        } else {
            room.sets[room.next] = set;
            room.next = (room.next + 1) % ROOM_SETS;
        }
    }
}

#[cfg(test)]
mod tests;
