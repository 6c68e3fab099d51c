//! Thin wrappers over the core's private parsers for the fuzz targets in `fuzz/`
//! (feature `fuzzing`, never enabled by a build that serves): not an API.

use crate::wire::Json;

/// The JSON reader's own one-pass reading alone: `None` where [`Json::parse`] asks
/// serde_json instead (the fuzz target holds every `Some` to serde_json's reading).
pub fn read_own(bytes: &[u8]) -> Option<Json<'_>> {
    crate::wire::json::read::document(bytes)
}

/// The arena reader (`Doc::read`) on `bytes`: `None` where it gives up, else its document
/// as a `Value`, and for an object each of its keys with the `Value` of what
/// `Node::member` finds for it (the fuzz target holds both to serde_json's reading).
#[expect(clippy::type_complexity, reason = "a fuzzing wrapper, not an API")]
pub fn read_doc(
    bytes: &[u8],
) -> Option<(serde_json::Value, Vec<(String, Option<serde_json::Value>)>)> {
    use crate::wire::Node;
    use crate::wire::json::{Doc, with_arena};
    with_arena(|arena| {
        let doc = Doc::read(bytes, arena)?;
        let members = match doc {
            Doc::Object(members) => members
                .iter()
                .map(|(key, _)| (key.to_string(), doc.member(key).map(Doc::to_value)))
                .collect(),
            _ => Vec::new(),
        };
        Some((doc.to_value(), members))
    })
}
