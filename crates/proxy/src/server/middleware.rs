//! The public router's outermost layer: every response, success or error,
//! from a handler, a fallback or this layer itself, carries the proxy's own
//! request id in `x-request-id` and `x-typesafe-request-id` (the header the
//! official SDKs read), and oversized header sections get a JSON 431.
//!
//! It also reads the request's W3C trace context, replaces the caller's
//! `traceparent`/`tracestate` with what the provider may receive (`trace`), and leaves the
//! request id and trace id in the request's extensions: every log line of the request
//! carries them (the access line as fields, the others in a `request` span,
//! [`request_span`]).
//!
//! Written as a plain tower layer (no boxed future, no per-request clone of
//! the inner service, the id built without formatting machinery).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use std::sync::atomic::{AtomicU64, Ordering};

use speck_cipher::Speck64_128;
use speck_cipher::cipher::{BlockCipherEncrypt, KeyInit};

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::{AppState, Error, REQUEST_ID_HEADER};

/// The request id header the official System One SDKs read.
pub const SDK_REQUEST_ID_HEADER: &str = "x-typesafe-request-id";

/// What the middleware leaves in a request's extensions for handlers and logs (one
/// extension: each insertion is a map operation per request).
#[derive(Debug, Clone)]
pub(super) struct Ids {
    /// The proxy's request id.
    pub(super) request_id: RequestId,
    /// The request's W3C trace id.
    pub(super) trace_id: super::trace::TraceId,
    /// The ids of its exported spans.
    pub(super) spans: super::trace::SpanIds,
}

/// The proxy's request id, in the request's extensions for handlers and logs.
/// Held as the header value it is sent as (cloning it is a reference count).
#[derive(Debug, Clone)]
pub(super) struct RequestId(HeaderValue);

impl RequestId {
    /// `rg-{block:016x}`: a request id from its 64-bit block.
    fn from_block(block: u64) -> RequestId {
        let mut id = [0u8; 3 + 16];
        id[..3].copy_from_slice(b"rg-");
        // 16 digits for 8 bytes: it cannot fail (if it did, the zeros left would make the
        // value invalid, and the id `rg-invalid`).
        let _ = hex::encode_to_slice(block.to_be_bytes(), &mut id[3..]);
        // Lower-case hex digits and a dash: always a valid header value.
        let value =
            HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("rg-invalid"));
        RequestId(value)
    }

    /// The id as text.
    pub(super) fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process's request ids: a counter encrypted with Speck64/128 under a key of 128 bits
/// drawn from the operating system's generator when the process starts. The cipher is a
/// permutation of 64-bit blocks, so an id never repeats within a process (for 2^64
/// requests); without the key the ids look random, so they cannot be ordered or counted,
/// and tell neither the traffic, nor other recipients' rates, nor restarts, nor which
/// replica answered.
pub(super) struct RequestIds {
    cipher: Speck64_128,
    counter: AtomicU64,
}

impl RequestIds {
    /// A generator with a fresh key from the operating system.
    pub(super) fn from_os() -> std::io::Result<RequestIds> {
        let draw = || releasegate_core::rng::os_seed().map_err(std::io::Error::other);
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&draw()?.to_le_bytes());
        key[8..].copy_from_slice(&draw()?.to_le_bytes());
        Ok(RequestIds::with_key(key))
    }

    fn with_key(key: [u8; 16]) -> RequestIds {
        RequestIds {
            cipher: Speck64_128::new(&key.into()),
            counter: AtomicU64::new(0),
        }
    }

    /// The next id.
    pub(super) fn next(&self) -> RequestId {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut block = n.to_be_bytes().into();
        self.cipher.encrypt_block(&mut block);
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(block.as_slice());
        RequestId::from_block(u64::from_be_bytes(bytes))
    }
}

impl std::fmt::Debug for RequestIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestIds { .. }")
    }
}

/// Assigns a fresh request id, refuses oversized header sections, and stamps
/// the id on whatever response comes back. A client-sent id is never reused.
#[derive(Clone, Debug)]
pub(super) struct RequestIdLayer(pub(super) AppState);

impl<S> tower::Layer<S> for RequestIdLayer {
    type Service = RequestIdService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestIdService {
            inner,
            state: self.0.clone(),
        }
    }
}

/// The service of [`RequestIdLayer`].
#[derive(Clone, Debug)]
pub(super) struct RequestIdService<S> {
    inner: S,
    state: AppState,
}

impl<S> tower::Service<Request> for RequestIdService<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Stamped<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match admit(&self.state, &mut request) {
            Ok(ids) => {
                let id = ids.request_id.clone();
                request.extensions_mut().insert(ids);
                Stamped {
                    inner: Ok(self.inner.call(request)),
                    id,
                }
            }
            Err(refused) => {
                let (id, response) = *refused;
                Stamped {
                    inner: Err(Some(response)),
                    id,
                }
            }
        }
    }
}

/// The layer's own response to a request it refuses, and the id stamped on it (boxed:
/// refusals are rare, and a response is large).
pub(super) type Refused = (RequestId, Response);

/// What the layer does before the request goes on: a fresh request id, and either the
/// request made ready for the handler (its trace context replaced) with the ids the layer
/// leaves in its extensions, or the layer's own response (a header section over the
/// limit) with the id it is stamped with. The public listener's direct path to
/// `POST /v1/systemone` calls it as the layer does and hands the ids to the handler.
pub(super) fn admit(state: &AppState, request: &mut Request) -> Result<Ids, Box<Refused>> {
    let id = state.next_request_id();
    let trace = super::trace::TraceContext::from_headers(request.headers());
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let max_header_bytes = state.inner.limits.max_header_bytes;
    if header_bytes > max_header_bytes {
        request_span(&id, Some(trace.trace_id()), None, None).in_scope(|| {
            tracing::warn!(request_id = %id, header_bytes, "request header fields too large");
        });
        let response = Error::HeadersTooLarge(max_header_bytes).into_response();
        return Err(Box::new((id, response)));
    }
    trace.apply(request.headers_mut());
    Ok(Ids {
        request_id: id,
        trace_id: trace.trace_id(),
        spans: trace.span_ids(),
    })
}

/// Stamps the request id on a response, as the layer does on every response.
pub(super) fn stamp(id: &RequestId, response: &mut Response) {
    let headers = response.headers_mut();
    // Names made at compile time (`from_static` at run time checks every byte).
    const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);
    const SDK_REQUEST_ID: HeaderName = HeaderName::from_static(SDK_REQUEST_ID_HEADER);
    headers.insert(REQUEST_ID, id.0.clone());
    headers.insert(SDK_REQUEST_ID, id.0.clone());
}

/// The `request` span of a failed request's log lines: its request id, its W3C trace id
/// and, once known, its recipient and contract. Built only when such a line is about to be
/// written, with everything known by then; the access line carries the same ids as its own
/// fields. (A span per request, open for its whole life, cost more than the rest of its
/// logging: `docs/benchmarks.md`.)
pub(super) fn request_span(
    id: &RequestId,
    trace_id: Option<super::trace::TraceId>,
    recipient: Option<&str>,
    contract: Option<&str>,
) -> tracing::Span {
    tracing::info_span!(
        "request",
        request_id = %id,
        trace_id = trace_id.map(tracing::field::display),
        recipient,
        contract,
    )
}

/// The inner response (or this layer's own), with the request id stamped on it.
pub(super) struct Stamped<F> {
    /// The inner future, or the layer's own response (taken once).
    inner: Result<F, Option<Response>>,
    id: RequestId,
}

impl<F> Future for Stamped<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut response = match &mut this.inner {
            Ok(inner) => ready!(Pin::new(inner).poll(cx))?,
            Err(own) => own
                .take()
                .unwrap_or_else(|| Error::Internal.into_response()),
        };
        stamp(&this.id, &mut response);
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::{RequestId, RequestIds};

    #[test]
    fn request_ids_are_the_block_in_hex() {
        assert_eq!(RequestId::from_block(0).as_str(), "rg-0000000000000000");
        assert_eq!(
            RequestId::from_block(0x0123_4567_89ab_cdef).to_string(),
            "rg-0123456789abcdef"
        );
    }

    #[test]
    fn ids_are_the_counter_under_speck64_128() {
        // The cipher's published test vector (key 1b1a...00, plaintext 3b72...2d).
        let ids = RequestIds::with_key([
            0x1b, 0x1a, 0x19, 0x18, 0x13, 0x12, 0x11, 0x10, 0x0b, 0x0a, 0x09, 0x08, 0x03, 0x02,
            0x01, 0x00,
        ]);
        ids.counter
            .store(0x3b72_6574_7475_432d, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(ids.next().as_str(), "rg-8c6fa548454e028b");
    }

    #[test]
    fn ids_never_repeat_and_keep_no_order_or_count() {
        let ids = RequestIds::from_os().unwrap();
        let drawn: Vec<String> = (0..10_000).map(|_| ids.next().to_string()).collect();
        let unique: std::collections::BTreeSet<&String> = drawn.iter().collect();
        assert_eq!(unique.len(), drawn.len());
        // Consecutive ids are not increasing: about half go down.
        let down = drawn.windows(2).filter(|w| w[1] < w[0]).count();
        assert!((4_000..6_000).contains(&down), "{down} of 9999 went down");
        // A second process (another key) gives other ids for the same counts.
        let other = RequestIds::from_os().unwrap();
        assert_ne!(other.next().to_string(), drawn[0]);
        assert!(
            drawn
                .iter()
                .all(|id| id.len() == 19 && id.starts_with("rg-"))
        );
    }
}
