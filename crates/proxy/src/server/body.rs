//! Reading request bodies: a declared `Content-Length` above the limit is
//! refused before any byte is read, the body must arrive within a total
//! deadline, size limits hold before and after decompression,
//! `Content-Encoding: zstd | gzip | identity`, JSON or `multipart/form-data` (whose
//! cap is `max_body_bytes` plus `max_asset_bytes` plus framing: `multipart`). A gzip body
//! is every member it holds, one after another (as gzip readers read a file), and
//! anything after its last member that is not another member is refused.
//!
//! Every byte held is first taken from the budget of all requests' bytes (`budget`): the
//! wire bytes as they arrive (the declared length at once), a JSON body's decoded bytes
//! before they are decoded. A multipart body is never decoded whole: it is decoded in
//! pieces straight into the parser (`multipart::parse`), which keeps only the parts.

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use bytes::Bytes;
use http_body_util::BodyExt;

use super::budget::Hold;
use super::error::Error;
use decode::{PARSE_MARGIN, declared_decoded, decode_json, decoder};
use releasegate_core::config::Server;

mod decode;

/// A request body, read and decoded.
pub(super) enum Received {
    /// A JSON body and the bytes of the budget it holds.
    Json(Bytes, usize),
    /// A `multipart/form-data` body's parts.
    Multipart(super::multipart::Parts),
}

/// How a body is encoded (`Content-Encoding`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Encoding {
    Identity,
    Zstd,
    Gzip,
}

/// The smallest step a growing buffer takes from the budget.
const MIN_STEP: usize = 16 * 1024;

/// Reads the body, enforcing its cap (`max_body_bytes`; for multipart see `multipart`)
/// on the declared length, the wire bytes and the decoded bytes, and `body_read_timeout`
/// on the whole transfer; every byte it holds is taken from `hold` first.
pub(super) async fn read(
    headers: &HeaderMap,
    body: Body,
    server: &Server,
    hold: &Hold<'_>,
) -> Result<Received, Error> {
    let mut boundary = None;
    if let Some(content_type) = headers.get(CONTENT_TYPE) {
        // Compared in any case where it is (not lowered into a copy for each request).
        let text = content_type.to_str().unwrap_or("");
        let starts = |prefix: &str| {
            text.get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
        };
        let json_like = text.is_empty()
            || starts("application/json")
            || starts("text/plain")
            || starts("application/x-www-form-urlencoded");
        if starts("multipart/form-data") {
            boundary = Some(super::multipart::boundary(text)?);
        } else if !json_like {
            return Err(Error::Unsupported(format!(
                "content type `{}` is not supported; send application/json or multipart/form-data",
                text.split(';').next().unwrap_or("").to_ascii_lowercase()
            )));
        }
    }
    let limit = match boundary {
        Some(_) => super::multipart::body_limit(server),
        None => server.max_body_bytes(),
    };
    let declared = declared_length(headers);
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(Error::TooLarge(limit));
    }
    let deadline = server.body_read_timeout();
    let (wire, wire_held) = tokio::time::timeout_at(
        crate::clock::coarse_tokio() + deadline,
        read_wire(body, limit, declared, hold),
    )
    .await
    .map_err(|_| Error::BodyTimeout(deadline))??;
    let encoding = encoding(headers)?;
    let Some(boundary) = boundary else {
        if encoding == Encoding::Identity {
            return Ok(Received::Json(wire, wire_held));
        }
        let (json, held) = decode_json(&wire, encoding, limit, hold).await?;
        drop(wire);
        hold.release(wire_held);
        return Ok(Received::Json(json, held));
    };
    let name = match encoding {
        Encoding::Identity => "multipart",
        Encoding::Zstd => "zstd",
        Encoding::Gzip => "gzip",
    };
    // The decoded size the body declares (at most the cap) is taken at once, before
    // anything is decoded: a request waits for its share while it holds only its wire bytes.
    let prepaid = declared_decoded(&wire, encoding).min(limit) + PARSE_MARGIN;
    hold.grow(prepaid).await?;
    let source = decoder(wire, encoding)?;
    let parts = super::multipart::parse(source, name, &boundary, server, (hold, prepaid)).await?;
    hold.release(wire_held);
    Ok(Received::Multipart(parts))
}

/// The body's `Content-Encoding` (once at most).
fn encoding(headers: &HeaderMap) -> Result<Encoding, Error> {
    if crate::auth::repeated(headers, &CONTENT_ENCODING) {
        return Err(Error::Repeated("Content-Encoding"));
    }
    let encoding = headers
        .get(CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .unwrap_or_default();
    match encoding.as_str() {
        "" | "identity" => Ok(Encoding::Identity),
        "zstd" => Ok(Encoding::Zstd),
        "gzip" | "x-gzip" => Ok(Encoding::Gzip),
        other => Err(Error::Unsupported(format!(
            "content encoding `{other}` is not supported (zstd, gzip or none)"
        ))),
    }
}

/// The wire bytes, at most `limit`, and the bytes of the budget they hold. A declared
/// length is taken from the budget at once; without one the buffer takes its growth before
/// it grows. A body that arrives in one frame is kept as that frame (no copy).
async fn read_wire(
    mut body: Body,
    limit: usize,
    declared: Option<u64>,
    hold: &Hold<'_>,
) -> Result<(Bytes, usize), Error> {
    let unreadable = |_| Error::BadBody("the request body could not be read".into());
    let mut held = 0usize;
    if let Some(length) = declared {
        // At most `limit` (checked by the caller).
        held = usize::try_from(length).unwrap_or(limit);
        hold.grow(held).await?;
    }
    let mut first: Option<Bytes> = None;
    let mut wire: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(unreadable)?.into_data() else {
            continue;
        };
        let total = first.as_ref().map_or(wire.len(), Bytes::len) + data.len();
        if total > limit {
            return Err(Error::TooLarge(limit));
        }
        if total > held {
            let step = total.max(held.saturating_mul(2)).max(MIN_STEP).min(limit);
            hold.grow(step - held).await?;
            held = step;
        }
        match first.take() {
            None if wire.is_empty() => first = Some(data),
            taken => {
                if wire.capacity() < total {
                    wire.reserve_exact(held - wire.len());
                }
                if let Some(taken) = taken {
                    wire.extend_from_slice(&taken);
                }
                wire.extend_from_slice(&data);
            }
        }
    }
    let wire = first.unwrap_or_else(|| Bytes::from(wire));
    Ok((wire, held))
}

/// The `Content-Length` the client declared, if any (hyper has already
/// refused a malformed one).
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
