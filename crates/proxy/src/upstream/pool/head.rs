//! An answer's head as the pool reads it: [`parse_head`] parses the status line and
//! fields (httparse) into a [`Head`] (status, [`Framing`], whether the connection may
//! serve again, the retry hints), and [`trailer_end`] finds where a chunked body's
//! trailer ends.

use axum::http::HeaderMap;
use axum::http::header::{HeaderName, HeaderValue};

use super::{Error, MAX_HEADERS, broken};

/// How an answer's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the head of an answer says.
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) framing: Framing,
    /// HTTP/1.1 without `connection: close`.
    pub(crate) keep_alive: bool,
    pub(crate) hints: HeaderMap,
}

/// Where a chunked body's trailer (after the last chunk's size line) ends: after an
/// empty line at its start, or after the first blank line.
pub(super) fn trailer_end(buffer: &[u8]) -> Option<usize> {
    if buffer.starts_with(b"\r\n") {
        return Some(2);
    }
    buffer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// The head at the start of `buffer` and its length, `None` when it is not all there.
pub(crate) fn parse_head(buffer: &[u8]) -> Result<Option<(usize, Head)>, Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let length = match response.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(broken("the answer has too many header fields"));
        }
        Err(_) => return Err(broken("the answer is not HTTP/1.1")),
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let mut length_field: Option<u64> = None;
    let mut chunked = None;
    let mut hints = HeaderMap::new();
    for field in response.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("content-length") {
            // Decimal digits only, once the optional whitespace HTTP allows around a value
            // (spaces and tabs) is stripped: never Unicode spaces (`str::trim` took
            // `\u{a0}2` for 2, a length no other HTTP reader would agree on).
            let value = crate::http1::decimal_length(field.value.trim_ascii())
                .ok_or_else(|| broken("the content-length is not a number"))?;
            if length_field.is_some_and(|seen| seen != value) {
                return Err(broken("the answer has differing content-lengths"));
            }
            length_field = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding decides: chunked frames the body, anything else runs to the close.
            let last = field.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            if crate::http1::says_close(field.value) {
                keep_alive = false;
            }
        } else if (name.eq_ignore_ascii_case("retry-after")
            || name.eq_ignore_ascii_case("retry-after-ms"))
            && let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(field.value),
            )
        {
            hints.append(name, value);
        }
    }
    let framing = match (status, chunked, length_field) {
        (204 | 304 | 100..=199, _, _) => Framing::Length(0),
        (_, Some(true), _) => Framing::Chunked,
        (_, Some(false), _) => Framing::UntilClose,
        (_, None, Some(length)) => Framing::Length(length),
        (_, None, None) => Framing::UntilClose,
    };
    // A body framed by both a coding and a length is read by the coding, and the
    // connection is not trusted with another request.
    if chunked.is_some() && length_field.is_some() {
        keep_alive = false;
    }
    Ok(Some((
        length,
        Head {
            status,
            framing,
            keep_alive,
            hints,
        },
    )))
}
