//! The public connection's plain path: requests the proxy reads and answers itself,
//! without hyper's connection driver, as long as each one is the plain case.
//!
//! A request is plain when its head and its whole body are already read, and it is
//! `POST /v1/systemone` with exactly one `Content-Length` (decimal digits, at most
//! [`MAX_PLAIN_BODY`]), no `Transfer-Encoding`, `Expect` or `Upgrade`, and no
//! `Connection` other than `keep-alive`, over HTTP/1.1, or over HTTP/1.0 with
//! `Connection: keep-alive` (an HTTP/1.0 request without it closes its connection,
//! which hyper does). Its head is parsed by the same parser hyper uses (httparse, at
//! most [`MAX_HEADER_FIELDS`] fields), the request handed to the same
//! [`Routes::serve`], and the response written as hyper writes it (the status line, the
//! header fields in order, hyper's `connection` fix-ups for HTTP/1.0, `content-length`,
//! then hyper's `date` line), so a client cannot tell the two paths apart.
//!
//! At the first request that is not plain (another method or path, a head hyper
//! would refuse or that is still arriving past [`Limits::max_plain_head`], a body not yet all
//! here), the connection goes to hyper for the rest of its life, with every byte read
//! so far ([`Outcome::HandOff`]): hyper parses that request from its first byte, so
//! whatever it does with it (its errors, `100 Continue`, chunked bodies, the body's
//! deadline, the proxy's own refusals) is exactly what it did before this path existed.
//!
//! The connection's clocks and drain are the listener's: bytes received move its
//! [`Activity`] from waiting to head, a dispatched request holds it busy until its
//! response is written, the watchdog closes it on the header or idle deadline, a drain
//! closes it between requests (a response written during one says `connection: close`),
//! and the end of the grace drops it.

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Uri, Version, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::super::limits::{MAX_HEADER_FIELDS, MAX_PLAIN_BODY};
use super::woken::Woken;
use super::{Activity, Closed, Limits, Routes, Stage};
use crate::http1::{decimal_length, says_close, says_keep_alive};
use names::{field_name, same_name};

mod names;

/// The one path served here (as sent: no query, no trailing slash).
const PATH: &[u8] = b"/v1/systemone";

/// [`PATH`] as the request's URI, parsed once.
static URI: std::sync::LazyLock<Uri> =
    std::sync::LazyLock::new(|| Uri::from_static("/v1/systemone"));

/// How much room a read asks for at least.
const READ_CHUNK: usize = 8 * 1024;

/// How the plain path left the connection.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Hyper serves the rest of the connection, starting with these bytes.
    HandOff(Bytes),
    /// The watchdog's deadline passed (counted and dropped by the caller).
    Expired(Closed),
    /// The last response said `connection: close`, or the client ended the connection
    /// between requests: close the way a client can read the last response (`linger`)
    /// while the listener serves.
    Finished,
    /// Dropped at once: an I/O error, the drain between requests, the end of the grace.
    Dropped,
}

/// What the bytes read so far hold.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A plain request, head and body complete.
    Plain(Plain),
    /// A plain head whose body is not all here yet.
    BodyPending { total: usize },
    /// Not a complete head yet.
    Partial,
    /// Anything else: hyper's.
    Other,
}

/// A plain request's framing: its version, where its header fields are, and its length.
#[derive(Debug)]
pub(crate) struct Plain {
    /// HTTP/1.1, or HTTP/1.0 with `Connection: keep-alive`.
    pub(crate) version: Version,
    /// (name, value) byte ranges within the head.
    pub(crate) fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// Head and body, in bytes.
    pub(crate) total: usize,
    /// The head's length.
    pub(crate) head: usize,
}

/// Serves plain requests on `stream` until one is not plain or the connection ends.
pub(super) async fn serve(
    stream: &mut TcpStream,
    activity: &Arc<Activity>,
    routes: &Routes,
    limits: Limits,
    stage: &mut watch::Receiver<Stage>,
) -> Outcome {
    let mut buffer = BytesMut::with_capacity(READ_CHUNK);
    // One watchdog for the connection's life (it looks at the phase each time it wakes),
    // so a request costs no timer of its own. The two watches on the stage are the
    // connection's too: each registers with the stage's sender once, not once per request
    // or read.
    // Each is polled again only once it was woken ([`Woken`]): a pending watch's every
    // poll takes a lock all connections share.
    let expired = activity.expired(limits);
    let expired = std::pin::pin!(expired);
    let mut expired = Woken::new(expired);
    // The end of the grace (or of the sender), while a request is served.
    let mut grace = stage.clone();
    let closing = async move {
        let _ = grace.wait_for(|now| *now == Stage::Closing).await;
    };
    let closing = std::pin::pin!(closing);
    let mut closing = Woken::new(closing);
    // The drain (or the end of the sender), while waiting for bytes.
    let mut watched = stage.clone();
    let leaving = async move { watched.wait_for(|now| *now != Stage::Serving).await.is_ok() };
    let leaving = std::pin::pin!(leaving);
    let mut leaving = Woken::new(leaving);
    let mut left = false;
    loop {
        match parse(&buffer) {
            Parsed::Plain(plain) => {
                let bytes = buffer.split_to(plain.total).freeze();
                let Some(request) = plain.request(&bytes) else {
                    // Unreachable for what httparse accepts; hyper decides then.
                    return hand_off(bytes, buffer);
                };
                let version = plain.version;
                let guard = activity.begin_request();
                // Pinned where it is made and raced by reference: `select!` taking it by
                // value copied the whole future (the handler's with it) into its own.
                let served = std::pin::pin!(async {
                    let mut response = routes.serve_plain(request).await;
                    let draining = *stage.borrow() != Stage::Serving;
                    // `encode` writes a missing `content-length` after the other fields,
                    // where `Routes::serve` puts it, unless it appends a `connection`
                    // field (HTTP/1.0, the drain): then the length goes in first.
                    if draining || version == Version::HTTP_10 {
                        super::super::routes::set_content_length(&mut response);
                    }
                    let (bytes, close) = encode(response, draining, version).await?;
                    stream.write_all(&bytes).await.ok()?;
                    Some(close)
                });
                let close = tokio::select! {
                    close = served => close,
                    () = &mut closing => None,
                };
                drop(guard);
                match close {
                    None => return Outcome::Dropped,
                    Some(true) => return Outcome::Finished,
                    Some(false) if *stage.borrow() != Stage::Serving => return Outcome::Dropped,
                    Some(false) => {}
                }
                if !buffer.is_empty() {
                    activity.received();
                }
                continue;
            }
            Parsed::BodyPending { total } => {
                // The rest of a body that is already in the socket is read at once; a
                // body still on its way is hyper's (under the body's own deadline). The
                // buffer grows only by what arrives, never by what a head declares.
                while buffer.len() < total {
                    buffer.reserve(READ_CHUNK.min(total - buffer.len()));
                    match stream.try_read_buf(&mut buffer) {
                        Ok(0) | Err(_) => return hand_off(Bytes::new(), buffer),
                        Ok(_) => {}
                    }
                }
                continue;
            }
            Parsed::Other => return hand_off(Bytes::new(), buffer),
            Parsed::Partial if buffer.len() >= limits.max_plain_head => {
                return hand_off(Bytes::new(), buffer);
            }
            Parsed::Partial => {}
        }
        // Between requests or within a head: read more, unless the listener is draining.
        loop {
            match *stage.borrow_and_update() {
                Stage::Serving => {}
                // Idle: closed as hyper closes an idle connection; a head in progress is
                // hyper's to answer (with `connection: close`).
                _ if buffer.is_empty() => return Outcome::Dropped,
                _ => return hand_off(Bytes::new(), buffer),
            }
            buffer.reserve(READ_CHUNK);
            tokio::select! {
                read = stream.read_buf(&mut buffer) => match read {
                    Ok(0) if buffer.is_empty() => return Outcome::Finished,
                    // Cut short within a head: hyper reads the same bytes and the same end.
                    Ok(0) => return hand_off(Bytes::new(), buffer),
                    Ok(_) => {
                        activity.received();
                        break;
                    }
                    Err(_) => return Outcome::Dropped,
                },
                reason = &mut expired => return Outcome::Expired(reason),
                sender = &mut leaving, if !left => {
                    // The stage has left `Serving`: the check above ends the connection
                    // (a drain), as does the end of the sender. Finished, the watch is
                    // not polled again.
                    left = true;
                    if !sender {
                        return Outcome::Dropped;
                    }
                }
            }
        }
    }
}

/// The connection goes to hyper with `first` then `rest` unread, copied to their size
/// (the buffer's spare room is not kept for the connection's life).
fn hand_off(first: Bytes, rest: BytesMut) -> Outcome {
    let mut all = Vec::with_capacity(first.len() + rest.len());
    all.extend_from_slice(&first);
    all.extend_from_slice(&rest);
    Outcome::HandOff(Bytes::from(all))
}

/// Reads what `buffer` holds (see [`Parsed`]).
pub(crate) fn parse(buffer: &[u8]) -> Parsed {
    if buffer.is_empty() {
        return Parsed::Partial;
    }
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADER_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let head = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut request,
        buffer,
        &mut slots,
    ) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if request.method != Some("POST") || request.path.map(str::as_bytes) != Some(PATH) {
        return Parsed::Other;
    }
    let version = match request.version {
        Some(1) => Version::HTTP_11,
        Some(0) => Version::HTTP_10,
        _ => return Parsed::Other,
    };
    let mut keep_alive = false;
    let base = buffer.as_ptr() as usize;
    let offset = |part: &[u8]| part.as_ptr() as usize - base;
    let mut length = None;
    let mut fields = Vec::with_capacity(request.headers.len());
    for field in request.headers.iter() {
        let name = field.name.as_bytes();
        if same_name(name, b"content-length") {
            if length.is_some() {
                return Parsed::Other;
            }
            match content_length(field.value) {
                Some(n) => length = Some(n),
                None => return Parsed::Other,
            }
        } else if same_name(name, b"connection") {
            if !field.value.eq_ignore_ascii_case(b"keep-alive") {
                return Parsed::Other;
            }
            keep_alive = true;
        } else if same_name(name, b"transfer-encoding")
            || same_name(name, b"expect")
            || same_name(name, b"upgrade")
        {
            return Parsed::Other;
        }
        let name_at = offset(name);
        let value_at = offset(field.value);
        fields.push((
            name_at..name_at + name.len(),
            value_at..value_at + field.value.len(),
        ));
    }
    let Some(length) = length else {
        return Parsed::Other;
    };
    // HTTP/1.0 closes the connection after the response unless the request keeps it.
    if version == Version::HTTP_10 && !keep_alive {
        return Parsed::Other;
    }
    let total = head + length;
    if buffer.len() < total {
        return Parsed::BodyPending { total };
    }
    Parsed::Plain(Plain {
        version,
        fields,
        total,
        head,
    })
}

/// A `Content-Length` value of decimal digits only (what hyper accepts, and no list) of at
/// most [`MAX_PLAIN_BODY`].
fn content_length(value: &[u8]) -> Option<usize> {
    decimal_length(value)
        .and_then(|length| usize::try_from(length).ok())
        .filter(|&length| length <= MAX_PLAIN_BODY)
}

impl Plain {
    /// The request as hyper hands it to the service: method, URI, version, the header
    /// fields in order (names lower-cased, values sharing `bytes`), the body.
    pub(crate) fn request(&self, bytes: &Bytes) -> Option<Request<Body>> {
        let mut headers = HeaderMap::with_capacity(self.fields.len());
        for (name, value) in &self.fields {
            let name = field_name(&bytes[name.clone()])?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(value.clone())).ok()?;
            headers.append(name, value);
        }
        let mut request = Request::new(Body::from(bytes.slice(self.head..self.total)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = URI.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = headers;
        Some(request)
    }
}

/// The response's bytes as hyper writes them to a request of `version`, and whether the
/// connection closes after it. `draining`: the listener is draining, so the connection
/// closes after this response, which says so as hyper's graceful shutdown makes it do
/// (`connection: close` over HTTP/1.1; over HTTP/1.0, where closing is the default,
/// nothing). `None` when the body fails.
async fn encode(response: Response, draining: bool, version: Version) -> Option<(Vec<u8>, bool)> {
    let (mut parts, body) = response.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let closes = |headers: &HeaderMap| {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|value| says_close(value.as_bytes()))
    };
    let mut close = closes(&parts.headers);
    let http10 = version == Version::HTTP_10;
    if http10 {
        // Hyper's fix-up for an HTTP/1.0 peer whose request kept the connection: a
        // response that does not say `keep-alive` gets it appended to its `connection`
        // values (after a `close`, which still closes), unless the drain has disabled
        // keep-alive; then nothing is added and the connection closes.
        let kept = parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|value| says_keep_alive(value.as_bytes()));
        if draining {
            close = true;
        } else if !kept {
            parts
                .headers
                .append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        }
    } else if draining && !close {
        parts
            .headers
            .append(header::CONNECTION, HeaderValue::from_static("close"));
        close = true;
    }
    let mut out = Vec::with_capacity(256 + body.len());
    let status = parts.status;
    if status == axum::http::StatusCode::OK && !http10 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut wrote_length = false;
    let mut wrote_date = false;
    let mut connection_line = false;
    for (name, value) in &parts.headers {
        wrote_length |= *name == header::CONTENT_LENGTH;
        wrote_date |= *name == header::DATE;
        // Hyper writes a field's values one line each, except `connection`'s, which it
        // joins on one line (a map yields one name's values one after another).
        if *name == header::CONNECTION && connection_line {
            out.truncate(out.len() - 2);
            out.extend_from_slice(b", ");
        } else {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
        }
        connection_line = *name == header::CONNECTION;
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !wrote_length {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        date(|now| out.extend_from_slice(now));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    Some((out, close))
}

thread_local! {
    /// This thread's `date` value and the second it was written for (as hyper caches its own).
    static DATE: std::cell::RefCell<(u64, [u8; 29])> = const { std::cell::RefCell::new((u64::MAX, [0; 29])) };
}

/// Calls `f` with the current `date` value (an IMF-fixdate, as hyper writes it).
fn date(f: impl FnOnce(&[u8])) {
    let now = crate::clock::coarse_system();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = second;
            } else {
                drop(cached);
                return f(text.as_bytes());
            }
        }
        f(&cached.1)
    });
}

#[cfg(test)]
mod tests;
