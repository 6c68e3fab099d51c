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
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::{AppState, Error, REQUEST_ID_HEADER};

/// The request id header the official System One SDKs read.
pub const SDK_REQUEST_ID_HEADER: &str = "x-typesafe-request-id";

/// Most bytes of header fields (names, values and `": "`/CRLF framing) a
/// request may carry; beyond it the proxy answers 431 in its JSON shape.
/// Far larger sections, or more than 100 fields, are refused by hyper itself
/// before any routing, with a bare 431 (see README, Errors).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// What the middleware leaves in a request's extensions for handlers and logs (one
/// extension: each insertion is a map operation per request).
#[derive(Debug, Clone)]
pub(super) struct Ids {
    /// The proxy's request id.
    pub(super) request_id: RequestId,
    /// The request's W3C trace id.
    pub(super) trace_id: super::trace::TraceId,
}

/// The proxy's request id, in the request's extensions for handlers and logs.
/// Held as the header value it is sent as (cloning it is a reference count).
#[derive(Debug, Clone)]
pub(super) struct RequestId(HeaderValue);

impl RequestId {
    /// `rg-{prefix:016x}-{counter:x}`: a process-random prefix and a counter.
    pub(super) fn new(prefix: u64, counter: u64) -> RequestId {
        let mut id = [0u8; 3 + 16 + 1 + 16];
        id[..3].copy_from_slice(b"rg-");
        hex(&mut id[3..19], prefix);
        id[19] = b'-';
        let digits = (64 - counter.leading_zeros()).div_ceil(4).max(1) as usize;
        hex(&mut id[20..20 + digits], counter);
        // Lower-case hex digits and dashes: always a valid header value.
        let value = HeaderValue::from_bytes(&id[..20 + digits])
            .unwrap_or_else(|_| HeaderValue::from_static("rg-invalid"));
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

/// Writes `value` as lower-case hex into all of `out` (most significant digit first).
fn hex(out: &mut [u8], mut value: u64) {
    for byte in out.iter_mut().rev() {
        *byte = b"0123456789abcdef"[(value & 0xf) as usize];
        value >>= 4;
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
        let id = self.state.next_request_id();
        let trace = super::trace::TraceContext::from_headers(request.headers());
        let header_bytes: usize = request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
        if header_bytes > MAX_HEADER_BYTES {
            request_span(&id, Some(trace.trace_id()), None, None).in_scope(|| {
                tracing::warn!(request_id = %id, header_bytes, "request header fields too large");
            });
            return Stamped {
                inner: Err(Some(
                    Error::HeadersTooLarge(MAX_HEADER_BYTES).into_response(),
                )),
                id,
            };
        }
        let trace_id = trace.trace_id();
        trace.apply(request.headers_mut());
        request.extensions_mut().insert(Ids {
            request_id: id.clone(),
            trace_id,
        });
        Stamped {
            inner: Ok(self.inner.call(request)),
            id,
        }
    }
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
        let headers = response.headers_mut();
        headers.insert(
            HeaderName::from_static(REQUEST_ID_HEADER),
            this.id.0.clone(),
        );
        headers.insert(
            HeaderName::from_static(SDK_REQUEST_ID_HEADER),
            this.id.0.clone(),
        );
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::RequestId;

    #[test]
    fn request_ids_are_the_prefix_and_the_counter_in_hex() {
        assert_eq!(RequestId::new(0, 0).as_str(), "rg-0000000000000000-0");
        assert_eq!(
            RequestId::new(0x0123_4567_89ab_cdef, 0x1f).to_string(),
            "rg-0123456789abcdef-1f"
        );
        assert_eq!(
            RequestId::new(u64::MAX, u64::MAX).as_str(),
            "rg-ffffffffffffffff-ffffffffffffffff"
        );
        assert_eq!(RequestId::new(1, 16).as_str(), "rg-0000000000000001-10");
    }
}
