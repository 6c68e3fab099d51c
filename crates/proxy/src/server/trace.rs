//! W3C Trace Context (`traceparent`, `tracestate`) between callers and providers.
//!
//! The proxy takes part in the trace as one hop: a caller's valid `traceparent` keeps its
//! trace id and flags, and the provider receives it with the proxy's own span id as the
//! parent id; without one (or with an invalid one) the proxy starts a trace. `tracestate`
//! is forwarded unchanged only beside a valid `traceparent` and only if it is well formed
//! and at most 512 bytes (the W3C bound on what a participant must propagate); anything
//! else is dropped. The format is checked strictly: version `00` only, lower-case hex,
//! exactly `00-<32 hex>-<16 hex>-<2 hex>`, trace and parent ids not all zeros, a single
//! header field.

use std::cell::RefCell;
use std::fmt;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use releasegate_core::rng::Rng;

/// The W3C `traceparent` header.
pub(super) const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` header.
pub(super) const TRACESTATE: &str = "tracestate";

/// The two names as header names, made once: a lookup by text parses the name each time.
static TRACEPARENT_NAME: HeaderName = HeaderName::from_static(TRACEPARENT);
static TRACESTATE_NAME: HeaderName = HeaderName::from_static(TRACESTATE);
/// Longest `tracestate` forwarded, in bytes.
pub(super) const MAX_TRACESTATE_BYTES: usize = 512;
/// Most `tracestate` list members (W3C).
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The trace context of one request as the proxy forwards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    /// The caller's span id, when its `traceparent` was accepted.
    parent: Option<[u8; 8]>,
    flags: u8,
    tracestate: Option<HeaderValue>,
}

/// A trace id as 32 lower-case hex digits (for logs).
#[derive(Debug, Clone, Copy)]
pub(super) struct TraceId([u8; 16]);

impl TraceId {
    /// The 32 lower-case hex digits.
    pub(super) fn hex(&self) -> [u8; 32] {
        let mut out = [b'0'; 32];
        // 32 digits for 16 bytes: it cannot fail.
        let _ = hex::encode_to_slice(self.0, &mut out);
        out
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One write of the 32 digits (a formatted write per byte cost a noticeable share of
        // the access line).
        let out = self.hex();
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

thread_local! {
    /// Span and trace ids: a per-thread generator seeded from the OS, so no request takes a
    /// lock or a system call for them.
    static IDS: RefCell<Rng> = RefCell::new(Rng::new(
        releasegate_core::rng::os_seed().unwrap_or_else(|_| fallback_seed())
    ));
}

fn fallback_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    now ^ u64::from(std::process::id()).rotate_left(32)
}

/// Fills `out` with random bytes, never all zeros.
fn random_id(out: &mut [u8]) {
    IDS.with(|ids| {
        let mut ids = ids.borrow_mut();
        loop {
            for chunk in out.chunks_mut(8) {
                let word = ids.next_u64().to_le_bytes();
                chunk.copy_from_slice(&word[..chunk.len()]);
            }
            if out.iter().any(|b| *b != 0) {
                return;
            }
        }
    });
}

// === impl TraceContext ===

impl TraceContext {
    /// The context of a request with `headers`: the caller's trace (if it sent a valid
    /// `traceparent`) continued with a new span id, else a new trace.
    pub(super) fn from_headers(headers: &HeaderMap) -> TraceContext {
        let mut span_id = [0u8; 8];
        random_id(&mut span_id);
        let mut parents = headers.get_all(&TRACEPARENT_NAME).iter();
        let parent = match (parents.next(), parents.next()) {
            (Some(value), None) => parse_traceparent(value.as_bytes()),
            _ => None,
        };
        match parent {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                span_id,
                parent: Some(parent),
                flags,
                tracestate: tracestate(headers),
            },
            None => {
                let mut trace_id = [0u8; 16];
                random_id(&mut trace_id);
                TraceContext {
                    trace_id,
                    span_id,
                    parent: None,
                    flags: 0,
                    tracestate: None,
                }
            }
        }
    }

    /// The trace id (for logs).
    pub(super) fn trace_id(&self) -> TraceId {
        TraceId(self.trace_id)
    }

    /// The ids exported spans use: the trace, the span id the provider receives as its
    /// parent (the upstream call's CLIENT span) and the caller's span.
    pub(super) fn span_ids(&self) -> SpanIds {
        SpanIds {
            trace_id: self.trace_id,
            upstream: self.span_id,
            caller: self.parent,
        }
    }

    /// The `traceparent` the provider receives: `00-<trace id>-<our span id>-<flags>`.
    pub(super) fn traceparent(&self) -> HeaderValue {
        let mut out = *b"00-________________________________-________________-__";
        // Each id fills its slots exactly, so none of these fails.
        let written = hex::encode_to_slice(self.trace_id, &mut out[3..35])
            .and_then(|()| hex::encode_to_slice(self.span_id, &mut out[36..52]))
            .and_then(|()| hex::encode_to_slice([self.flags], &mut out[53..55]));
        if written.is_err() {
            return HeaderValue::from_static("");
        }
        // Only ASCII hex digits and dashes: always a valid header value.
        HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// Replaces the request's trace headers with what the provider may receive: our
    /// `traceparent`, and the caller's `tracestate` only if it is kept.
    pub(super) fn apply(&self, headers: &mut HeaderMap) {
        headers.insert(TRACEPARENT_NAME.clone(), self.traceparent());
        match &self.tracestate {
            Some(value) => {
                headers.insert(TRACESTATE_NAME.clone(), value.clone());
            }
            None => {
                headers.remove(&TRACESTATE_NAME);
            }
        }
    }
}

/// The ids of a request's exported spans (see [`TraceContext::span_ids`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct SpanIds {
    pub(super) trace_id: [u8; 16],
    /// The span id sent to the provider as `traceparent`'s parent id.
    pub(super) upstream: [u8; 8],
    /// The caller's span id, when its `traceparent` was accepted.
    pub(super) caller: Option<[u8; 8]>,
}

/// A fresh random span id, never all zeros.
pub(super) fn new_span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    random_id(&mut id);
    id
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, lower-case, ids not all zeros: the trace id, the
/// caller's span id and the flags.
fn parse_traceparent(text: &[u8]) -> Option<([u8; 16], [u8; 8], u8)> {
    if text.len() != 55 || &text[..3] != b"00-" || text[35] != b'-' || text[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    let mut parent_id = [0u8; 8];
    let mut flags = [0u8; 1];
    hex_into(&text[3..35], &mut trace_id)?;
    hex_into(&text[36..52], &mut parent_id)?;
    hex_into(&text[53..55], &mut flags)?;
    if trace_id.iter().all(|b| *b == 0) || parent_id.iter().all(|b| *b == 0) {
        return None;
    }
    Some((trace_id, parent_id, flags[0]))
}

/// Reads lower-case hex (`traceparent` allows no other) into `out`. Written by hand on
/// purpose: this runs for every request that carries a `traceparent`, and
/// `hex::decode_to_slice` (which also takes upper case, so it would need a scan of its own)
/// costs about twice the instructions: 649 against 304 for a trace id's 32 digits
/// (callgrind, release build).
fn hex_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (pair, byte) in text.chunks_exact(2).zip(out.iter_mut()) {
        *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(())
}

/// The caller's `tracestate` (its fields joined with `,`), if well formed and short enough.
fn tracestate(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut values = headers.get_all(&TRACESTATE_NAME).iter();
    let first = values.next()?;
    let joined = match values.next() {
        None => first.clone(),
        Some(second) => {
            let mut text = Vec::with_capacity(MAX_TRACESTATE_BYTES);
            for value in [first, second].into_iter().chain(values) {
                if !text.is_empty() {
                    text.push(b',');
                }
                text.extend_from_slice(value.as_bytes());
                if text.len() > MAX_TRACESTATE_BYTES {
                    return None;
                }
            }
            HeaderValue::from_bytes(&text).ok()?
        }
    };
    valid_tracestate(joined.as_bytes()).then_some(joined)
}

/// W3C `tracestate`: at most 32 comma-separated `key=value` members (empty members allowed
/// between commas), keys `[a-z0-9][a-z0-9_*/-]{0,255}` or `tenant@system`, values of
/// printable ASCII without `,` and `=`, not ending in a space; at most 512 bytes in all.
fn valid_tracestate(text: &[u8]) -> bool {
    if text.len() > MAX_TRACESTATE_BYTES {
        return false;
    }
    let mut members = 0;
    for member in text.split(|b| *b == b',') {
        let member = member.trim_ascii();
        if member.is_empty() {
            continue;
        }
        members += 1;
        if members > MAX_TRACESTATE_MEMBERS {
            return false;
        }
        let Some(eq) = member.iter().position(|b| *b == b'=') else {
            return false;
        };
        let (key, value) = (&member[..eq], &member[eq + 1..]);
        if !valid_key(key) || !valid_value(value) {
            return false;
        }
    }
    members > 0
}

fn valid_key(key: &[u8]) -> bool {
    let simple = |part: &[u8], first_digit_ok: bool, max: usize| {
        !part.is_empty()
            && part.len() <= max
            && (part[0].is_ascii_lowercase() || (first_digit_ok && part[0].is_ascii_digit()))
            && part[1..].iter().all(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'_' | b'-' | b'*' | b'/')
            })
    };
    match key.iter().position(|b| *b == b'@') {
        None => simple(key, true, 256),
        Some(at) => simple(&key[..at], true, 241) && simple(&key[at + 1..], false, 14),
    }
}

fn valid_value(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && value
            .iter()
            .all(|b| (0x20..=0x7e).contains(b) && *b != b',' && *b != b'=')
        && value.last() != Some(&b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_our_span_id() {
        let context = TraceContext::from_headers(&headers(&[
            (TRACEPARENT, VALID),
            (TRACESTATE, "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"),
        ]));
        let forwarded = context.traceparent();
        let forwarded = forwarded.to_str().unwrap();
        assert_eq!(forwarded.len(), 55);
        assert!(forwarded.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(forwarded.ends_with("-01"));
        assert_ne!(&forwarded[36..52], "00f067aa0ba902b7");
        assert!(parse_traceparent(forwarded.as_bytes()).is_some());
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            context.tracestate.as_ref().unwrap(),
            "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"
        );
    }

    #[test]
    fn invalid_traceparents_start_a_new_trace_and_drop_tracestate() {
        let invalid = [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        ];
        for text in invalid {
            let context = TraceContext::from_headers(&headers(&[
                (TRACEPARENT, text),
                (TRACESTATE, "congo=t61rcWkgMzE"),
            ]));
            assert_ne!(
                context.trace_id().to_string(),
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "{text:?}"
            );
            assert_eq!(context.flags, 0);
            assert_eq!(context.tracestate, None, "{text:?}");
        }
        // Two traceparent fields: invalid.
        let context =
            TraceContext::from_headers(&headers(&[(TRACEPARENT, VALID), (TRACEPARENT, VALID)]));
        assert_ne!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }

    #[test]
    fn a_new_trace_has_random_nonzero_ids() {
        let a = TraceContext::from_headers(&HeaderMap::new());
        let b = TraceContext::from_headers(&HeaderMap::new());
        assert_ne!(a.trace_id, b.trace_id);
        assert_ne!(a.span_id, b.span_id);
        let value = a.traceparent();
        assert!(parse_traceparent(value.as_bytes()).is_some(), "{value:?}");
        assert!(value.to_str().unwrap().ends_with("-00"));
    }

    #[test]
    fn tracestate_is_kept_only_when_well_formed_and_short() {
        let with = |states: &[&str]| {
            let mut pairs = vec![(TRACEPARENT, VALID)];
            pairs.extend(states.iter().map(|s| (TRACESTATE, *s)));
            TraceContext::from_headers(&headers(&pairs)).tracestate
        };
        assert_eq!(with(&["a=1", "b=2"]).unwrap(), "a=1,b=2");
        assert_eq!(with(&["tenant@vendor=x"]).unwrap(), "tenant@vendor=x");
        assert!(with(&["a=1,,b=2"]).is_some());
        let long = format!("a={}", "x".repeat(257));
        for bad in [
            "novalue",
            "A=upper",
            "a=",
            "a=b=c",
            "=x",
            "a@1x=y",
            long.as_str(),
            "",
        ] {
            assert_eq!(with(&[bad]), None, "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(with(&[many.join(",").as_str()]), None);
        let big: Vec<String> = (0..30)
            .map(|i| format!("k{i}={}", "v".repeat(20)))
            .collect();
        assert!(big.join(",").len() > MAX_TRACESTATE_BYTES);
        assert_eq!(with(&[big.join(",").as_str()]), None);
        // Without a traceparent, no tracestate.
        let alone = TraceContext::from_headers(&headers(&[(TRACESTATE, "a=1")]));
        assert_eq!(alone.tracestate, None);
    }

    #[test]
    fn apply_replaces_the_callers_trace_headers() {
        let mut map = headers(&[(TRACEPARENT, "garbage"), (TRACESTATE, "a=1")]);
        let context = TraceContext::from_headers(&map);
        context.apply(&mut map);
        assert_eq!(map.get_all(TRACEPARENT).iter().count(), 1);
        assert_eq!(map[TRACEPARENT], context.traceparent());
        assert!(map.get(TRACESTATE).is_none());
    }
}
