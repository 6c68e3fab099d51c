//! A provider's answer as the `http://` pool reads it (`upstream::pool`): the head
//! (`parse_head`), informational answers, the body by its framing, and the chunked
//! decoder, against a reference reader of the whole answer written here.
//!
//! The first input byte chooses the body cap (and whether non-2xx bodies are read at all);
//! the rest is what the provider sends before it closes the connection.
//!
//! Oracle: nothing panics; `parse_head` agrees with the reference head (status, framing:
//! 1xx/204/304 none, `transfer-encoding`'s last coding chunked or else to the close, else
//! one `content-length` of decimal digits, else to the close; keep-alive; only the retry
//! hints kept); a head is never longer than the bytes; and the whole exchange agrees with
//! the reference on the bytes: same status, same body (chunks decoded, extensions and
//! trailer skipped), the same cap decisions and the same refusals. A body never exceeds
//! its cap.

#![no_main]

use libfuzzer_sys::fuzz_target;
use releasegate_proxy::fuzzing::upstream::{
    Answer, Body, Failure, Framing, MAX_ANSWER_BYTES, MAX_HEAD_BYTES, MAX_HEADERS, parse_head,
    read_answer,
};

/// The reference reading of a head.
#[derive(Debug, PartialEq)]
enum RefHead {
    Partial,
    Refused,
    Head {
        length: usize,
        status: u16,
        framing: Framing,
        keep_alive: bool,
        hints: Vec<(String, Vec<u8>)>,
    },
}

/// `Content-Length`: decimal digits only once optional whitespace is stripped (what
/// HTTP allows around a field value); more than `u64` holds is `u64::MAX`.
fn content_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

fn reference_head(bytes: &[u8]) -> RefHead {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return RefHead::Partial,
        Err(_) => return RefHead::Refused,
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let (mut chunked, mut declared) = (None, None::<u64>);
    let mut hints: Vec<(String, Vec<u8>)> = Vec::new();
    for field in response.headers.iter() {
        let name = field.name.to_ascii_lowercase();
        match name.as_str() {
            "content-length" => {
                let Some(n) = content_length(field.value) else {
                    return RefHead::Refused;
                };
                if declared.is_some_and(|seen| seen != n) {
                    return RefHead::Refused;
                }
                declared = Some(n);
            }
            "transfer-encoding" => {
                let last = field.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            "connection" => {
                let close = field
                    .value
                    .split(|&b| b == b',')
                    .any(|o| o.trim_ascii().eq_ignore_ascii_case(b"close"));
                keep_alive &= !close;
            }
            "retry-after" | "retry-after-ms" => hints.push((name, field.value.to_vec())),
            _ => {}
        }
    }
    let framing = match (status, chunked, declared) {
        (204 | 304 | 100..=199, _, _) => Framing::Length(0),
        (_, Some(true), _) => Framing::Chunked,
        (_, Some(false), _) => Framing::UntilClose,
        (_, None, Some(n)) => Framing::Length(n),
        (_, None, None) => Framing::UntilClose,
    };
    if chunked.is_some() && declared.is_some() {
        keep_alive = false;
    }
    // As a header map holds them: names in order of first appearance, each name's values
    // together (a stable sort by that order).
    let first = hints.first().map(|(name, _)| name.clone());
    hints.sort_by_key(|(name, _)| Some(name) != first.as_ref());
    RefHead::Head {
        length,
        status,
        framing,
        keep_alive,
        hints,
    }
}

/// How the reference reads a body.
#[derive(Debug)]
enum RefBody {
    Read(Vec<u8>),
    TooLarge,
    Broken(&'static str),
}

/// A chunked body at the start of `bytes` (then the end of the stream), at most `cap`.
fn reference_chunked(bytes: &[u8], cap: usize) -> RefBody {
    let mut at = 0;
    let mut body = Vec::new();
    loop {
        let (skip, size) = match httparse::parse_chunk_size(&bytes[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return RefBody::Broken("cut inside a size line"),
            Err(_) => return RefBody::Broken("bad size line"),
        };
        at += skip;
        if size == 0 {
            break;
        }
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|&n| n <= cap - body.len())
        else {
            return RefBody::TooLarge;
        };
        let Some(chunk) = bytes.get(at..at + size) else {
            return RefBody::Broken("cut inside a chunk");
        };
        match bytes.get(at + size..at + size + 2) {
            Some(b"\r\n") => {}
            Some(_) => return RefBody::Broken("chunk without CRLF"),
            None => return RefBody::Broken("cut after a chunk"),
        }
        body.extend_from_slice(chunk);
        at += size + 2;
    }
    // The trailer: an empty line, or field lines up to the first blank line.
    let trailer = &bytes[at..];
    if trailer.starts_with(b"\r\n") || trailer.windows(4).any(|w| w == b"\r\n\r\n") {
        RefBody::Read(body)
    } else {
        RefBody::Broken("cut inside the trailer")
    }
}

/// The reference reading of a whole answer.
fn reference(bytes: &[u8], cap: &dyn Fn(u16) -> Option<usize>) -> Result<Answer, Failure> {
    let broken = |reason: &str| Err(Failure::Transport(reason.to_string()));
    let mut rest = bytes;
    let (status, framing) = loop {
        if rest.is_empty() {
            return broken("closed before an answer");
        }
        match reference_head(rest) {
            RefHead::Partial => return broken("cut inside the head"),
            RefHead::Refused => return broken("refused head"),
            RefHead::Head { length, .. } if length > MAX_HEAD_BYTES => return broken("long head"),
            RefHead::Head {
                length,
                status,
                framing,
                ..
            } => {
                rest = &rest[length..];
                match status {
                    101 => return broken("switched protocols"),
                    100..=199 => {}
                    _ => break (status, framing),
                }
            }
        }
    };
    let Some(cap) = cap(status) else {
        return Ok(Answer {
            status,
            body: Body::Skipped,
        });
    };
    let body = match framing {
        Framing::Length(n) => match usize::try_from(n).ok().filter(|&n| n <= cap) {
            None => RefBody::TooLarge,
            Some(n) => match rest.get(..n) {
                Some(body) => RefBody::Read(body.to_vec()),
                None => RefBody::Broken("cut inside the body"),
            },
        },
        Framing::UntilClose if rest.len() > cap => RefBody::TooLarge,
        Framing::UntilClose => RefBody::Read(rest.to_vec()),
        Framing::Chunked => reference_chunked(rest, cap),
    };
    match body {
        RefBody::Read(body) => Ok(Answer {
            status,
            body: Body::Read(body),
        }),
        RefBody::TooLarge if (200..300).contains(&status) => Err(Failure::TooLarge),
        RefBody::TooLarge => Ok(Answer {
            status,
            body: Body::TooLarge,
        }),
        RefBody::Broken(reason) => broken(reason),
    }
}

/// The same outcome, transport failures compared by kind only (their reasons differ).
fn same(a: &Result<Answer, Failure>, b: &Result<Answer, Failure>) -> bool {
    match (a, b) {
        (Err(Failure::Transport(_)), Err(Failure::Transport(_))) => true,
        _ => a == b,
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&choice, bytes)) = input.split_first() else {
        return;
    };
    if bytes.len() > MAX_ANSWER_BYTES {
        return;
    }
    let body_cap = [0, 1, 2, 7, 64, 1000, 4096, 1 << 20][usize::from(choice & 7)];
    let errors_read = choice & 0x08 != 0;
    let cap = move |status: u16| {
        if (200..300).contains(&status) || errors_read {
            Some(body_cap)
        } else {
            None
        }
    };

    // The head alone.
    let head = parse_head(bytes);
    match (&head, reference_head(bytes)) {
        (Ok(None), RefHead::Partial) | (Err(_), RefHead::Refused) => {}
        (
            Ok(Some((length, head))),
            RefHead::Head {
                length: ref_length,
                status,
                framing,
                keep_alive,
                hints,
            },
        ) => {
            assert!(*length <= bytes.len());
            assert_eq!(*length, ref_length, "head length");
            assert_eq!(head.status, status, "status");
            assert_eq!(head.framing, framing, "framing");
            assert_eq!(head.keep_alive, keep_alive, "keep-alive");
            assert_eq!(head.hints, hints, "retry hints");
        }
        (head, reference) => panic!("parse_head {head:?}, reference {reference:?}"),
    }

    // The whole exchange.
    let read = read_answer(bytes, &cap);
    if let Err(Failure::Other(reason)) = &read {
        panic!("the exchange failed outside the parser: {reason}");
    }
    if let Ok(Answer {
        status,
        body: Body::Read(body),
    }) = &read
    {
        assert!(Some(body.len()) <= cap(*status), "a body beyond its cap");
    }
    let expected = reference(bytes, &cap);
    assert!(
        same(&read, &expected),
        "the pool reads {read:?}, the reference {expected:?}"
    );
});
