//! The public listener's plain path (`server::listener::plain`): which requests it takes
//! from hyper, differential against hyper's own reading of the same bytes.
//!
//! The reference is hyper's HTTP/1 server parse, restated: `httparse` (default
//! configuration, at most `MAX_HEADER_FIELDS` fields), header names as `http::HeaderName`
//! reads them, and hyper's framing rules (a `Transfer-Encoding` decides the body, and over
//! HTTP/1.0 is refused; equal repeated `Content-Length`s are one, differing ones refused; a
//! length is decimal digits only; `Connection` keeps or closes by HTTP version).
//!
//! Oracle: a request the plain path takes (or waits for the body of) is one hyper parses
//! to the same method (`POST`), path (`/v1/systemone`), version, header fields (in order,
//! names lower-cased) and body length, on a connection hyper keeps open, without
//! `Transfer-Encoding`, `Expect` or `Upgrade`; the request it builds is that one, with
//! exactly the declared body; a head it says is partial is one httparse says is partial;
//! and the next request's bytes behind it (pipelining) change nothing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use releasegate_proxy::fuzzing::plain::{Classified, MAX_HEADER_FIELDS, classify};

/// What hyper makes of a request head.
#[derive(Debug)]
enum Hyper {
    /// Not all here yet.
    Partial,
    /// Refused (hyper answers 400 or closes).
    Refused,
    Parsed(Parsed),
}

#[derive(Debug)]
struct Parsed {
    head: usize,
    method: String,
    path: String,
    http10: bool,
    /// Lower-case names and values, as hyper's header map holds them: names in order of
    /// first appearance, each name's values together in order.
    headers: Vec<(String, Vec<u8>)>,
    /// The body's length (0 without `Content-Length`); `None` when chunked.
    length: Option<u64>,
    keep_alive: bool,
    expect: bool,
    upgrade: bool,
}

/// hyper's `from_digits`: decimal digits only, no sign, no overflow.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

/// Fields in the order a header map yields them: by name in order of first appearance, a
/// name's values together in their order.
fn as_header_map(fields: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<&String> = Vec::new();
    for (name, _) in &fields {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .iter()
        .flat_map(|&name| fields.iter().filter(move |(n, _)| n == name).cloned())
        .collect()
}

/// Whether a comma-separated value holds `option` (options compared without case).
fn holds(value: &[u8], option: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|said| said.trim_ascii().eq_ignore_ascii_case(option.as_bytes()))
}

fn hyper(bytes: &[u8]) -> Hyper {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADER_FIELDS];
    let mut request = httparse::Request::new(&mut fields);
    let head = match httparse::ParserConfig::default().parse_request(&mut request, bytes) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Hyper::Partial,
        Err(_) => return Hyper::Refused,
    };
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version)
    else {
        return Hyper::Refused;
    };
    if http::Method::from_bytes(method.as_bytes()).is_err() {
        return Hyper::Refused;
    }
    let http11 = version == 1;
    let mut keep_alive = http11;
    let (mut te, mut chunked, mut length) = (false, false, None::<u64>);
    let (mut expect, mut upgrade) = (false, false);
    let mut headers = Vec::new();
    for field in request.headers.iter() {
        let Ok(name) = http::HeaderName::from_bytes(field.name.as_bytes()) else {
            return Hyper::Refused;
        };
        let value = field.value;
        match name.as_str() {
            "transfer-encoding" => {
                if !http11 {
                    return Hyper::Refused;
                }
                te = true;
                let last = value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
            "content-length" if !te => {
                let Some(n) = digits(value) else {
                    return Hyper::Refused;
                };
                match length {
                    Some(seen) if seen != n => return Hyper::Refused,
                    _ => length = Some(n),
                }
            }
            "connection" => {
                keep_alive = if keep_alive {
                    !holds(value, "close")
                } else {
                    holds(value, "keep-alive")
                };
            }
            "expect" => expect = true,
            "upgrade" => upgrade = true,
            _ => {}
        }
        headers.push((name.as_str().to_string(), value.to_vec()));
    }
    if te && !chunked {
        return Hyper::Refused;
    }
    let headers = as_header_map(headers);
    Hyper::Parsed(Parsed {
        head,
        method: method.to_string(),
        path: path.to_string(),
        http10: !http11,
        headers,
        length: if te { None } else { Some(length.unwrap_or(0)) },
        keep_alive,
        expect,
        upgrade,
    })
}

/// Asserts that hyper reads `bytes` as the plain request whose head is `head` bytes long
/// and whose whole request is `total` bytes; returns hyper's reading.
fn assert_plain_for_hyper(bytes: &[u8], head: usize, total: usize, http10: bool) -> Parsed {
    let parsed = match hyper(bytes) {
        Hyper::Parsed(parsed) => parsed,
        other => panic!("the plain path takes what hyper reads as {other:?}"),
    };
    assert_eq!(parsed.head, head, "head length");
    assert_eq!(parsed.method, "POST");
    assert_eq!(parsed.path, "/v1/systemone");
    assert_eq!(parsed.http10, http10, "version");
    assert!(parsed.keep_alive, "hyper would close this connection");
    assert!(!parsed.expect && !parsed.upgrade, "Expect or Upgrade taken");
    let length = parsed.length.expect("a chunked request taken");
    assert_eq!(
        Some(length),
        u64::try_from(total - head).ok(),
        "body length"
    );
    parsed
}

fuzz_target!(|bytes: &[u8]| {
    match classify(bytes) {
        Classified::Plain(taken) => {
            assert!(taken.head <= taken.total && taken.total <= bytes.len());
            let parsed = assert_plain_for_hyper(bytes, taken.head, taken.total, taken.http10);
            let request = taken
                .request
                .expect("a plain head whose request cannot be built");
            assert_eq!(request.method, "POST");
            assert_eq!(request.uri, "/v1/systemone");
            assert_eq!(request.http10, taken.http10);
            assert_eq!(request.headers, parsed.headers, "header fields");
            assert_eq!(request.body, &bytes[taken.head..taken.total], "body");
            // The next request's bytes behind it change nothing.
            let mut pipelined = bytes.to_vec();
            pipelined.extend_from_slice(bytes);
            match classify(&pipelined) {
                Classified::Plain(again) => {
                    assert_eq!((again.head, again.total), (taken.head, taken.total));
                }
                other => panic!("pipelined bytes change a plain request into {other:?}"),
            }
        }
        Classified::BodyPending { total } => {
            assert!(total > bytes.len(), "a pending body that is all here");
            let (head, http10) = match hyper(bytes) {
                Hyper::Parsed(parsed) => (parsed.head, parsed.http10),
                other => panic!("a pending plain body behind a head hyper reads as {other:?}"),
            };
            assert_plain_for_hyper(bytes, head, total, http10);
        }
        Classified::Partial => {
            assert!(
                matches!(hyper(bytes), Hyper::Partial),
                "a head the plain path waits for that httparse does not"
            );
        }
        // Hyper's: nothing the plain path does.
        Classified::Other => {}
    }
});
