//! `POST /v1/systemone`: a request's way from its body to the released answer. The body is
//! read and checked against the contract, rebuilt for the provider, sent, and the provider's
//! answer released through the pure release path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use releasegate_core::config::Server;
use releasegate_core::contract::{Contract, ForwardHeader};
use releasegate_core::release;
use releasegate_core::rng::Rng;
use releasegate_core::wire;

use super::reply::{reject, success_body, upstream_error};
use super::trail::{Trail, upstream_span};
use super::{Selection, select_contract};
use crate::cache;
use crate::server::budget::Hold;
use crate::server::error::Error;
use crate::server::{AppState, Live, body, multipart};
use crate::upstream::{self, Reply};

/// A request's way through the contract's answer cache (`cache`): whether it may be looked
/// up and filled, its digest, and the entry found.
struct Cached {
    allowed: cache::Allowed,
    digest: Option<cache::RequestDigest>,
    hit: Option<Arc<cache::Entry>>,
}

impl Cached {
    /// Looks the request up when its contract has a cache and the caller allows it; records
    /// `hit`, `miss` or `bypass` (the caller's `no-store` or `no-cache`) on the trail.
    fn look_up(
        live: &Live,
        contract: &Contract,
        headers: &HeaderMap,
        trail: &mut Trail,
        json: &[u8],
        images: &[wire::assets::Image<'_>],
        switches: &[ForwardHeader],
    ) -> Cached {
        let (Some(answers), Some(_)) = (&live.cache, contract.cache()) else {
            return Cached {
                allowed: cache::Allowed::Neither,
                digest: None,
                hit: None,
            };
        };
        let allowed = cache::Allowed::from_headers(headers);
        let switches: Vec<&str> = switches.iter().map(|switch| switch.lower()).collect();
        let digest = (allowed != cache::Allowed::Neither).then(|| {
            cache::RequestDigest::new(json, images.iter().map(|image| image.bytes), &switches)
        });
        let hit = digest
            .filter(|_| allowed == cache::Allowed::Both)
            .and_then(|digest| {
                let provider = live.upstreams.first_admitting(contract);
                answers.get(contract, trail.recipient.as_deref(), digest, provider)
            });
        let result = match (&hit, allowed) {
            (Some(_), _) => "hit",
            (None, cache::Allowed::Both) => "miss",
            (None, _) => "bypass",
        };
        trail.cache = Some(result);
        answers.count(contract, result);
        Cached {
            allowed,
            digest,
            hit,
        }
    }

    /// The entry found.
    fn hit(&self) -> Option<&Arc<cache::Entry>> {
        self.hit.as_ref()
    }

    /// Keeps the native answer the contract just released, unless it came from the cache
    /// or the caller said `no-store`.
    fn fill(self, live: &Live, contract: &Contract, trail: &Trail, provider: &str, native: Bytes) {
        if let (Some(answers), Some(digest), None) = (&live.cache, self.digest, &self.hit)
            && self.allowed != cache::Allowed::Neither
        {
            answers.fill(
                contract,
                trail.recipient.as_deref(),
                digest,
                provider,
                native,
            );
        }
    }
}

/// A multipart request's other parts by name: content type and bytes.
type Parts = BTreeMap<String, (Option<String>, Bytes)>;

/// Answers a System One request: its contract, its body checked and rebuilt, the
/// provider's answer and its release (the body that goes out). Every byte of the request
/// held on the way (wire, decoded, parts, the upstream body) is taken from the budget of
/// all requests' bytes first (`budget`); the hold gives it back however the request ends.
pub(super) async fn answer(
    state: &AppState,
    selection: Selection<'_>,
    body: Body,
    trail: &mut Trail,
) -> Result<Vec<u8>, Error> {
    let headers = selection.headers;
    let live = state.live();
    let contract = select_contract(&live, selection, trail).await?;
    let server = &state.inner.server;
    let hold = state.inner.budget.hold();
    let (bytes, bytes_held, parts) = read_request(headers, body, server, &hold, trail).await?;
    // Checked against the question sets this recipient sent before (`wire::KnownRooms`).
    let mut asked = wire::check_bytes(&bytes, contract, trail.recipient.as_deref())?;
    // The caller's JSON is no longer read: only its parts (images) stay.
    drop(bytes);
    hold.release(bytes_held);
    // Images: checked against the parts and rebuilt (inline ones re-encoded, parts
    // renamed `asset-N`); a request with part images goes upstream as multipart.
    let part_refs = part_refs(&parts);
    let checked = wire::assets::check(asked.assets(), &part_refs, server.asset_limits())?;
    asked.set_assets(checked.assets);
    // Never the caller's bytes: the contract's questions, the caller's content.
    let json = Bytes::from(asked.upstream_bytes());
    // Sampled for the live capture: keep the JSON request (a world's request; images are
    // not captured) and the answer (reference counts, no copies).
    let captured = state
        .capture(contract.name())
        .filter(|capture| capture.sample())
        .map(|_| json.clone());
    let (content_type, forward) = upstream_body(&json, &checked.images, &parts)?;
    // The upstream JSON and the framing around it (the images are the parts' own bytes).
    hold.grow(forward.iter().map(Bytes::len).sum::<usize>() - images_len(&checked.images))
        .await?;
    let called = trail.clock();
    let switches = switched_on(state, contract, headers);
    let post = upstream::Post {
        body: &forward,
        content_type: &content_type,
        json: &json,
        sent: Some(&asked),
        headers,
        switches: &switches,
    };
    let cached = Cached::look_up(
        &live,
        contract,
        headers,
        trail,
        &json,
        &checked.images,
        &switches,
    );
    let (reply, provider) = match cached.hit() {
        Some(entry) => (
            Ok(Reply::Success(entry.native.clone())),
            entry.provider.clone(),
        ),
        None => {
            let routed = live
                .upstreams
                .route(contract, trail.recipient.as_deref(), post)
                .await;
            trail.upstream_wait = routed.waited;
            let provider = routed.provider.map_or(contract.provider(), |index| {
                contract.providers()[index].as_str()
            });
            let reply = routed
                .result
                .map_err(|error| upstream_error(&live, contract, error));
            upstream_span(state, trail, contract, "upstream systemone", called, &reply);
            (reply, provider.to_string())
        }
    };
    // The request's bytes are gone: its share goes back before the release.
    drop((forward, parts));
    drop(hold);
    // The provider that gave the reply, an error included (the operators' log names it).
    if provider != contract.provider() {
        trail.provider = Some(provider.clone());
    }
    let reply = reply?;
    let mut captured = pending_capture(captured, &reply);
    if let Some(pending) = captured.as_mut().filter(|_| contract.providers().len() > 1) {
        pending.provider = Some(provider.clone());
    }
    let native = success_body(reply)?;
    // Released as the answering provider's answers are (its own WCPQ codebooks); a provider
    // the contract does not list cannot have answered: nothing goes out.
    let releaser = contract
        .shared_for_provider(&provider)
        .ok_or(Error::Internal)?;
    trail.contract = Some(releaser.clone());
    let releasing = trail.clock();
    let released = release_off_thread(&releaser, asked, native.clone()).await?;
    release_span(state, trail, contract, releasing, &released);
    let released = released.map_err(|reason| reject(state, contract, reason))?;
    cached.fill(&live, contract, trail, &provider, native);
    record_released(state, &live, contract, &released.answers);
    trail.answers = released.answers;
    trail.capture = captured;
    Ok(released.body)
}

/// The bytes of the images that go upstream.
fn images_len(images: &[wire::assets::Image<'_>]) -> usize {
    images.iter().map(|image| image.bytes.len()).sum()
}

/// Reads the body (`body::read`: its cap and encodings): the JSON request and the bytes of
/// the budget it holds, and of a multipart body its other parts.
async fn read_request(
    headers: &HeaderMap,
    body: Body,
    server: &Server,
    hold: &Hold<'_>,
    trail: &mut Trail,
) -> Result<(Bytes, usize, Parts), Error> {
    let received = body::read(headers, body, server, hold).await?;
    trail.body_read = true;
    Ok(match received {
        body::Received::Json(bytes, held) => (bytes, held, Default::default()),
        body::Received::Multipart(parts) => (parts.request, parts.request_held, parts.others),
    })
}

/// The parts as the asset check reads them.
fn part_refs(parts: &Parts) -> BTreeMap<String, wire::assets::Part<'_>> {
    parts
        .iter()
        .map(|(name, (content_type, bytes))| {
            (
                name.clone(),
                wire::assets::Part {
                    content_type: content_type.as_deref(),
                    bytes,
                },
            )
        })
        .collect()
}

/// What goes upstream: the JSON alone, or with part images a multipart body whose images
/// are slices of `parts` (segments, no copy).
fn upstream_body(
    json: &Bytes,
    images: &[wire::assets::Image<'_>],
    parts: &Parts,
) -> Result<(header::HeaderValue, Vec<Bytes>), Error> {
    if images.is_empty() {
        Ok((upstream::APPLICATION_JSON, vec![json.clone()]))
    } else {
        let owners: Vec<&Bytes> = parts.values().map(|(_, bytes)| bytes).collect();
        let (content_type, body) = multipart::build(json, images, &owners)?;
        Ok((
            header::HeaderValue::from_str(&content_type).map_err(|_| Error::Internal)?,
            body,
        ))
    }
}

/// The contract's `forward_headers` the caller switched on (`true`), counted by name.
fn switched_on(state: &AppState, contract: &Contract, headers: &HeaderMap) -> Vec<ForwardHeader> {
    let switches: Vec<ForwardHeader> = contract
        .forward_headers()
        .iter()
        .copied()
        .filter(|switch| {
            headers
                .get(switch.lower())
                .is_some_and(|value| ForwardHeader::is_on(value.as_bytes()))
        })
        .collect();
    for switch in &switches {
        state
            .metrics()
            .forwarded_headers
            .with_label_values(&[contract.name(), switch.lower()])
            .inc();
    }
    switches
}

/// A sampled request and the provider's 2xx answer, for the live capture.
fn pending_capture(request: Option<Bytes>, reply: &Reply) -> Option<crate::capture::Pending> {
    match (request, reply) {
        (Some(request), Reply::Success(response)) => Some(crate::capture::Pending {
            request,
            response: response.clone(),
            provider: None,
        }),
        _ => None,
    }
}

/// The release's INTERNAL span (with export on).
fn release_span(
    state: &AppState,
    trail: &Trail,
    contract: &Contract,
    start: Option<SystemTime>,
    released: &Result<Sent, wire::Invalid>,
) {
    trail.child(
        state,
        (
            SpanKind::Internal,
            "release",
            crate::server::trace::new_span_id(),
        ),
        start,
        || {
            vec![
                KeyValue::new("releasegate.contract", contract.name().to_string()),
                KeyValue::new(
                    "releasegate.outcome",
                    if released.is_ok() {
                        "released"
                    } else {
                        "rejected"
                    },
                ),
                KeyValue::new(
                    "releasegate.answers",
                    released.as_ref().map_or(0, |r| r.answers.len() as i64),
                ),
            ]
        },
        released.is_err(),
    );
}

/// A released body as the bytes that go out, and what happened to each answer.
struct Sent {
    body: Vec<u8>,
    answers: Vec<release::AnswerRecord>,
}

/// Runs the pure release path on the provider's answer (`native`, read into an arena as
/// a [`wire::json::Doc`], or as a borrowed [`wire::Json`]: no `Value` is built for it);
/// contracts whose mechanisms scan codebooks per request run on the blocking pool so
/// they never stall the async workers (each of its threads then keeps an arena of its
/// own, at most 1 MiB, until the thread ends).
async fn release_off_thread(
    contract: &Arc<Contract>,
    asked: wire::Asked,
    native: Bytes,
) -> Result<Result<Sent, wire::Invalid>, Error> {
    let seed = if contract.needs_fresh_randomness() {
        releasegate_core::rng::os_seed().map_err(|_| Error::Internal)?
    } else {
        0
    };
    let run = {
        let contract = contract.clone();
        move || {
            let mut rng = Rng::new(seed);
            let mut options = release::Options {
                rng: &mut rng,
                evaluate: false,
            };
            // Read into this thread's arena: each answer straight into its class vector
            // where it can be (`wire::read_answers`), else as a [`wire::json::Doc`], else
            // as a `Json`; all three mean what a `Value` of the same bytes means.
            wire::json::with_arena(|arena| {
                if let Some(read) = wire::read_answers(&native, arena, &contract, &asked) {
                    let released = release::release_read(&contract, &asked, &read, &mut options);
                    return released.map(Sent::from);
                }
                match wire::json::Doc::read(&native, arena) {
                    Some(native) => release_sent(&contract, &asked, &native, &mut options),
                    None => {
                        let native =
                            wire::Json::parse(&native).map_err(|_| wire::Invalid::NotJson)?;
                        release_sent(&contract, &asked, &native, &mut options)
                    }
                }
            })
        }
    };
    if contract.is_heavy() {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|_| Error::Internal)
    } else {
        Ok(run())
    }
}

/// The release of one native answer, written.
fn release_sent<N: wire::Node>(
    contract: &Contract,
    asked: &wire::Asked,
    native: &N,
    options: &mut release::Options<'_>,
) -> Result<Sent, wire::Invalid> {
    release::release(contract, asked, native, options).map(Sent::from)
}

impl From<release::Release<'_>> for Sent {
    fn from(released: release::Release<'_>) -> Sent {
        Sent {
            body: released.to_bytes(),
            answers: released.answers,
        }
    }
}

/// Counts each released answer in its contract's series.
fn record_released(
    state: &AppState,
    live: &Live,
    contract: &Contract,
    answers: &[release::AnswerRecord],
) {
    for record in answers {
        state
            .metrics()
            .record_answer(&live.answer_series, contract.name(), record);
    }
}
