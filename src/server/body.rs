//! Reading request bodies: size limits before and after decompression,
//! `Content-Encoding: zstd | gzip | identity`, JSON only.

use std::io::Read;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use bytes::Bytes;

use super::error::Error;

/// Reads the body, enforcing `limit` on the wire bytes and on the decoded bytes.
pub async fn read(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Error> {
    if let Some(content_type) = headers.get(CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or("").to_ascii_lowercase();
        let json_like = text.is_empty()
            || text.starts_with("application/json")
            || text.starts_with("text/plain")
            || text.starts_with("application/x-www-form-urlencoded");
        if !json_like {
            return Err(Error::Unsupported(format!(
                "content type `{}` is not supported; send application/json",
                text.split(';').next().unwrap_or("")
            )));
        }
    }
    let wire = axum::body::to_bytes(body, limit).await.map_err(|error| {
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
