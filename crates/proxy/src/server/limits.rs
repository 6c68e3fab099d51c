//! Every connection- and request-level limit of a listener in one value, [`Limits`]:
//! those read from `[server]` (fixed at start: a reload that changes them is refused) and
//! the fixed ones. Hyper's connection builder, the plain path
//! (`server::listener::plain`), the middleware and the body reader all read it, so a new
//! limit is one field here plus its enforcement, and the test that lists every field
//! (`tests/api/limits.rs`) fails until it shows where the limit holds on both paths.

use std::time::Duration;

use releasegate_core::config::Server;

/// Most bytes of a request head hyper reads (its `max_buf_size`, which also bounds the
/// connection's read and write buffers). Heads beyond it, or with more than
/// [`MAX_HEADER_FIELDS`] fields, are refused by hyper before any routing; the proxy
/// answers them itself (`listener::Refusal`).
pub const MAX_HEAD_BUFFER_BYTES: usize = 64 * 1024;

/// Most header fields in a request head: hyper's `max_headers`, and the plain path's
/// parser slots (a constant: it sizes an array).
pub const MAX_HEADER_FIELDS: usize = HYPER_DEFAULT_HEADER_FIELDS;

/// Hyper's default `max_headers`: at this count its header slots stay on the stack, so
/// the builder sets `max_headers` only for another count.
pub(super) const HYPER_DEFAULT_HEADER_FIELDS: usize = 100;

/// Most bytes of header fields (names, values and `": "`/CRLF framing) a
/// request may carry; beyond it the proxy answers 431 in its JSON shape.
/// Far larger sections, or more than 100 fields, are refused by hyper itself
/// before any routing, with a bare 431 (see README, Errors).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Most bytes of a head read on the plain path before the connection goes to hyper
/// (which reads up to [`MAX_HEAD_BUFFER_BYTES`] and refuses beyond).
pub(super) const MAX_PLAIN_HEAD: usize = 16 * 1024;

/// Largest declared body served on the plain path; larger ones go to hyper (whose body
/// is read as it arrives, under the body's own deadline and caps).
pub(crate) const MAX_PLAIN_BODY: usize = 256 * 1024;

/// The limits of one listener's connections and requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once (`max_connections`, or `admin_max_connections`; the
    /// public one lowered at start to fit the open-file limit).
    pub max_connections: usize,
    /// Deadline of a request head (from its first byte; from accept on a new connection).
    pub header_read_timeout: Duration,
    /// Deadline of a keep-alive connection waiting for its next request.
    pub idle_timeout: Duration,
    /// Deadline of a whole request body (the handler's body reader, on either path).
    pub body_read_timeout: Duration,
    /// Largest JSON request body (the handler's body reader, on either path).
    pub max_body_bytes: usize,
    /// Most bytes of a request head hyper buffers ([`MAX_HEAD_BUFFER_BYTES`]).
    pub max_head_bytes: usize,
    /// Most header fields in a request head ([`MAX_HEADER_FIELDS`]).
    pub max_header_fields: usize,
    /// Most bytes of header fields the middleware lets through ([`MAX_HEADER_BYTES`]).
    pub max_header_bytes: usize,
    /// Most head bytes the plain path reads before handing the connection to hyper
    /// (`MAX_PLAIN_HEAD`).
    pub max_plain_head: usize,
    /// Largest declared body the plain path serves itself (`MAX_PLAIN_BODY`).
    pub max_plain_body: usize,
}

impl Limits {
    /// The limits `server` sets, with `max_connections` connections at most.
    pub(super) fn new(server: &Server, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            header_read_timeout: server.header_read_timeout(),
            idle_timeout: server.idle_timeout(),
            body_read_timeout: server.body_read_timeout(),
            max_body_bytes: server.max_body_bytes(),
            max_head_bytes: MAX_HEAD_BUFFER_BYTES,
            max_header_fields: MAX_HEADER_FIELDS,
            max_header_bytes: MAX_HEADER_BYTES,
            max_plain_head: MAX_PLAIN_HEAD,
            max_plain_body: MAX_PLAIN_BODY,
        }
    }
}
