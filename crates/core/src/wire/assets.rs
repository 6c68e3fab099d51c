//! A request's image `assets`, checked and rebuilt: what goes upstream is built from the
//! validated entries and the decoded image bytes, never the caller's JSON or framing.
//!
//! An entry is `{"type": "image", "part": NAME}` (the image is the multipart body part
//! NAME) or `{"type": "image", "format": "png" | "jpg" | "jpeg", "data_base64": ...}`
//! (inline). Every image must be a PNG or a JPEG by its file signature (a part's content
//! type, when given, must be `image/png`, `image/jpeg` or `application/octet-stream` and
//! agree with it), at most [`Limits::max_image_bytes`], and all images together at most
//! [`Limits::max_asset_bytes`]. Every part but `request` must be claimed by exactly one
//! entry, and every entry's part must be present.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use serde_json::{Map, Value};

/// Image size limits (`server.max_image_bytes`, `server.max_asset_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of one image.
    pub max_image_bytes: usize,
    /// Most bytes of all a request's images together.
    pub max_asset_bytes: usize,
}

/// The image formats the provider accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PNG (`\x89PNG\r\n\x1a\n`).
    Png,
    /// JPEG (`\xff\xd8\xff`).
    Jpeg,
}

impl Format {
    /// The format of an image file, by its signature.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else if bytes.starts_with(b"\xff\xd8\xff") {
            Some(Format::Jpeg)
        } else {
            None
        }
    }

    /// The media type a part of this format is sent with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
        }
    }

    /// The inline `format` value.
    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpeg",
        }
    }
}

/// A body part of a multipart request other than `request`, as received.
#[derive(Debug, Clone, Copy)]
pub struct Part<'b> {
    /// Its `Content-Type`, if it had one.
    pub content_type: Option<&'b str>,
    /// Its bytes.
    pub bytes: &'b [u8],
}

/// One image that goes upstream as a part of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image<'b> {
    /// The part name the proxy gives it (`asset-N`, in entry order).
    pub part: String,
    /// Its format.
    pub format: Format,
    /// Its bytes (the caller's part, checked).
    pub bytes: &'b [u8],
}

/// Checked assets: the rebuilt `assets` member and the images to send as parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked<'b> {
    /// The `assets` member that goes upstream (None: the request has none).
    pub assets: Option<Value>,
    /// The part images, in entry order (empty: the request goes upstream as JSON).
    pub images: Vec<Image<'b>>,
}

/// Why a request's assets are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssetError {
    /// Malformed or inconsistent assets (400 `invalid_asset`).
    #[error("{0}")]
    Invalid(String),
    /// An image over its limit, or all images over theirs (413 `request_too_large`).
    #[error("{0}")]
    TooLarge(String),
    /// A part's content type is not an image type the provider accepts (415).
    #[error("{0}")]
    Unsupported(String),
}

/// Checks the request's `assets` member against its parts (empty for a JSON request).
pub fn check<'b>(
    assets: Option<&Value>,
    parts: &'b BTreeMap<String, Part<'b>>,
    limits: Limits,
) -> Result<Checked<'b>, AssetError> {
    let invalid = |message: String| AssetError::Invalid(message);
    let Some(assets) = assets else {
        if let Some(name) = parts.keys().next() {
            return Err(invalid(format!(
                "part `{}` is not claimed by any entry of `assets`",
                printable(name)
            )));
        }
        return Ok(Checked {
            assets: None,
            images: Vec::new(),
        });
    };
    let entries = assets
        .as_object()
        .filter(|entries| !entries.is_empty())
        .ok_or_else(|| invalid("`assets` must be a non-empty object".into()))?;
    // First pass: inline images, decoded, checked and encoded again by the proxy.
    let mut total = 0usize;
    let mut inline_index = BTreeMap::new();
    for (placeholder, entry) in entries {
        let at = format!("assets.{}", printable(placeholder));
        if let Some(image) = inline_image(&at, entry, &mut total, limits)? {
            inline_index.insert(placeholder.clone(), image);
        }
    }
    let mut rebuilt = Map::with_capacity(entries.len());
    let mut images = Vec::new();
    let mut claimed = BTreeSet::new();
    for (placeholder, entry) in entries {
        let at = format!("assets.{}", printable(placeholder));
        let value = match entry.get("part") {
            Some(name) => part_image(
                &at,
                name,
                parts,
                &mut claimed,
                &mut total,
                limits,
                &mut images,
            )?,
            None => match inline_index.remove(placeholder) {
                Some((format, data)) => {
                    serde_json::json!({"type": "image", "format": format.name(), "data_base64": data})
                }
                None => return Err(invalid(format!("`{at}` is malformed"))),
            },
        };
        rebuilt.insert(placeholder.clone(), value);
    }
    if let Some(name) = parts.keys().find(|name| !claimed.contains(name.as_str())) {
        return Err(invalid(format!(
            "part `{}` is not claimed by any entry of `assets`",
            printable(name)
        )));
    }
    Ok(Checked {
        assets: Some(Value::Object(rebuilt)),
        images,
    })
}

/// Checks one entry of `assets` (at `at`): its members, and for an inline image its format,
/// size and bytes. Returns the inline image re-encoded by the proxy (`None`: a part entry).
fn inline_image(
    at: &str,
    entry: &Value,
    total: &mut usize,
    limits: Limits,
) -> Result<Option<(Format, String)>, AssetError> {
    let invalid = |message: String| AssetError::Invalid(message);
    let entry = entry
        .as_object()
        .ok_or_else(|| invalid(format!("`{}` must be an object", at)))?;
    if entry.get("type").and_then(Value::as_str) != Some("image") {
        return Err(invalid(format!("`{}.type` must be \"image\"", at)));
    }
    let allowed: &[&str] = if entry.contains_key("part") {
        &["type", "part"]
    } else {
        &["type", "format", "data_base64"]
    };
    if let Some(extra) = entry.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(invalid(format!(
            "`{}` has an unknown member `{}`",
            at,
            printable(extra)
        )));
    }
    if entry.contains_key("part") {
        return Ok(None);
    }
    let format = match entry.get("format").and_then(Value::as_str) {
        Some("png") => Format::Png,
        Some("jpg" | "jpeg") => Format::Jpeg,
        _ => {
            return Err(invalid(format!(
                "`{}.format` must be \"png\", \"jpg\" or \"jpeg\"",
                at
            )));
        }
    };
    let data = entry
        .get("data_base64")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("`{}.data_base64` must be a string", at)))?;
    // A base64 text longer than this decodes to more than the limit.
    if data.len() / 4 * 3 > limits.max_image_bytes.saturating_add(3) {
        return Err(AssetError::TooLarge(format!(
            "`{}` exceeds {} bytes",
            at, limits.max_image_bytes
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| invalid(format!("`{}.data_base64` is not valid base64", at)))?;
    size(at, bytes.len(), total, limits)?;
    if Format::sniff(&bytes) != Some(format) {
        return Err(invalid(format!(
            "`{}` is not a {} image",
            at,
            format.name()
        )));
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(Some((format, data)))
}

/// The entry at `at` naming the part `name`: a part the request carries, claimed once, within
/// the limits and an image; it goes upstream as `asset-N` (pushed to `images`).
fn part_image<'a, 'b>(
    at: &str,
    name: &'a Value,
    parts: &'b BTreeMap<String, Part<'b>>,
    claimed: &mut BTreeSet<&'a str>,
    total: &mut usize,
    limits: Limits,
    images: &mut Vec<Image<'b>>,
) -> Result<Value, AssetError> {
    let invalid = |message: String| AssetError::Invalid(message);
    let name = name
        .as_str()
        .ok_or_else(|| invalid(format!("`{at}.part` must be a string")))?;
    let part = parts.get(name).ok_or_else(|| {
        invalid(format!(
            "`{at}` names part `{}`, which the request does not carry",
            printable(name)
        ))
    })?;
    if !claimed.insert(name) {
        return Err(invalid(format!(
            "part `{}` is claimed by two entries of `assets`",
            printable(name)
        )));
    }
    size(at, part.bytes.len(), total, limits)?;
    let format = part_format(name, part)?;
    let part_name = format!("asset-{}", images.len());
    images.push(Image {
        part: part_name.clone(),
        format,
        bytes: part.bytes,
    });
    Ok(serde_json::json!({"type": "image", "part": part_name}))
}

/// A part's image format, from its bytes, agreeing with its content type when it has one.
fn part_format(name: &str, part: &Part<'_>) -> Result<Format, AssetError> {
    let invalid = |message: String| AssetError::Invalid(message);
    let format = Format::sniff(part.bytes);
    match part.content_type.map(|t| t.trim().to_ascii_lowercase()) {
        None => {}
        Some(t) if t == "application/octet-stream" => {}
        Some(t) if t == "image/png" || t == "image/jpeg" => {
            let agrees = format.map(Format::content_type) == Some(t.as_str());
            agrees.then_some(()).ok_or_else(|| {
                invalid(format!(
                    "part `{}` is not the {t} its content type says",
                    printable(name)
                ))
            })?;
        }
        Some(_) => {
            return Err(AssetError::Unsupported(format!(
                "part `{}` has a content type other than image/png, image/jpeg or application/octet-stream",
                printable(name)
            )));
        }
    }
    format.ok_or_else(|| {
        invalid(format!(
            "part `{}` is not a PNG or JPEG image",
            printable(name)
        ))
    })
}

fn size(at: &str, len: usize, total: &mut usize, limits: Limits) -> Result<(), AssetError> {
    if len > limits.max_image_bytes {
        return Err(AssetError::TooLarge(format!(
            "`{at}` exceeds {} bytes",
            limits.max_image_bytes
        )));
    }
    *total = total.saturating_add(len);
    if *total > limits.max_asset_bytes {
        return Err(AssetError::TooLarge(format!(
            "the request's images exceed {} bytes in all",
            limits.max_asset_bytes
        )));
    }
    Ok(())
}

/// A caller-chosen name as an error message may quote it: at most 64 characters, only
/// ASCII letters, digits and `-_.:<>`; anything else is `?`.
fn printable(name: &str) -> String {
    name.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:<>".contains(c) {
                c
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nrest-of-png";
    const JPEG: &[u8] = b"\xff\xd8\xff\xe0rest-of-jpeg";
    const LIMITS: Limits = Limits {
        max_image_bytes: 64,
        max_asset_bytes: 80,
    };

    fn parts<'b>(list: &[(&str, Option<&'b str>, &'b [u8])]) -> BTreeMap<String, Part<'b>> {
        list.iter()
            .map(|(name, content_type, bytes)| {
                (
                    name.to_string(),
                    Part {
                        content_type: *content_type,
                        bytes,
                    },
                )
            })
            .collect()
    }

    /// The rebuilt `assets` and the images (part name, format, bytes).
    type Run = (Option<Value>, Vec<(String, Format, Vec<u8>)>);

    fn run(assets: Option<Value>, parts: &BTreeMap<String, Part<'_>>) -> Result<Run, AssetError> {
        let checked = check(assets.as_ref(), parts, LIMITS)?;
        Ok((
            checked.assets,
            checked
                .images
                .into_iter()
                .map(|image| (image.part, image.format, image.bytes.to_vec()))
                .collect(),
        ))
    }

    #[test]
    fn part_and_inline_images_are_rebuilt() {
        let parts = parts(&[("x-7", Some("image/png"), PNG), ("y", None, JPEG)]);
        let jpeg = base64::engine::general_purpose::STANDARD.encode(JPEG);
        let (assets, images) = run(
            Some(json!({
                "<image:b>": {"type": "image", "part": "y"},
                "<image:a>": {"type": "image", "part": "x-7"},
                "<image:c>": {"type": "image", "format": "jpg", "data_base64": jpeg},
            })),
            &parts,
        )
        .unwrap();
        assert_eq!(
            assets.unwrap(),
            json!({
                "<image:b>": {"type": "image", "part": "asset-0"},
                "<image:a>": {"type": "image", "part": "asset-1"},
                "<image:c>": {"type": "image", "format": "jpeg", "data_base64": jpeg},
            })
        );
        assert_eq!(
            images,
            vec![
                ("asset-0".into(), Format::Jpeg, JPEG.to_vec()),
                ("asset-1".into(), Format::Png, PNG.to_vec())
            ]
        );
        assert_eq!(run(None, &BTreeMap::new()).unwrap(), (None, vec![]));
    }

    #[test]
    fn bad_assets_are_refused_with_their_kind() {
        let png = |name: &'static str| parts(&[(name, Some("image/png"), PNG)]);
        let invalid =
            |assets: Value, parts: BTreeMap<String, Part<'static>>, needle: &str| match run(
                Some(assets),
                &parts,
            ) {
                Err(AssetError::Invalid(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{needle}: {other:?}"),
            };
        invalid(json!({}), png("a"), "non-empty");
        invalid(
            json!({"p": {"type": "image", "part": "b"}}),
            png("a"),
            "does not carry",
        );
        invalid(
            json!({"p": {"type": "image", "part": "a"}, "q": {"type": "image", "part": "a"}}),
            png("a"),
            "claimed by two",
        );
        invalid(
            json!({"p": {"type": "video", "part": "a"}}),
            png("a"),
            "must be \"image\"",
        );
        invalid(
            json!({"p": {"type": "image", "part": "a", "x": 1}}),
            png("a"),
            "unknown member",
        );
        invalid(
            json!({"p": {"type": "image", "format": "gif", "data_base64": ""}}),
            BTreeMap::new(),
            "format",
        );
        invalid(
            json!({"p": {"type": "image", "format": "png", "data_base64": "***"}}),
            BTreeMap::new(),
            "base64",
        );
        invalid(
            json!({"p": {"type": "image", "format": "png", "data_base64": "aGVsbG8="}}),
            BTreeMap::new(),
            "not a png",
        );
        invalid(
            json!({"p": {"type": "image", "part": "a"}}),
            parts(&[("a", Some("image/jpeg"), PNG)]),
            "content type says",
        );
        invalid(
            json!({"p": {"type": "image", "part": "a"}}),
            parts(&[("a", None, b"GIF89a")]),
            "not a PNG or JPEG",
        );
        let unclaimed = parts(&[("a", None, PNG), ("b", None, PNG)]);
        invalid(
            json!({"p": {"type": "image", "part": "a"}}),
            unclaimed.clone(),
            "not claimed",
        );
        assert!(matches!(run(None, &unclaimed), Err(AssetError::Invalid(_))));
        assert!(matches!(
            run(
                Some(json!({"p": {"type": "image", "part": "a"}})),
                &parts(&[("a", Some("text/html"), PNG)])
            ),
            Err(AssetError::Unsupported(_))
        ));
        let big: &'static [u8] = Box::leak(vec![0x89u8; 65].into_boxed_slice());
        assert!(matches!(
            run(
                Some(json!({"p": {"type": "image", "part": "a"}})),
                &parts(&[("a", None, big)])
            ),
            Err(AssetError::TooLarge(_))
        ));
        let many = parts(&[
            ("a", None, PNG),
            ("b", None, PNG),
            ("c", None, PNG),
            ("d", None, PNG),
            ("e", None, PNG),
        ]);
        let entries: Map<String, Value> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|name| (format!("<{name}>"), json!({"type": "image", "part": name})))
            .collect();
        assert!(matches!(
            run(Some(Value::Object(entries)), &many),
            Err(AssetError::TooLarge(_))
        ));
        // Caller names are never quoted raw.
        match run(
            Some(json!({"p": {"type": "image", "part": "<script>\n"}})),
            &BTreeMap::new(),
        ) {
            Err(AssetError::Invalid(message)) => assert!(!message.contains('\n'), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
