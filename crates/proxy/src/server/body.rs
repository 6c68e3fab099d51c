//! Reading request bodies: a declared `Content-Length` above the limit is
//! refused before any byte is read, the body must arrive within a total
//! deadline, size limits hold before and after decompression,
//! `Content-Encoding: zstd | gzip | identity`, JSON or `multipart/form-data` (whose
//! cap is `max_body_bytes` plus `max_asset_bytes` plus framing: `multipart`).

use std::io::Read;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use bytes::Bytes;

use super::error::Error;
use releasegate_core::config::Server;

/// A request body, read and decoded.
pub(super) enum Received {
    /// A JSON body.
    Json(Bytes),
    /// A `multipart/form-data` body and its boundary.
    Multipart {
        /// The decoded body.
        bytes: Bytes,
        /// Its boundary.
        boundary: String,
    },
}

/// Reads the body, enforcing its cap (`max_body_bytes`; for multipart see `multipart`)
/// on the declared length, the wire bytes and the decoded bytes, and `body_read_timeout`
/// on the whole transfer.
pub(super) async fn read(
    headers: &HeaderMap,
    body: Body,
    server: &Server,
) -> Result<Received, Error> {
    let mut boundary = None;
    if let Some(content_type) = headers.get(CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or("").to_ascii_lowercase();
        let json_like = text.is_empty()
            || text.starts_with("application/json")
            || text.starts_with("text/plain")
            || text.starts_with("application/x-www-form-urlencoded");
        if text.starts_with("multipart/form-data") {
            let original = content_type.to_str().unwrap_or("");
            boundary = Some(super::multipart::boundary(original)?);
        } else if !json_like {
            return Err(Error::Unsupported(format!(
                "content type `{}` is not supported; send application/json or multipart/form-data",
                text.split(';').next().unwrap_or("")
            )));
        }
    }
    let limit = match boundary {
        Some(_) => super::multipart::body_limit(server),
        None => server.max_body_bytes(),
    };
    if declared_length(headers).is_some_and(|length| length > limit as u64) {
        return Err(Error::TooLarge(limit));
    }
    let bytes = read_bytes(headers, body, server, limit).await?;
    Ok(match boundary {
        Some(boundary) => Received::Multipart { bytes, boundary },
        None => Received::Json(bytes),
    })
}

async fn read_bytes(
    headers: &HeaderMap,
    body: Body,
    server: &Server,
    limit: usize,
) -> Result<Bytes, Error> {
    let deadline = server.body_read_timeout();
    let wire = tokio::time::timeout(deadline, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| Error::BodyTimeout(deadline))?
        .map_err(|error| {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if too_large {
                Error::TooLarge(limit)
            } else {
                Error::BadBody("the request body could not be read".into())
            }
        })?;
    let encoding = headers
        .get(CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .unwrap_or_default();
    match encoding.as_str() {
        "" | "identity" => Ok(wire),
        "zstd" => {
            let decoder = zstd::stream::read::Decoder::new(wire.as_ref())
                .map_err(|_| Error::BadBody("the zstd body could not be decoded".into()))?;
            decode(decoder, limit, "zstd")
        }
        "gzip" | "x-gzip" => decode(flate2::read::GzDecoder::new(wire.as_ref()), limit, "gzip"),
        other => Err(Error::Unsupported(format!(
            "content encoding `{other}` is not supported (zstd, gzip or none)"
        ))),
    }
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

fn decode(reader: impl Read, limit: usize, name: &str) -> Result<Bytes, Error> {
    let mut out = Vec::new();
    // Read one byte past the limit to detect oversize output without decoding it all.
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|_| Error::BadBody(format!("the {name} body could not be decoded")))?;
    if out.len() > limit {
        return Err(Error::TooLarge(limit));
    }
    Ok(Bytes::from(out))
}
