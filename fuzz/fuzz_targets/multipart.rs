//! `multipart/form-data` request bodies (`server::multipart`) and the image checks
//! (`wire::assets::check`), as the handler applies them.
//!
//! The first input byte chooses the `[server]` limits; the second how the rest is read: as
//! a body under a fixed boundary, as a `Content-Type` line (its boundary read by
//! `multipart::boundary`) then a body, or as a JSON request whose inline images are checked
//! (no parts).
//!
//! Oracle: nothing panics; a refusal is a client error (4xx); parts respect the limits
//! (the `request` part at most `max_body_bytes`, every other at most `max_image_bytes`,
//! at most `MAX_PARTS` parts, names non-empty and unique); checked images are PNG or JPEG
//! by their signature, each within `max_image_bytes` and all together (parts and inline
//! images) within `max_asset_bytes`; every part is claimed once; the rebuilt `assets` holds
//! only the proxy's own entries; and the body the proxy builds upstream (`multipart::build`)
//! parses back to the same `request` and images.

#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use base64::Engine;
use libfuzzer_sys::fuzz_target;
use releasegate_core::config::Server;
use releasegate_core::wire::Json;
use releasegate_core::wire::assets::{self, Format, Part};
use releasegate_proxy::fuzzing::multipart::{MAX_PARTS, Parts, boundary, build, parse, server};
use serde_json::Value;

/// `[server]` sections with small and large limits (body, image, all images).
fn servers() -> &'static [Server] {
    static SERVERS: OnceLock<Vec<Server>> = OnceLock::new();
    SERVERS.get_or_init(|| {
        [
            (4096, 512, 1024),
            (64, 16, 24),
            (1 << 20, 4096, 8192),
            (300, 300, 300),
        ]
        .into_iter()
        .map(|(body, image, all)| server(body, image, all).expect("a valid [server]"))
        .collect()
    })
}

const BOUNDARY: &str = "0123456789abcdef";

fn check_parts(parts: &Parts, server: &Server) {
    assert!(
        parts.request.len() <= server.max_body_bytes(),
        "request part over its cap"
    );
    assert!(parts.others.len() < MAX_PARTS, "more parts than allowed");
    for (name, (content_type, bytes)) in &parts.others {
        assert!(!name.is_empty() && name != "request", "part name {name:?}");
        assert!(bytes.len() <= server.max_image_bytes(), "part over its cap");
        if let Some(content_type) = content_type {
            assert_eq!(content_type, &content_type.to_ascii_lowercase());
        }
    }
}

/// Checks the request's assets against `parts` and holds the result to the limits.
fn check_assets(request: &[u8], parts: &Parts, server: &Server) {
    let Ok(json) = Json::parse(request) else {
        return;
    };
    let value = json.to_value();
    let refs: BTreeMap<String, Part<'_>> = parts
        .others
        .iter()
        .map(|(name, (content_type, bytes))| {
            let part = Part {
                content_type: content_type.as_deref(),
                bytes,
            };
            (name.clone(), part)
        })
        .collect();
    let limits = server.asset_limits();
    let Ok(checked) = assets::check(value.get("assets"), &refs, limits) else {
        return;
    };
    assert_eq!(
        checked.images.len(),
        parts.others.len(),
        "a part not claimed once"
    );
    let mut total = 0usize;
    for (index, image) in checked.images.iter().enumerate() {
        assert_eq!(image.part, format!("asset-{index}"));
        assert_eq!(
            Format::sniff(image.bytes),
            Some(image.format),
            "not the image it says"
        );
        assert!(image.bytes.len() <= limits.max_image_bytes);
        assert!(
            parts.others.values().any(|(_, bytes)| bytes == image.bytes),
            "an image that is no part"
        );
        total += image.bytes.len();
    }
    match &checked.assets {
        None => assert!(parts.others.is_empty() && value.get("assets").is_none()),
        Some(Value::Object(entries)) => {
            let mut parts_seen = 0;
            for entry in entries.values() {
                let entry = entry.as_object().expect("an entry is an object");
                let keys: Vec<&str> = entry.keys().map(String::as_str).collect();
                assert_eq!(entry.get("type"), Some(&Value::from("image")));
                if keys == ["type", "part"] {
                    assert_eq!(entry["part"], Value::from(format!("asset-{parts_seen}")));
                    parts_seen += 1;
                    continue;
                }
                assert_eq!(keys, ["type", "format", "data_base64"], "entry {entry:?}");
                let data = entry["data_base64"].as_str().expect("base64 text");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .expect("the proxy's own base64");
                let format = Format::sniff(&bytes).expect("an inline image is PNG or JPEG");
                assert_eq!(entry["format"], Value::from(format.name()));
                assert!(bytes.len() <= limits.max_image_bytes);
                total += bytes.len();
            }
            assert_eq!(parts_seen, checked.images.len());
        }
        Some(other) => panic!("rebuilt assets {other:?}"),
    }
    assert!(
        total <= limits.max_asset_bytes,
        "images over their cap in all"
    );

    // The body that goes upstream parses back to the same parts.
    if checked.images.is_empty() {
        return;
    }
    let (content_type, body) = build(request, &checked.images).expect("the proxy builds its body");
    let boundary = boundary(&content_type).expect("the proxy's own boundary");
    let upstream = server_for_upstream();
    let again = parse(&body, &boundary, upstream).expect("the proxy's own body parses");
    assert_eq!(again.request, request);
    let expected: BTreeMap<String, (Option<String>, Vec<u8>)> = checked
        .images
        .iter()
        .map(|image| {
            let content_type = Some(image.format.content_type().to_string());
            (image.part.clone(), (content_type, image.bytes.to_vec()))
        })
        .collect();
    assert_eq!(again.others, expected);
}

/// Limits wide enough for any body the proxy builds from a checked request here.
fn server_for_upstream() -> &'static Server {
    &servers()[2]
}

fuzz_target!(|input: &[u8]| {
    let [limits, mode, rest @ ..] = input else {
        return;
    };
    let server = &servers()[usize::from(*limits) % servers().len()];
    let (boundary, body) = match mode % 3 {
        0 => (BOUNDARY.to_string(), rest),
        1 => {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let Ok(content_type) = std::str::from_utf8(&rest[..end]) else {
                return;
            };
            let Ok(boundary) = boundary(content_type) else {
                return;
            };
            (boundary, rest.get(end + 1..).unwrap_or_default())
        }
        _ => {
            // A JSON request: inline images only.
            let none = Parts {
                request: rest.to_vec(),
                others: BTreeMap::new(),
            };
            check_assets(rest, &none, server);
            return;
        }
    };
    match parse(body, &boundary, server) {
        Ok(parts) => {
            check_parts(&parts, server);
            check_assets(&parts.request, &parts, server);
        }
        Err((status, message)) => {
            assert!((400..500).contains(&status), "{status}: {message}");
        }
    }
});
