//! The connections of an `http://` provider: HTTP/1.1, one pool per recipient and event
//! loop (`Upstreams`), spoken by the proxy itself.
//!
//! A pool is a stack of idle connections: a request takes the most recently used one
//! that is still open and silent (`Connection::is_open`: one dropped otherwise), or
//! opens a new one. The exchange runs in the request's own task: the request (head
//! and body) goes out in one write (a multipart body's segments, each image a slice of
//! its part, in one write each after the head), the answer is read into the connection's buffer
//! and parsed there (httparse; the head by `head::parse_head`), so no connection task,
//! channel or header map sits between a request and its answer (what hyper's client
//! connection costs: about a tenth of the proxy's instructions per request,
//! `docs/benchmarks.md`).
//!
//! What is read, and kept:
//!
//! - informational answers (1xx but 101) are skipped; 101 is a transport failure;
//! - the body is framed by `transfer-encoding: chunked` (any other transfer coding:
//!   read to the close), else by `content-length` (differing values: a transport
//!   failure), else read to the close; 204 and 304 have none;
//! - a head longer than [`MAX_HEAD_BYTES`] or with more than [`MAX_HEADERS`] fields is
//!   a transport failure; the body is read only as far as the caller's cap for the
//!   status ([`Read`]): a 2xx body beyond it is [`Error::TooLarge`], an error body
//!   beyond it is [`Body::TooLarge`], and a status whose body is not wanted is not
//!   read at all;
//! - only a connection whose 2xx answer was read to its end, framed by length or
//!   chunks, HTTP/1.1 without `connection: close`, with nothing after it, goes back
//!   to the pool; any other is closed (dropped), as is one whose exchange was cut
//!   short (the caller's timeout drops the future, and with it the connection).
//!
//! A request is sent again on another connection only when an idle connection turned
//! out closed before a single byte of it was written, so a request reaches the
//! provider at most once. Connections idle longer than [`IDLE_TIMEOUT`] are closed: by
//! the next request, and by a sweep every half of it (a task of the loop, started
//! with the first connection, ended with the pool). At most [`MAX_IDLE`] are kept.
//! `https://` providers keep hyper-util's client (TLS, HTTP/2 by ALPN).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Error;
use head::trailer_end;
pub(crate) use head::{Framing, Head, parse_head};
use idle::Idle;

mod head;
mod idle;

/// How long an idle connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most idle connections kept per event loop and provider.
pub(crate) const MAX_IDLE: usize = 64;
/// How long opening a connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest answer head (status line and fields) read, and longest chunked trailer.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields an answer may have.
pub(crate) const MAX_HEADERS: usize = 100;
/// What a connection's buffer grows by when it must read more.
const READ_CHUNK: usize = 8 * 1024;

/// One event loop's connections to one provider.
#[derive(Debug)]
pub(crate) struct Pool {
    /// `host:port` to connect to.
    address: String,
    /// How long an idle connection is kept ([`IDLE_TIMEOUT`]).
    idle_timeout: Duration,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// Whether the sweep of idle connections runs.
    sweeping: AtomicBool,
}

/// One open connection and what was read from it but not yet used.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) stream: TcpStream,
    pub(crate) buffer: BytesMut,
}

/// How much of an answer's body the caller wants, by status.
pub(crate) trait Read {
    /// The most body bytes read for `status`, or `None` to not read the body.
    fn cap(&self, status: u16) -> Option<usize>;
}

impl<F: Fn(u16) -> Option<usize>> Read for F {
    fn cap(&self, status: u16) -> Option<usize> {
        self(status)
    }
}

/// An answer as read.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// The answer's `retry-after` and `retry-after-ms` fields (no others are kept).
    pub(crate) hints: HeaderMap,
    pub(crate) body: Body,
}

/// An answer's body.
#[derive(Debug)]
pub(crate) enum Body {
    /// Read whole.
    Read(Bytes),
    /// Not read: the caller does not want it for this status.
    Skipped,
    /// Longer than the caller's cap for a non-2xx status (not read further).
    TooLarge,
}

impl Pool {
    /// A pool of connections to `address` (`host:port`).
    pub(crate) fn new(address: String) -> Arc<Pool> {
        Pool::with_idle_timeout(address, IDLE_TIMEOUT)
    }

    fn with_idle_timeout(address: String, idle_timeout: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            address,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
            sweeping: AtomicBool::new(false),
        })
    }

    /// Sends `request` (a whole HTTP/1.1 request: head and body) over an idle
    /// connection or a new one and reads its answer, the body as far as `read` says.
    #[cfg(test)]
    pub(crate) async fn send<R: Outgoing + ?Sized>(
        self: &Arc<Self>,
        request: &R,
        read: &impl Read,
    ) -> Result<Response, Error> {
        self.send_tracked(request, read, &AtomicBool::new(false))
            .await
    }

    /// Sends `request` as the tests' `Pool::send` does, setting `sent` once a write of the
    /// request begins: while it is unset (connecting, or every write refused before a byte
    /// went out) the provider cannot have the request, which a caller that gives up may rely
    /// on to ask another provider. Set, some of it may have gone out.
    pub(crate) async fn send_tracked<R: Outgoing + ?Sized>(
        self: &Arc<Self>,
        request: &R,
        read: &impl Read,
        sent: &AtomicBool,
    ) -> Result<Response, Error> {
        while let Some(idle) = self.take() {
            let mut connection = idle.connection;
            if crate::clock::coarse().saturating_duration_since(idle.since) > self.idle_timeout
                || !connection.is_open()
            {
                continue;
            }
            sent.store(true, Ordering::Relaxed);
            match connection.write(request).await {
                Ok(()) => return self.exchange(connection, read).await,
                // Not a byte went out: the connection had closed; try the next one.
                Err(Unsent::Nothing) => sent.store(false, Ordering::Relaxed),
                Err(Unsent::Partly(error)) => return Err(Error::Transport(Box::new(error))),
            }
        }
        let mut connection = self.connect().await?;
        sent.store(true, Ordering::Relaxed);
        match connection.write(request).await {
            Ok(()) => self.exchange(connection, read).await,
            Err(Unsent::Nothing) => {
                sent.store(false, Ordering::Relaxed);
                Err(Error::Connect(
                    "the connection closed before the request was sent".into(),
                ))
            }
            Err(Unsent::Partly(_)) => Err(Error::Transport(
                "the connection closed while the request was sent".into(),
            )),
        }
    }

    /// Reads the answer to the request just written, and keeps the connection when it
    /// can serve another.
    pub(crate) async fn exchange(
        &self,
        mut connection: Connection,
        read: &impl Read,
    ) -> Result<Response, Error> {
        let head = connection.head().await?;
        let success = (200..300).contains(&head.status);
        let body = match read.cap(head.status) {
            None => {
                return Ok(Response {
                    status: head.status,
                    hints: head.hints,
                    body: Body::Skipped,
                });
            }
            Some(cap) => connection.body(head.framing, cap).await?,
        };
        let body = match body {
            Some(body) => body,
            None if success => return Err(Error::TooLarge),
            None => {
                return Ok(Response {
                    status: head.status,
                    hints: head.hints,
                    body: Body::TooLarge,
                });
            }
        };
        if success
            && head.keep_alive
            && head.framing != Framing::UntilClose
            && connection.buffer.is_empty()
        {
            self.put(connection);
        }
        Ok(Response {
            status: head.status,
            hints: head.hints,
            body: Body::Read(body),
        })
    }

    async fn connect(self: &Arc<Self>) -> Result<Connection, Error> {
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(Pool::sweep(Arc::downgrade(self), self.idle_timeout / 2));
        }
        let connect = TcpStream::connect(self.address.as_str());
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Err(_) => return Err(Error::Timeout),
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Error::Timeout);
            }
            Ok(Err(error)) => return Err(Error::Connect(Box::new(error))),
            Ok(Ok(stream)) => stream,
        };
        stream
            .set_nodelay(true)
            .map_err(|error| Error::Connect(Box::new(error)))?;
        Ok(Connection {
            stream,
            buffer: BytesMut::new(),
        })
    }
}

/// A request as it is written: one buffer (the head and a JSON body), or segments.
pub(crate) trait Outgoing: Sync {
    /// Its segment `index`, in order; `None` past the last.
    fn segment(&self, index: usize) -> Option<&[u8]>;
}

impl Outgoing for [u8] {
    fn segment(&self, index: usize) -> Option<&[u8]> {
        (index == 0).then_some(self)
    }
}

impl Outgoing for Vec<u8> {
    fn segment(&self, index: usize) -> Option<&[u8]> {
        self.as_slice().segment(index)
    }
}

/// A request head and its body's segments (a multipart body: framing and images, each
/// written as it is, never copied into one buffer).
pub(crate) struct Segmented<'a> {
    /// The request line and header fields.
    pub(crate) head: &'a [u8],
    /// The body's segments.
    pub(crate) body: &'a [Bytes],
}

impl Outgoing for Segmented<'_> {
    fn segment(&self, index: usize) -> Option<&[u8]> {
        match index {
            0 => Some(self.head),
            n => self.body.get(n - 1).map(|segment| &segment[..]),
        }
    }
}

/// Why a request did not go out whole.
enum Unsent {
    /// Not a byte of it was written.
    Nothing,
    /// Some of it may have reached the provider.
    Partly(std::io::Error),
}

/// A transport failure with a reason of the proxy's own.
fn broken(reason: &'static str) -> Error {
    Error::Transport(reason.into())
}

impl Connection {
    /// Whether an idle connection is still open with nothing to read: a close, an error
    /// or a single stray byte are all reasons to drop it (bytes a provider sent unasked
    /// would otherwise be read as the answer to the next request).
    ///
    /// The socket itself is asked (`recv` with `MSG_PEEK`, non-blocking: one system call),
    /// not the event loop's readiness: bytes that arrived since the loop last polled are
    /// not yet marked readable, and a readiness check alone would miss them.
    fn is_open(&mut self) -> bool {
        if !self.buffer.is_empty() {
            return false;
        }
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        matches!(
            socket2::SockRef::from(&self.stream).peek(&mut probe),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
        )
    }

    /// Writes the request's segments in order; `Unsent::Nothing` only when not one byte
    /// of any went out.
    async fn write<R: Outgoing + ?Sized>(&mut self, request: &R) -> Result<(), Unsent> {
        let mut written = 0;
        let mut index = 0;
        while let Some(segment) = request.segment(index) {
            let mut at = 0;
            while at < segment.len() {
                match self.stream.write(&segment[at..]).await {
                    Ok(0) if written == 0 => return Err(Unsent::Nothing),
                    Ok(0) => return Err(Unsent::Partly(std::io::ErrorKind::WriteZero.into())),
                    Ok(n) => {
                        at += n;
                        written += n;
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) if written == 0 => return Err(Unsent::Nothing),
                    Err(error) => return Err(Unsent::Partly(error)),
                }
            }
            index += 1;
        }
        Ok(())
    }

    /// Reads more into the buffer; `false` at the end of the stream.
    async fn fill(&mut self) -> Result<bool, Error> {
        self.buffer.reserve(READ_CHUNK);
        match self.stream.read_buf(&mut self.buffer).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(error) => Err(Error::Transport(Box::new(error))),
        }
    }

    /// Reads and parses the answer's head (skipping informational ones).
    async fn head(&mut self) -> Result<Head, Error> {
        // Whether any byte of an answer came (an informational head, a stray CRLF).
        let mut received = !self.buffer.is_empty();
        loop {
            // Nothing read yet (a request just sent): nothing to parse.
            let parsed = if self.buffer.is_empty() {
                None
            } else {
                parse_head(&self.buffer)?
            };
            match parsed {
                Some((length, _)) if length > MAX_HEAD_BYTES => {
                    return Err(broken("the answer's head is too long"));
                }
                Some((length, head)) => {
                    self.buffer.advance(length);
                    match head.status {
                        101 => return Err(broken("the provider switched protocols")),
                        100..=199 => continue,
                        _ => return Ok(head),
                    }
                }
                None if self.buffer.len() > MAX_HEAD_BYTES => {
                    return Err(broken("the answer's head is too long"));
                }
                None => {
                    if !self.fill().await? {
                        // Not a byte of an answer: the provider refused the exchange (a
                        // connection failure, which a contract's failover moves past).
                        if !received {
                            return Err(Error::Connect(
                                "the connection closed before an answer".into(),
                            ));
                        }
                        return Err(broken("the connection closed inside the answer's head"));
                    }
                    received = true;
                }
            }
        }
    }

    /// Reads a body of at most `cap` bytes: `None` when it is longer.
    async fn body(&mut self, framing: Framing, cap: usize) -> Result<Option<Bytes>, Error> {
        match framing {
            Framing::Length(length) => {
                let Some(length) = usize::try_from(length).ok().filter(|&n| n <= cap) else {
                    return Ok(None);
                };
                while self.buffer.len() < length {
                    if !self.fill().await? {
                        return Err(broken("the connection closed inside the body"));
                    }
                }
                Ok(Some(self.buffer.split_to(length).freeze()))
            }
            Framing::UntilClose => {
                while self.fill().await? {
                    if self.buffer.len() > cap {
                        return Ok(None);
                    }
                }
                if self.buffer.len() > cap {
                    return Ok(None);
                }
                Ok(Some(self.buffer.split().freeze()))
            }
            Framing::Chunked => self.chunked(cap).await,
        }
    }

    /// Reads a chunked body of at most `cap` bytes, and its trailer.
    async fn chunked(&mut self, cap: usize) -> Result<Option<Bytes>, Error> {
        let mut body = BytesMut::new();
        loop {
            let (skip, size) = loop {
                match httparse::parse_chunk_size(&self.buffer) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if self.buffer.len() > MAX_HEAD_BYTES => {
                        return Err(broken("a chunk size line is too long"));
                    }
                    Ok(httparse::Status::Partial) => {
                        if !self.fill().await? {
                            return Err(broken("the connection closed inside the body"));
                        }
                    }
                    Err(_) => return Err(broken("a chunk size is not valid")),
                }
            };
            self.buffer.advance(skip);
            if size == 0 {
                break;
            }
            let Some(size) = usize::try_from(size)
                .ok()
                .filter(|&n| n <= cap.saturating_sub(body.len()))
            else {
                return Ok(None);
            };
            // The chunk and its closing CRLF.
            while self.buffer.len() < size + 2 {
                if !self.fill().await? {
                    return Err(broken("the connection closed inside the body"));
                }
            }
            if &self.buffer[size..size + 2] != b"\r\n" {
                return Err(broken("a chunk does not end with CRLF"));
            }
            body.extend_from_slice(&self.buffer[..size]);
            self.buffer.advance(size + 2);
        }
        // The trailer: fields up to an empty line (read past, never used).
        loop {
            if let Some(end) = trailer_end(&self.buffer) {
                self.buffer.advance(end);
                return Ok(Some(body.freeze()));
            }
            if self.buffer.len() > MAX_HEAD_BYTES {
                return Err(broken("the trailer is too long"));
            }
            if !self.fill().await? {
                return Err(broken("the connection closed inside the trailer"));
            }
        }
    }
}

#[cfg(test)]
mod tests;
