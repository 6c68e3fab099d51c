//! A remote provider: its URLs, key and concurrency slots, and the exchange itself,
//! over the loop's own HTTP/1.1 pool (`http://`) or hyper-util's client (`https://`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::http::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT,
};
use axum::http::{Method, Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::hints::retry_hints;
use super::{
    Client, Error, FORWARDED, FORWARDED_HEADERS, Grid, MAX_ERROR_BODY_BYTES, Post, Reply, pool,
    segments,
};
use releasegate_core::wire::provider::provider_error;

/// The `user-agent` sent when the caller's is not forwarded.
const USER_AGENT_VALUE: HeaderValue =
    HeaderValue::from_static(concat!("releasegate/", env!("CARGO_PKG_VERSION")));

#[derive(Debug)]
pub(super) struct Remote {
    /// `{base_url}/v1/systemone`, parsed once: a URL is not re-parsed per call.
    pub(super) systemone_url: Uri,
    /// `{base_url}/v1/models`.
    pub(super) models_url: Uri,
    /// `Bearer {key}`, marked sensitive (never printed by `Debug`).
    pub(super) authorization: Option<HeaderValue>,
    pub(super) timeout: Duration,
    pub(super) queue_timeout: Duration,
    pub(super) permits: Semaphore,
    /// For an `http://` provider: its own connections (`pool`).
    pub(super) plain: Option<Plain>,
}

/// How an `http://` provider is reached: HTTP/1.1 over the pool of the calling recipient
/// on its event loop.
#[derive(Debug)]
pub(super) struct Plain {
    /// A pool per connection slot (`Upstreams`) and event loop.
    pools: Grid<Arc<pool::Pool>>,
    /// The `Host` header: the base URL's authority.
    host: HeaderValue,
    /// The origin-form targets (`{base path}/v1/systemone`, `.../v1/models`).
    systemone: Uri,
    models: Uri,
}

impl Plain {
    /// The connections of a provider with these URLs, `slots` by `event_loops` pools, or
    /// `None` for `https://`.
    pub(super) fn new(
        systemone: &Uri,
        models: &Uri,
        slots: usize,
        event_loops: usize,
    ) -> Option<Plain> {
        if systemone.scheme_str() != Some("http") {
            return None;
        }
        let authority = systemone.authority()?;
        let address = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        );
        let origin = |url: &Uri| -> Option<Uri> { url.path_and_query()?.as_str().parse().ok() };
        Some(Plain {
            pools: Grid::new(slots, event_loops, || Ok(pool::Pool::new(address.clone()))).ok()?,
            host: HeaderValue::from_str(authority.as_str()).ok()?,
            systemone: origin(systemone)?,
            models: origin(models)?,
        })
    }
}

/// `application/json`, made at compile time (`from_static` at run time checks every
/// byte): what the proxy accepts from providers, and the type of its own JSON bodies.
pub(crate) const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

impl Remote {
    /// Calls the provider; `started` is when the call began: the queue and the whole call
    /// have their deadlines from it (`queue_timeout`, `timeout`), so neither reads the clock.
    pub(super) async fn call(
        &self,
        client: &Client,
        slot: usize,
        post: Option<Post<'_>>,
        max_body: usize,
        started: tokio::time::Instant,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        // A request that cannot get a slot soon is shed (503) rather than queued for its
        // whole budget: it never reached the provider, so the caller may retry elsewhere.
        let _permit = tokio::time::timeout_at(started + self.queue_timeout, self.permits.acquire())
            .await
            .map_err(|_| Error::Saturated)?
            .map_err(|_| Error::Saturated)?;
        let exchange = async {
            match &self.plain {
                Some(plain) => {
                    self.call_plain(plain.pools.get(slot), plain, post, max_body, sent)
                        .await
                }
                None => self.call_client(client, post, max_body, sent).await,
            }
        };
        tokio::time::timeout_at(started + self.timeout, exchange)
            .await
            .map_err(|_| Error::Timeout)?
    }

    /// The headers sent upstream, in order (without `host`, `content-length`).
    fn headers(&self, post: Option<&Post<'_>>, mut emit: impl FnMut(&HeaderName, &HeaderValue)) {
        let mut user_agent = false;
        if let Some(post) = post {
            emit(&CONTENT_TYPE, post.content_type);
            // Each forwarded name's first value (what `HeaderMap::get` returns), found in
            // one pass over the request's few fields instead of one hashed lookup per name.
            let forwarded = &FORWARDED;
            let mut found: [Option<&HeaderValue>; FORWARDED_HEADERS.len()] =
                [None; FORWARDED_HEADERS.len()];
            for (name, value) in post.headers {
                if let Some(at) = forwarded.iter().position(|forwarded| forwarded == name) {
                    found[at].get_or_insert(value);
                }
            }
            for (name, value) in forwarded.iter().zip(found) {
                if let Some(value) = value {
                    user_agent |= *name == USER_AGENT;
                    emit(name, value);
                }
            }
            for switch in post.switches {
                emit(
                    &HeaderName::from_static(switch.lower()),
                    &HeaderValue::from_static("true"),
                );
            }
        }
        emit(&ACCEPT, &APPLICATION_JSON);
        if !user_agent {
            emit(&USER_AGENT, &USER_AGENT_VALUE);
        }
        if let Some(authorization) = &self.authorization {
            emit(&AUTHORIZATION, authorization);
        }
    }

    /// An `http://` provider: the request written by the proxy over the loop's pool.
    async fn call_plain(
        &self,
        pool: &Arc<pool::Pool>,
        plain: &Plain,
        post: Option<Post<'_>>,
        max_body: usize,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        let (method, target, body): (&[u8], &Uri, &[Bytes]) = match &post {
            Some(post) => (b"POST", &plain.systemone, post.body),
            None => (b"GET", &plain.models, &[]),
        };
        let length: usize = body.iter().map(Bytes::len).sum();
        // One body segment (a JSON body) is copied after the head, so the request goes out
        // in one write; more (a multipart body's images) go out after the head as they are.
        let inline = match body {
            [one] => one.len(),
            _ => 0,
        };
        let mut request = Vec::with_capacity(512 + inline);
        request.extend_from_slice(method);
        request.push(b' ');
        request.extend_from_slice(
            target
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .as_bytes(),
        );
        request.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        request.extend_from_slice(plain.host.as_bytes());
        request.extend_from_slice(b"\r\n");
        self.headers(post.as_ref(), |name, value| {
            request.extend_from_slice(name.as_str().as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value.as_bytes());
            request.extend_from_slice(b"\r\n");
        });
        if post.is_some() {
            request.extend_from_slice(b"content-length: ");
            request.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        let read = |status: u16| {
            if (200..300).contains(&status) {
                Some(max_body)
            } else {
                wants_error_body(status, post.as_ref()).then_some(MAX_ERROR_BODY_BYTES)
            }
        };
        let response = match body {
            [] => pool.send_tracked(&request[..], &read, sent).await?,
            [one] => {
                request.extend_from_slice(one);
                pool.send_tracked(&request[..], &read, sent).await?
            }
            _ => {
                let segmented = pool::Segmented {
                    head: &request,
                    body,
                };
                pool.send_tracked(&segmented, &read, sent).await?
            }
        };
        match response.body {
            pool::Body::Read(body) if (200..300).contains(&response.status) => {
                Ok(Reply::Success(body))
            }
            body => {
                let body = match body {
                    pool::Body::Read(body) => Some(body),
                    pool::Body::Skipped | pool::Body::TooLarge => None,
                };
                Ok(status_reply(
                    response.status,
                    &response.hints,
                    body.as_deref(),
                    post.as_ref(),
                ))
            }
        }
    }

    /// An `https://` provider: hyper-util's pooled client.
    async fn call_client(
        &self,
        client: &Client,
        post: Option<Post<'_>>,
        max_body: usize,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        let (method, uri, body) = match &post {
            Some(post) => (Method::POST, self.systemone_url.clone(), post.body),
            None => (Method::GET, self.models_url.clone(), &[][..]),
        };
        // Reference counts of the segments, no copies.
        let mut request = Request::new(segments::Segments::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let upstream_headers = request.headers_mut();
        upstream_headers.reserve(8);
        self.headers(post.as_ref(), |name, value| {
            upstream_headers.insert(name.clone(), value.clone());
        });
        // The client connects and writes as one step: counted as sent from here, unless it
        // says the connection could not be made.
        sent.store(true, Ordering::Relaxed);
        let response = client.request(request).await.map_err(|error| {
            let error = classify(error);
            if matches!(error, Error::Connect(_)) {
                sent.store(false, Ordering::Relaxed);
            }
            error
        })?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            // The kind of a client error is read from a bounded body, then the body is
            // dropped here: only the enum leaves this module.
            let (parts, body) = response.into_parts();
            let body = if wants_error_body(status, post.as_ref()) {
                Limited::new(body, MAX_ERROR_BODY_BYTES)
                    .collect()
                    .await
                    .ok()
                    .map(|body| body.to_bytes())
            } else {
                None
            };
            return Ok(status_reply(
                status,
                &parts.headers,
                body.as_deref(),
                post.as_ref(),
            ));
        }
        let declared = response
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body as u64) {
            return Err(Error::TooLarge);
        }
        let body = Limited::new(response.into_body(), max_body)
            .collect()
            .await
            .map_err(|error| {
                if error.is::<http_body_util::LengthLimitError>() {
                    Error::TooLarge
                } else {
                    Error::Transport(error)
                }
            })?;
        Ok(Reply::Success(body.to_bytes()))
    }
}

/// Whether the body of a non-2xx answer is read: a client error (but 401, 403, 429) to
/// a System One request, whose body names its kind (`wire::provider`).
fn wants_error_body(status: u16, post: Option<&Post<'_>>) -> bool {
    post.is_some() && (400..500).contains(&status) && !matches!(status, 401 | 403 | 429)
}

/// A non-2xx answer as the proxy keeps it: its status, the retry hints re-written (429
/// and 529) and the kind its bounded body names; the body itself goes no further.
fn status_reply(
    status: u16,
    headers: &HeaderMap,
    body: Option<&[u8]>,
    post: Option<&Post<'_>>,
) -> Reply {
    let (retry_after, retry_after_ms) = if status == 429 || status == 529 {
        retry_hints(headers, SystemTime::now())
    } else {
        (None, None)
    };
    let problem = match (post, body) {
        (Some(post), Some(body)) => provider_error(
            status,
            body,
            post.sent
                .map_or(&Value::Null, releasegate_core::wire::Asked::upstream),
        ),
        _ => None,
    };
    Reply::Status {
        status,
        retry_after,
        retry_after_ms,
        problem,
    }
}

/// A client error as the failure it is: a connection that could not be made (or not in
/// time: a connect timeout is a timeout), or an exchange that broke off.
fn classify(error: hyper_util::client::legacy::Error) -> Error {
    let source: &(dyn std::error::Error + 'static) = &error;
    let timed_out = std::iter::successors(Some(source), |cause| cause.source()).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    });
    if timed_out {
        Error::Timeout
    } else if error.is_connect() {
        Error::Connect(Box::new(error))
    } else {
        Error::Transport(Box::new(error))
    }
}
