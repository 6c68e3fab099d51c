//! `multipart/form-data` request bodies (the Python SDK's image requests), read with
//! `multer` from the body already read and decoded under its caps (`body::read`): the
//! `request` part (the JSON body) and every other part by name, each bounded. Malformed
//! bodies are 400 `invalid_multipart`, oversized parts 413; nothing here panics.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::error::Error;
use releasegate_core::config::Server;
use releasegate_core::wire::assets::AssetError;

/// Most parts of a multipart request (the `request` part and its images).
pub(crate) const MAX_PARTS: usize = 64;

/// Room for multipart framing (boundaries, part headers) on top of the JSON and image caps.
pub(crate) const FRAMING_BYTES: usize = 64 * 1024;

/// A multipart request's parts: the JSON body and the others by name.
#[derive(Debug)]
pub(crate) struct Parts {
    /// The `request` part.
    pub(crate) request: Bytes,
    /// Every other part: its content type (the essence, lower case) and bytes.
    pub(crate) others: BTreeMap<String, (Option<String>, Bytes)>,
}

/// The body cap of a multipart request: its JSON, its images and their framing.
pub(super) fn body_limit(server: &Server) -> usize {
    server
        .max_body_bytes()
        .saturating_add(server.max_asset_bytes())
        .saturating_add(FRAMING_BYTES)
}

/// The boundary of a `multipart/form-data` content type.
pub(crate) fn boundary(content_type: &str) -> Result<String, Error> {
    multer::parse_boundary(content_type)
        .map_err(|_| invalid("the multipart/form-data content type has no valid boundary"))
}

fn invalid(message: &str) -> Error {
    Error::BadMultipart(message.to_string())
}

/// Splits a multipart body into its parts.
pub(crate) async fn parse(body: Bytes, boundary: &str, server: &Server) -> Result<Parts, Error> {
    let largest_part = server.max_body_bytes().max(server.max_image_bytes());
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new()
            .whole_stream(body_limit(server) as u64)
            .per_field(largest_part as u64),
    );
    let stream =
        futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) });
    let mut multipart =
        multer::Multipart::with_constraints(stream, boundary.to_string(), constraints);
    let mut request = None;
    let mut others = BTreeMap::new();
    let mut count = 0usize;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|error| multer_error(&error, server))?
    {
        count += 1;
        if count > MAX_PARTS {
            return Err(invalid(&format!(
                "a multipart request carries at most {MAX_PARTS} parts"
            )));
        }
        let name = field
            .name()
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| invalid("a part has no name"))?;
        let content_type = field
            .content_type()
            .map(|mime| mime.essence_str().to_ascii_lowercase());
        let data = field
            .bytes()
            .await
            .map_err(|error| multer_error(&error, server))?;
        if name == "request" {
            if request.is_some() {
                return Err(invalid("the `request` part appears twice"));
            }
            if data.len() > server.max_body_bytes() {
                return Err(Error::TooLarge(server.max_body_bytes()));
            }
            if content_type
                .as_deref()
                .is_some_and(|t| t != "application/json" && t != "text/plain")
            {
                return Err(invalid("the `request` part must be application/json"));
            }
            request = Some(data);
        } else {
            if others.contains_key(&name) {
                return Err(invalid("a part name appears twice"));
            }
            if data.len() > server.max_image_bytes() {
                return Err(Error::Asset(AssetError::TooLarge(format!(
                    "an image part exceeds {} bytes",
                    server.max_image_bytes()
                ))));
            }
            others.insert(name, (content_type, data));
        }
    }
    let request = request.ok_or_else(|| invalid("the multipart body has no `request` part"))?;
    Ok(Parts { request, others })
}

fn multer_error(error: &multer::Error, server: &Server) -> Error {
    match error {
        multer::Error::FieldSizeExceeded { .. } => {
            Error::TooLarge(server.max_body_bytes().max(server.max_image_bytes()))
        }
        multer::Error::StreamSizeExceeded { .. } => Error::TooLarge(body_limit(server)),
        multer::Error::IncompleteStream
        | multer::Error::IncompleteFieldData { .. }
        | multer::Error::IncompleteHeaders => invalid("the multipart body is cut short"),
        _ => invalid("the multipart body is malformed"),
    }
}

/// A multipart body for the provider, built by the proxy: the `request` part (the
/// upstream JSON), then each image as its own part (`asset-N`, its checked type).
pub(crate) fn build(
    json: &[u8],
    images: &[releasegate_core::wire::assets::Image<'_>],
) -> Result<(String, Bytes), Error> {
    let seed = || releasegate_core::rng::os_seed().map_err(|_| Error::Internal);
    let boundary = format!("releasegate-{:016x}{:016x}", seed()?, seed()?);
    let mut out = Vec::with_capacity(
        json.len() + images.iter().map(|i| i.bytes.len() + 160).sum::<usize>() + 256,
    );
    let mut part = |name: &str, filename: bool, content_type: &str, bytes: &[u8]| {
        out.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes(),
        );
        if filename {
            out.extend_from_slice(format!("; filename=\"{name}\"").as_bytes());
        }
        out.extend_from_slice(format!("\r\nContent-Type: {content_type}\r\n\r\n").as_bytes());
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    };
    part("request", false, "application/json", json);
    for image in images {
        part(&image.part, true, image.format.content_type(), image.bytes);
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Ok((
        format!("multipart/form-data; boundary={boundary}"),
        Bytes::from(out),
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use releasegate_core::wire::assets;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";
    const BOUNDARY: &str = "0123456789abcdef";

    fn server() -> Server {
        let text = format!(
            "[server]\nmax_body_bytes = 4096\nmax_image_bytes = 512\nmax_asset_bytes = 1024\n\
             [providers.p]\nkind = \"simulated\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
             [contracts.c]\nprovider = \"p\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_native\"\n",
            "0".repeat(64)
        );
        crate::load::from_toml_with_env(&text, &|_| None)
            .unwrap()
            .server()
            .clone()
    }

    fn valid() -> Vec<u8> {
        let json = br#"{"model":"m","state":"<image:a>","questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}},"assets":{"<image:a>":{"type":"image","part":"asset-0"}}}"#;
        let mut out = Vec::new();
        for (name, content_type, bytes) in [
            ("request", "application/json", &json[..]),
            ("asset-0", "image/png", PNG),
        ] {
            out.extend_from_slice(
                format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n").as_bytes(),
            );
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        out
    }

    /// Parses and checks a body as the handler does; never panics, and every refusal is
    /// one of the client errors.
    fn outcome(body: Vec<u8>) -> Result<usize, Error> {
        let server = server();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let parts = runtime.block_on(parse(Bytes::from(body), BOUNDARY, &server))?;
        let request: serde_json::Value = serde_json::from_slice(&parts.request)
            .map_err(|_| Error::BadBody("not JSON".into()))?;
        let refs: BTreeMap<String, assets::Part<'_>> = parts
            .others
            .iter()
            .map(|(name, (content_type, bytes))| {
                (
                    name.clone(),
                    assets::Part {
                        content_type: content_type.as_deref(),
                        bytes,
                    },
                )
            })
            .collect();
        let checked = assets::check(request.get("assets"), &refs, server.asset_limits())?;
        Ok(checked.images.len())
    }

    fn is_client_error(error: &Error) -> bool {
        matches!(
            error,
            Error::BadMultipart(_) | Error::TooLarge(_) | Error::BadBody(_) | Error::Asset(_)
        ) && error.status().is_client_error()
    }

    #[test]
    fn the_valid_body_parses_and_the_corpus_is_refused() {
        assert_eq!(outcome(valid()).unwrap(), 1);
        let body = valid();
        let corpus: Vec<Vec<u8>> = vec![
            Vec::new(),
            body[..body.len() / 2].to_vec(),
            body[..body.len() - 3].to_vec(),
            body.iter()
                .map(|b| if *b == b'"' { b'\'' } else { *b })
                .collect(),
            format!("--{BOUNDARY}\r\n\r\n--{BOUNDARY}--\r\n").into_bytes(),
        ];
        // What follows the closing delimiter is the epilogue (RFC 2046): ignored, never
        // forwarded (the upstream body is rebuilt).
        assert_eq!(outcome([&body[..], &body[..]].concat()).unwrap(), 1);
        for (index, body) in corpus.into_iter().enumerate() {
            match outcome(body) {
                Err(error) => assert!(is_client_error(&error), "{index}: {error:?}"),
                Ok(images) => panic!("{index}: parsed with {images} images"),
            }
        }
        // A part over its limit is 413.
        let big = valid()
            .windows(PNG.len())
            .position(|w| w == PNG)
            .map(|at| {
                let body = valid();
                [&body[..at], PNG, &vec![0u8; 600], &body[at + PNG.len()..]].concat()
            })
            .unwrap();
        assert!(matches!(
            outcome(big),
            Err(Error::Asset(AssetError::TooLarge(_)))
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Truncations, byte changes, insertions and spliced copies of a valid body:
        /// either a clean parse or a client error, never a panic.
        #[test]
        fn malformed_bodies_are_client_errors(
            cut in 0usize..400,
            edits in proptest::collection::vec((0usize..400, any::<u8>()), 0..6),
            insert in proptest::collection::vec(any::<u8>(), 0..40),
            at in 0usize..400,
            splice in any::<bool>(),
        ) {
            let mut body = valid();
            for (index, byte) in edits {
                let len = body.len();
                body[index % len] = byte;
            }
            let at = at % (body.len() + 1);
            body.splice(at..at, insert);
            if splice {
                let copy = body.clone();
                body.extend_from_slice(&copy[..copy.len() / 2]);
            }
            body.truncate(body.len().saturating_sub(cut % 50));
            match outcome(body) {
                Ok(images) => prop_assert!(images <= 1),
                Err(error) => prop_assert!(is_client_error(&error), "{:?}", error),
            }
        }
    }
}
