//! Thin wrappers over the core's private parsers for the fuzz targets in `fuzz/`
//! (feature `fuzzing`, never enabled by a build that serves): not an API.

use crate::wire::Json;

/// The JSON reader's own one-pass reading alone: `None` where [`Json::parse`] asks
/// serde_json instead (the fuzz target holds every `Some` to serde_json's reading).
pub fn read_own(bytes: &[u8]) -> Option<Json<'_>> {
    crate::wire::json::read::document(bytes)
}
