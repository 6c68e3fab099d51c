//! `multipart/form-data` request bodies (the Python SDK's image requests), read with
//! `multer` from the body decoded in pieces as it is parsed (`body::read`): the `request`
//! part (the JSON body) and every other part by name, each bounded. Malformed bodies are
//! 400 `invalid_multipart`, oversized parts 413; nothing here panics.
//!
//! Memory: the decoded body is never held whole. The decoder hands the parser
//! [`FEED_BYTES`] at a time (each taken from the request's share of the budget, `budget`),
//! and each part is copied once, as it arrives, into a buffer of its own whose growth is
//! taken from the budget first. The body that goes upstream ([`build`]) is a list of
//! segments: the proxy's boundaries and part headers, the upstream JSON, and each image as
//! a slice of its part (no copy).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use super::budget::Hold;
use super::error::Error;
use releasegate_core::config::Server;
use releasegate_core::wire::assets::AssetError;

/// Most parts of a multipart request (the `request` part and its images).
pub(crate) const MAX_PARTS: usize = 64;

/// Room for multipart framing (boundaries, part headers) on top of the JSON and image caps.
pub(crate) const FRAMING_BYTES: usize = 64 * 1024;

/// Decoded bytes handed to the parser at a time.
const FEED_BYTES: usize = 64 * 1024;

/// The smallest buffer a part starts with.
const MIN_PART_BYTES: usize = 16 * 1024;

/// A multipart request's parts: the JSON body and the others by name.
#[derive(Debug)]
pub(crate) struct Parts {
    /// The `request` part.
    pub(crate) request: Bytes,
    /// The bytes of the budget the `request` part holds.
    pub(crate) request_held: usize,
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

/// What the decoder's stream and the parser share: the request's share of the budget,
/// the bytes of it taken and not in use (`credit`: the decoded size the request declared,
/// taken up front, and every piece once copied into a part), the pieces handed to the
/// parser and not yet copied, and why the stream failed (a refused share, a body that does
/// not decode), which outranks the parser's own complaint.
struct Feed<'h, 'b> {
    hold: &'h Hold<'b>,
    credit: Mutex<usize>,
    outstanding: Mutex<usize>,
    failure: Mutex<Option<Error>>,
}

impl Feed<'_, '_> {
    fn fail(&self, error: Error) -> std::io::Error {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
        std::io::Error::other("the body could not be read")
    }

    /// The stream's failure if it had one, else the parser's error.
    fn error(&self, error: &multer::Error, server: &Server) -> Error {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| multer_error(error, server))
    }

    /// Takes `bytes` of the budget: from the credit first, the rest from the hold (which
    /// may wait).
    async fn take(&self, bytes: usize) -> Result<(), Error> {
        let missing = {
            let mut credit = self.credit.lock().unwrap_or_else(PoisonError::into_inner);
            let used = bytes.min(*credit);
            *credit -= used;
            bytes - used
        };
        if missing > 0 {
            self.hold.grow(missing).await?;
        }
        Ok(())
    }

    /// The credit a part may take at once: all of it but room for two pieces.
    fn spare(&self) -> usize {
        self.credit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saturating_sub(2 * FEED_BYTES)
    }

    /// `bytes` a part took and no longer holds are credit again.
    fn refund(&self, bytes: usize) {
        *self.credit.lock().unwrap_or_else(PoisonError::into_inner) += bytes;
    }

    /// `bytes` handed to the parser were copied into a part: their share is credit again.
    fn copied(&self, bytes: usize) {
        let mut outstanding = self
            .outstanding
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let moved = bytes.min(*outstanding);
        *outstanding -= moved;
        drop(outstanding);
        *self.credit.lock().unwrap_or_else(PoisonError::into_inner) += moved;
    }

    /// Gives back the credit and the pieces' share (the parser is done with them).
    fn settle(&self) {
        let credit =
            std::mem::take(&mut *self.credit.lock().unwrap_or_else(PoisonError::into_inner));
        let outstanding = std::mem::take(
            &mut *self
                .outstanding
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.hold.release(credit + outstanding);
    }

    /// The next piece of the decoded body (`name`: the encoding, for errors), its share
    /// taken first; `None` at the end.
    async fn next(
        &self,
        source: &mut (dyn Read + Send),
        name: &str,
    ) -> Option<std::io::Result<Bytes>> {
        // Back to the event loop before each piece: the parser reads its stream until it
        // waits, so it takes one piece at a time (and never a piece and the end at once,
        // which it would not parse), and other requests of the loop run meanwhile.
        tokio::task::yield_now().await;
        if let Err(error) = self.take(FEED_BYTES).await {
            return Some(Err(self.fail(error)));
        }
        *self
            .outstanding
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += FEED_BYTES;
        let mut piece = vec![0u8; FEED_BYTES];
        let read = loop {
            match source.read(&mut piece) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        match read {
            Ok(0) => None,
            Ok(n) => {
                piece.truncate(n);
                Some(Ok(Bytes::from(piece)))
            }
            Err(_) => Some(Err(self.fail(Error::BadBody(format!(
                "the {name} body could not be decoded"
            ))))),
        }
    }
}

/// Splits a multipart body, read from `source` (the decoded body; `name`: its encoding, for
/// errors), into its parts, every byte held taken from `hold` first: from `prepaid` (bytes
/// already taken for it) before anything more.
pub(crate) async fn parse(
    mut source: Box<dyn Read + Send>,
    name: &str,
    boundary: &str,
    server: &Server,
    (hold, prepaid): (&Hold<'_>, usize),
) -> Result<Parts, Error> {
    let largest_part = server.max_body_bytes().max(server.max_image_bytes());
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new()
            .whole_stream(body_limit(server) as u64)
            .per_field(largest_part as u64),
    );
    let feed = Feed {
        hold,
        credit: Mutex::new(prepaid),
        outstanding: Mutex::new(0),
        failure: Mutex::new(None),
    };
    let stream = futures_util::stream::unfold(&mut source, |source| {
        let feed = &feed;
        async move {
            feed.next(&mut **source, name)
                .await
                .map(|piece| (piece, source))
        }
    });
    let mut multipart =
        multer::Multipart::with_constraints(stream, boundary.to_string(), constraints);
    let mut request = None;
    let mut others = BTreeMap::new();
    let mut count = 0usize;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|error| feed.error(&error, server))?
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
        let is_request = name == "request";
        let cap = if is_request {
            server.max_body_bytes()
        } else {
            server.max_image_bytes()
        };
        let mut data = PartBuffer::default();
        while let Some(chunk) = field
            .chunk()
            .await
            .map_err(|error| feed.error(&error, server))?
        {
            if data.bytes.len() + chunk.len() > cap {
                return Err(too_large(is_request, server));
            }
            data.push(&chunk, cap, &feed).await?;
            feed.copied(chunk.len());
        }
        data.fit(&feed);
        if is_request {
            if request.is_some() {
                return Err(invalid("the `request` part appears twice"));
            }
            if content_type
                .as_deref()
                .is_some_and(|t| t != "application/json" && t != "text/plain")
            {
                return Err(invalid("the `request` part must be application/json"));
            }
            request = Some((Bytes::from(data.bytes), data.held));
        } else {
            if others.contains_key(&name) {
                return Err(invalid("a part name appears twice"));
            }
            others.insert(name, (content_type, Bytes::from(data.bytes)));
        }
    }
    drop(multipart);
    drop(source);
    feed.settle();
    let (request, request_held) =
        request.ok_or_else(|| invalid("the multipart body has no `request` part"))?;
    Ok(Parts {
        request,
        request_held,
        others,
    })
}

/// One part as it arrives, and the bytes of the budget its buffer holds.
#[derive(Default)]
struct PartBuffer {
    bytes: Vec<u8>,
    held: usize,
}

impl PartBuffer {
    /// Appends `chunk`, taking the buffer's growth first: at once as much as the credit
    /// allows (the size the body declared: one allocation for an image, no copies as it
    /// grows), else doubling; at most `cap`.
    async fn push(&mut self, chunk: &[u8], cap: usize, feed: &Feed<'_, '_>) -> Result<(), Error> {
        let needed = self.bytes.len() + chunk.len();
        if needed > self.held {
            let step = needed
                .max(self.held.saturating_mul(2))
                .max(MIN_PART_BYTES)
                .max(self.held + feed.spare())
                .min(cap.max(needed));
            feed.take(step - self.held).await?;
            self.bytes.reserve_exact(step - self.bytes.len());
            self.held = step;
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }
}

impl PartBuffer {
    /// Gives back what the buffer took beyond its bytes (a part smaller than the credit it
    /// took), shrinking it when that is more than a little.
    fn fit(&mut self, feed: &Feed<'_, '_>) {
        if self.held - self.bytes.len() > MIN_PART_BYTES {
            self.bytes.shrink_to_fit();
            feed.refund(self.held - self.bytes.len());
            self.held = self.bytes.len();
        }
    }
}

/// A part over its cap: the `request` part's (`max_body_bytes`) or an image's.
fn too_large(is_request: bool, server: &Server) -> Error {
    if is_request {
        Error::TooLarge(server.max_body_bytes())
    } else {
        Error::Asset(AssetError::TooLarge(format!(
            "an image part exceeds {} bytes",
            server.max_image_bytes()
        )))
    }
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
/// upstream JSON), then each image as its own part (`asset-N`, its checked type). The body
/// is a list of segments: the boundaries and part headers, `json`, and each image as a
/// slice of the part in `owners` it lies in (an image in none of them is copied).
pub(crate) fn build(
    json: &Bytes,
    images: &[releasegate_core::wire::assets::Image<'_>],
    owners: &[&Bytes],
) -> Result<(String, Vec<Bytes>), Error> {
    let seed = || releasegate_core::rng::os_seed().map_err(|_| Error::Internal);
    let boundary = format!("releasegate-{:016x}{:016x}", seed()?, seed()?);
    let mut segments = Vec::with_capacity(2 * images.len() + 3);
    let head = |name: &str, filename: bool, content_type: &str| {
        let mut head = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"");
        if filename {
            head.push_str(&format!("; filename=\"{name}\""));
        }
        head.push_str(&format!("\r\nContent-Type: {content_type}\r\n\r\n"));
        head
    };
    segments.push(Bytes::from(head("request", false, "application/json")));
    segments.push(json.clone());
    for image in images {
        let head = head(&image.part, true, image.format.content_type());
        segments.push(Bytes::from(format!("\r\n{head}")));
        let bytes = owners
            .iter()
            .find(|owner| contains(owner, image.bytes))
            .map_or_else(
                || Bytes::copy_from_slice(image.bytes),
                |owner| owner.slice_ref(image.bytes),
            );
        segments.push(bytes);
    }
    segments.push(Bytes::from(format!("\r\n--{boundary}--\r\n")));
    Ok((
        format!("multipart/form-data; boundary={boundary}"),
        segments,
    ))
}

/// Whether `inner` lies within `outer`'s memory (so `Bytes::slice_ref` takes it).
fn contains(outer: &[u8], inner: &[u8]) -> bool {
    let outer = outer.as_ptr_range();
    let inner = inner.as_ptr_range();
    outer.start <= inner.start && inner.end <= outer.end
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
        let budget = crate::server::budget::Budget::unbounded();
        let hold = budget.hold();
        let source = Box::new(std::io::Cursor::new(body));
        let parts = runtime.block_on(parse(source, "multipart", BOUNDARY, &server, (&hold, 0)))?;
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
