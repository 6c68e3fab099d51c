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

use super::{
    Asked, AskedQuestion, Json, RequestError, check_body, json, json_invalid, with_content,
};
use crate::contract::Contract;

/// A request read from its bytes and checked as [`check_sent`](super::check_sent) reads and checks it,
/// against the `questions` values its room (`room`: its recipient) sent before and the
/// contract passed ([`KnownRooms`]): a request whose `questions` value is byte for byte
/// one of them is not read or checked again, and one that passes is kept for the room.
/// A request without a room is read and checked whole, and nothing of it is kept.
/// Like the real API (FastAPI), a body that is not JSON is a `json_invalid` schema issue.
pub fn check_bytes(
    bytes: &[u8],
    contract: &Contract,
    room: Option<&str>,
) -> Result<Asked, RequestError> {
    let kept = room.map_or_else(|| Arc::from([]), |room| contract.known_questions.sets(room));
    let known: Vec<&[u8]> = kept.iter().map(|set| set.bytes()).collect();
    let (body, state, questions) = Json::parse_request(bytes, &known).map_err(|error| {
        let reason = error.to_string();
        // serde_json appends " at line L column C"; the location goes into `loc`.
        let reason = reason.split(" at line ").next().unwrap_or("invalid JSON");
        RequestError::Schema(vec![json_invalid(
            bytes,
            error.line(),
            error.column(),
            reason,
        )])
    })?;
    let (found, read) = match questions {
        Some(json::QuestionsAt::Known(index)) => (kept.get(index).map(|set| &**set), None),
        Some(json::QuestionsAt::Read(span)) => (None, bytes.get(span)),
        None => (None, None),
    };
    let checked = check_body(&body, contract, found)?;
    if let (Some(read), Some(room)) = (read, room) {
        contract.known_questions.keep(
            room,
            KnownQuestions {
                bytes: read.into(),
                questions: checked.questions.clone(),
                upstream_questions: checked.upstream_questions.clone(),
            },
        );
    }
    Ok(with_content(checked, &body, state))
}

/// Question sets a room keeps (the oldest is replaced first).
pub(super) const ROOM_SETS: usize = 4;

/// The largest `questions` value kept, in bytes.
pub(super) const MAX_KEPT_BYTES: usize = 8 * 1024;

/// One `questions` value a contract passed, and what checking it gave.
#[derive(Debug)]
pub struct KnownQuestions {
    pub(super) bytes: Box<[u8]>,
    pub(super) questions: Arc<[AskedQuestion]>,
    pub(super) upstream_questions: super::UpstreamQuestions,
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
    /// Keyed by recipient names (from the configuration, never from a request's
    /// content), so a fast hash without a random key serves.
    rooms: Mutex<HashMap<String, Room, foldhash::fast::FixedState>>,
}

/// A room's sets, and the place the next one takes once it is full.
struct Room {
    sets: Arc<[Arc<KnownQuestions>]>,
    next: usize,
}

impl Default for Room {
    fn default() -> Room {
        Room {
            sets: Arc::from([]),
            next: 0,
        }
    }
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
    /// The sets `room` keeps now: a snapshot, shared with the room until it keeps
    /// another (a request reads it with one reference count, not a copy of the list).
    pub fn sets(&self, room: &str) -> Arc<[Arc<KnownQuestions>]> {
        let rooms = self
            .rooms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        rooms
            .get(room)
            .map_or_else(|| Arc::from([]), |room| room.sets.clone())
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
        let mut sets = room.sets.to_vec();
        let set = Arc::new(set);
        if sets.len() < ROOM_SETS {
            sets.push(set);
        } else {
            sets[room.next] = set;
            room.next = (room.next + 1) % ROOM_SETS;
        }
        room.sets = sets.into();
    }
}

#[cfg(test)]
mod tests;
