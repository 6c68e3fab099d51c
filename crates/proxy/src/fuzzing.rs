//! Thin wrappers over the proxy's private parsers for the fuzz targets in `fuzz/`
//! (feature `fuzzing`, never enabled by a build that serves): not an API.
//!
//! Each wrapper calls the serving code itself and hands back plain data (strings, bytes,
//! numbers), so that a target needs no HTTP types of its own and states its oracle
//! independently of the code under test.

use std::cell::RefCell;

use tokio::runtime::Runtime;

thread_local! {
    /// One current-thread runtime per thread for the async parsers (built on first use).
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

/// Runs `future` to its end on this thread's runtime; `None` when no runtime can be built.
fn block_on<F: std::future::Future>(future: F) -> Option<F::Output> {
    RUNTIME.with(|cell| {
        let mut runtime = cell.borrow_mut();
        if runtime.is_none() {
            *runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .ok();
        }
        runtime.as_ref().map(|runtime| runtime.block_on(future))
    })
}

/// The public listener's plain path (`server::listener::plain`).
pub mod plain {
    use bytes::Bytes;
    use http_body_util::BodyExt;

    use crate::server::listener::plain::{self as inner, Parsed};

    /// What the plain path makes of the bytes read so far.
    #[derive(Debug)]
    pub enum Classified {
        /// A plain request, head and body complete: the plain path serves it.
        Plain(Taken),
        /// A plain head whose body is not all here yet (`total` bytes in all).
        BodyPending {
            /// Head and body, in bytes.
            total: usize,
        },
        /// Not a complete head yet.
        Partial,
        /// Anything else: the connection goes to hyper.
        Other,
    }

    /// A request the plain path takes.
    #[derive(Debug)]
    pub struct Taken {
        /// The head's length in bytes.
        pub head: usize,
        /// Head and body, in bytes.
        pub total: usize,
        /// HTTP/1.0 (else HTTP/1.1).
        pub http10: bool,
        /// The request as the plain path hands it to the router; `None` when it cannot
        /// build one (the connection then goes to hyper).
        pub request: Option<Request>,
    }

    /// A request as the router receives it.
    #[derive(Debug)]
    pub struct Request {
        /// The method.
        pub method: String,
        /// The URI.
        pub uri: String,
        /// HTTP/1.0 (else HTTP/1.1).
        pub http10: bool,
        /// The header fields in order: lower-case names, values.
        pub headers: Vec<(String, Vec<u8>)>,
        /// The body.
        pub body: Vec<u8>,
    }

    /// Classifies `bytes` as the plain path does (`plain::parse`), and builds the request
    /// it would serve.
    pub fn classify(bytes: &[u8]) -> Classified {
        match inner::parse(bytes) {
            Parsed::Plain(plain) => {
                let shared = Bytes::copy_from_slice(bytes);
                let request = plain.request(&shared).and_then(|request| {
                    let (parts, body) = request.into_parts();
                    let body = futures_util::FutureExt::now_or_never(body.collect())?
                        .ok()?
                        .to_bytes();
                    Some(Request {
                        method: parts.method.as_str().to_string(),
                        uri: parts.uri.to_string(),
                        http10: parts.version == axum::http::Version::HTTP_10,
                        headers: parts
                            .headers
                            .iter()
                            .map(|(name, value)| {
                                (name.as_str().to_string(), value.as_bytes().to_vec())
                            })
                            .collect(),
                        body: body.to_vec(),
                    })
                });
                Classified::Plain(Taken {
                    head: plain.head,
                    total: plain.total,
                    http10: plain.version == axum::http::Version::HTTP_10,
                    request,
                })
            }
            Parsed::BodyPending { total } => Classified::BodyPending { total },
            Parsed::Partial => Classified::Partial,
            Parsed::Other => Classified::Other,
        }
    }

    /// Most header fields hyper parses in a request head (`MAX_HEADER_FIELDS`).
    pub const MAX_HEADER_FIELDS: usize = crate::server::MAX_HEADER_FIELDS;
    /// Largest declared body the plain path serves.
    pub const MAX_PLAIN_BODY: usize = crate::server::limits::MAX_PLAIN_BODY;
}

/// The `http://` provider's answers (`upstream::pool`).
pub mod upstream {
    use crate::upstream::pool;

    /// Longest answer head (and chunked trailer) the pool reads.
    pub const MAX_HEAD_BYTES: usize = pool::MAX_HEAD_BYTES;
    /// Most header fields an answer may have.
    pub const MAX_HEADERS: usize = pool::MAX_HEADERS;

    /// How an answer's body is delimited.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Framing {
        /// `content-length` (or none: 1xx, 204, 304).
        Length(u64),
        /// `transfer-encoding: chunked`.
        Chunked,
        /// Read to the close.
        UntilClose,
    }

    /// An answer's head as the pool reads it.
    #[derive(Debug)]
    pub struct Head {
        /// The status code.
        pub status: u16,
        /// The body's framing.
        pub framing: Framing,
        /// HTTP/1.1 without `connection: close`.
        pub keep_alive: bool,
        /// The fields kept (`retry-after`, `retry-after-ms`): lower-case names, values.
        pub hints: Vec<(String, Vec<u8>)>,
    }

    /// The head at the start of `bytes` and its length (`pool::parse_head`): `Ok(None)`
    /// when it is not all there, `Err` (the reason) when it is refused.
    pub fn parse_head(bytes: &[u8]) -> Result<Option<(usize, Head)>, String> {
        let parsed = pool::parse_head(bytes).map_err(|error| error.to_string())?;
        Ok(parsed.map(|(length, head)| {
            let framing = match head.framing {
                pool::Framing::Length(n) => Framing::Length(n),
                pool::Framing::Chunked => Framing::Chunked,
                pool::Framing::UntilClose => Framing::UntilClose,
            };
            let hints = head
                .hints
                .iter()
                .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
                .collect();
            (
                length,
                Head {
                    status: head.status,
                    framing,
                    keep_alive: head.keep_alive,
                    hints,
                },
            )
        }))
    }

    /// An answer's body as the pool hands it back.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Body {
        /// Read whole.
        Read(Vec<u8>),
        /// Not read: the caller's cap says not to for this status.
        Skipped,
        /// Longer than the cap, for a non-2xx status.
        TooLarge,
    }

    /// Why an answer was not read.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Failure {
        /// A 2xx body longer than the cap.
        TooLarge,
        /// A transport failure (the reason).
        Transport(String),
        /// Anything else (the harness could not run the exchange, or another error).
        Other(String),
    }

    /// An answer as read.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Answer {
        /// The status code.
        pub status: u16,
        /// The body.
        pub body: Body,
    }

    /// Most bytes [`read_answer`] takes: they are written to the socket before the pool
    /// reads, so they must fit its buffer.
    pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

    /// Reads `bytes` (then the end of the stream) as the answer to a request just sent, the
    /// way the pool's exchange does (`Pool::exchange`: the head, informational answers,
    /// the body by its framing and `cap` for the status, chunks and trailer).
    ///
    /// A Unix socket pair stands in for the TCP connection: the pool reads it through
    /// the same calls (only TCP options, which an exchange does not set, would differ).
    #[cfg(unix)]
    pub fn read_answer(
        bytes: &[u8],
        cap: &dyn Fn(u16) -> Option<usize>,
    ) -> Result<Answer, Failure> {
        use std::io::Write;
        use std::os::unix::net::UnixStream;

        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(Failure::Other("more bytes than the harness takes".into()));
        }
        let harness = |error: std::io::Error| Failure::Other(error.to_string());
        let (mut provider, proxy) = UnixStream::pair().map_err(harness)?;
        provider.write_all(bytes).map_err(harness)?;
        provider
            .shutdown(std::net::Shutdown::Write)
            .map_err(harness)?;
        proxy.set_nonblocking(true).map_err(harness)?;
        let proxy = std::net::TcpStream::from(std::os::fd::OwnedFd::from(proxy));
        let read = |status: u16| cap(status);
        super::block_on(async move {
            let stream = tokio::net::TcpStream::from_std(proxy).map_err(harness)?;
            let connection = pool::Connection {
                stream,
                buffer: bytes::BytesMut::new(),
            };
            let pool = pool::Pool::new(String::new());
            let response = pool
                .exchange(connection, &read)
                .await
                .map_err(|error| match error {
                    crate::upstream::Error::TooLarge => Failure::TooLarge,
                    // A close before any byte of an answer is the pool's `Connect` (a
                    // refused exchange, which failover moves past): a transport failure here.
                    crate::upstream::Error::Transport(reason)
                    | crate::upstream::Error::Connect(reason) => {
                        Failure::Transport(reason.to_string())
                    }
                    other => Failure::Other(other.to_string()),
                })?;
            let body = match response.body {
                pool::Body::Read(body) => Body::Read(body.to_vec()),
                pool::Body::Skipped => Body::Skipped,
                pool::Body::TooLarge => Body::TooLarge,
            };
            Ok(Answer {
                status: response.status,
                body,
            })
        })
        .unwrap_or_else(|| Err(Failure::Other("no runtime".into())))
    }
}

/// `multipart/form-data` request bodies (`server::multipart`).
pub mod multipart {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use releasegate_core::config::Server;
    use releasegate_core::wire::assets::Image;

    use crate::server::multipart as inner;

    /// Most parts of a multipart request.
    pub const MAX_PARTS: usize = inner::MAX_PARTS;

    /// A multipart request's parts.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Parts {
        /// The `request` part.
        pub request: Vec<u8>,
        /// Every other part by name: its content type (the essence, lower case) and bytes.
        pub others: BTreeMap<String, (Option<String>, Vec<u8>)>,
    }

    /// The `[server]` section of a configuration with these body limits (loaded from TOML
    /// text, as a configuration file is).
    pub fn server(
        max_body_bytes: usize,
        max_image_bytes: usize,
        max_asset_bytes: usize,
    ) -> Result<Server, String> {
        let text = format!(
            "[server]\nmax_body_bytes = {max_body_bytes}\nmax_image_bytes = {max_image_bytes}\n\
             max_asset_bytes = {max_asset_bytes}\n\
             [providers.p]\nkind = \"simulated\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
             [contracts.c]\nprovider = \"p\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\n\
             view = \"full_native\"\n",
            "0".repeat(64)
        );
        crate::load::from_toml_with_env(&text, &|_| None)
            .map(|config| config.server().clone())
            .map_err(|error| error.to_string())
    }

    /// The boundary of a `multipart/form-data` content type (`multipart::boundary`).
    pub fn boundary(content_type: &str) -> Result<String, String> {
        inner::boundary(content_type).map_err(|error| error.to_string())
    }

    /// The multipart body's parts (`multipart::parse`), or the refusal's status and message.
    pub fn parse(body: &[u8], boundary: &str, server: &Server) -> Result<Parts, (u16, String)> {
        let budget = crate::server::budget::Budget::unbounded();
        let hold = budget.hold();
        let source = Box::new(std::io::Cursor::new(body.to_vec()));
        let parsed = super::block_on(inner::parse(
            source,
            "multipart",
            boundary,
            server,
            (&hold, 0),
        ))
        .ok_or_else(|| (500, "no runtime".to_string()))?;
        let parts = parsed.map_err(|error| (error.status().as_u16(), error.to_string()))?;
        Ok(Parts {
            request: parts.request.to_vec(),
            others: parts
                .others
                .into_iter()
                .map(|(name, (content_type, bytes))| (name, (content_type, bytes.to_vec())))
                .collect(),
        })
    }

    /// The multipart body the proxy sends upstream (`multipart::build`): its content type
    /// and bytes.
    pub fn build(json: &[u8], images: &[Image<'_>]) -> Result<(String, Vec<u8>), String> {
        inner::build(&Bytes::copy_from_slice(json), images, &[])
            .map(|(content_type, segments)| (content_type, segments.concat()))
            .map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_wrappers_reach_the_parsers() {
        let request = b"POST /v1/systemone HTTP/1.1\r\nhost: p\r\ncontent-length: 2\r\n\r\n{}";
        let super::plain::Classified::Plain(taken) = super::plain::classify(request) else {
            panic!("not plain");
        };
        assert_eq!(taken.request.map(|r| r.body), Some(b"{}".to_vec()));
        let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        let read = super::upstream::read_answer(answer, &|_| Some(16)).unwrap();
        assert_eq!(read.body, super::upstream::Body::Read(b"ok".to_vec()));
        let server = super::multipart::server(4096, 512, 1024).unwrap();
        let (content_type, body) = super::multipart::build(b"{}", &[]).unwrap();
        let boundary = super::multipart::boundary(&content_type).unwrap();
        let parts = super::multipart::parse(&body, &boundary, &server).unwrap();
        assert_eq!(parts.request, b"{}");
    }
}
