//! Image requests: `multipart/form-data` (as the Python SDK sends them, possibly
//! compressed) and inline base64 assets, checked, rebuilt and forwarded; malformed
//! multipart bodies get clear 400/413/415 errors.

use std::io::Write;

use serde_json::{Value, json};

use crate::helpers::{CLIENT_KEY, error_of, request, spawn};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-CALLER-PNG-BYTES";
const JPEG: &[u8] = b"\xff\xd8\xff\xe0\x00\x10JFIF-CALLER-JPEG";

/// A multipart body as the Python SDK writes it: `request`, then each part.
fn multipart(boundary: &str, parts: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, content_type, bytes) in parts {
        let filename = if *name == "request" {
            String::new()
        } else {
            format!("; filename=\"{name}\"")
        };
        write!(
            out,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n"
        )
        .unwrap();
        if let Some(content_type) = content_type {
            write!(out, "Content-Type: {content_type}\r\n").unwrap();
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    }
    write!(out, "--{boundary}--\r\n").unwrap();
    out
}

fn image_request(assets: Value) -> Vec<u8> {
    let mut body = request();
    body["state"] = json!({"ticket": "late parcel", "photo": "<image:a>", "label": "<image:b>"});
    body["assets"] = assets;
    serde_json::to_vec(&body).unwrap()
}

fn sdk_body() -> (String, Vec<u8>) {
    let boundary = "5f1c0e6a9d3b4c2e8a7f6b5d4c3b2a19".to_string();
    let json = image_request(json!({
        "<image:a>": {"type": "image", "part": "asset-0"},
        "<image:b>": {"type": "image", "part": "asset-1"},
    }));
    let body = multipart(
        &boundary,
        &[
            ("request", Some("application/json"), &json),
            ("asset-0", Some("image/png"), PNG),
            ("asset-1", Some("application/octet-stream"), JPEG),
        ],
    );
    (boundary, body)
}

/// The parts of a multipart body the upstream received: name, content type, bytes.
fn parts_of(content_type: &str, body: &[u8]) -> Vec<(String, String, Vec<u8>)> {
    let boundary = content_type.split("boundary=").nth(1).expect("a boundary");
    let delimiter = format!("--{boundary}");
    let text = body;
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = find(rest, delimiter.as_bytes()) {
        rest = &rest[start + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let head_end = find(rest, b"\r\n\r\n").unwrap();
        let head = String::from_utf8(rest[..head_end].to_vec()).unwrap();
        let content = &rest[head_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes()).unwrap();
        let name = head
            .split("name=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string();
        let kind = head
            .split("Content-Type: ")
            .nth(1)
            .unwrap()
            .trim()
            .to_string();
        parts.push((name, kind, content[..end].to_vec()));
        rest = &content[end..];
    }
    parts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

async fn post(
    app: &crate::helpers::TestApp,
    content_type: &str,
    body: Vec<u8>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let auth = format!("Bearer {CLIENT_KEY}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", content_type),
    ];
    headers.extend_from_slice(extra);
    app.post_raw(body, &headers).await
}

#[tokio::test]
async fn multipart_images_are_checked_rebuilt_and_forwarded_as_multipart() {
    let app = spawn("full_native", "").await;
    let (boundary, body) = sdk_body();
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let zstd_body = zstd::encode_all(body.as_slice(), 3).unwrap();
    for (body, encoding) in [(body, None), (zstd_body, Some("zstd"))] {
        let extra: Vec<(&str, &str)> = encoding.iter().map(|e| ("content-encoding", *e)).collect();
        let response = post(&app, &content_type, body, &extra).await;
        assert_eq!(
            response.status(),
            200,
            "{encoding:?}: {}",
            response.text().await.unwrap()
        );
        let seen = app.upstream.last();
        let upstream_type = seen.headers["content-type"].to_str().unwrap().to_string();
        assert!(
            upstream_type.starts_with("multipart/form-data; boundary=releasegate-"),
            "{upstream_type}"
        );
        assert!(
            !upstream_type.contains(&boundary),
            "the proxy's own boundary"
        );
        assert!(seen.headers.get("content-encoding").is_none());
        let parts = parts_of(&upstream_type, &seen.body);
        let names: Vec<&str> = parts.iter().map(|(name, _, _)| name.as_str()).collect();
        assert_eq!(names, ["request", "asset-0", "asset-1"]);
        assert_eq!(parts[0].1, "application/json");
        let forwarded: Value = serde_json::from_slice(&parts[0].2).unwrap();
        assert_eq!(
            forwarded["assets"],
            json!({"<image:a>": {"type": "image", "part": "asset-0"}, "<image:b>": {"type": "image", "part": "asset-1"}})
        );
        // The contract's question went up, not the caller's bytes.
        assert_eq!(forwarded["questions"]["cause"]["instructions"], "Why?");
        assert_eq!(
            (parts[1].1.as_str(), parts[1].2.as_slice()),
            ("image/png", PNG)
        );
        // An octet-stream part goes up as what its signature says.
        assert_eq!(
            (parts[2].1.as_str(), parts[2].2.as_slice()),
            ("image/jpeg", JPEG)
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn inline_base64_images_are_decoded_checked_and_re_encoded() {
    use base64::Engine;
    let app = spawn("full_native", "").await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    let body =
        image_request(json!({"<image:a>": {"type": "image", "format": "png", "data_base64": b64}}));
    let response = post(&app, "application/json", body, &[]).await;
    assert_eq!(response.status(), 200);
    let seen = app.upstream.last();
    assert_eq!(seen.headers["content-type"], "application/json");
    let forwarded: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        forwarded["assets"],
        json!({"<image:a>": {"type": "image", "format": "png", "data_base64": b64}})
    );
    // Not an image, or a part that a JSON request cannot carry: refused.
    for (assets, status, error_type) in [
        (
            json!({"<image:a>": {"type": "image", "format": "png", "data_base64": "aGVsbG8="}}),
            400,
            "invalid_asset",
        ),
        (
            json!({"<image:a>": {"type": "image", "part": "asset-0"}}),
            400,
            "invalid_asset",
        ),
        (json!({}), 400, "invalid_asset"),
    ] {
        let (got, got_type, _) =
            error_of(post(&app, "application/json", image_request(assets), &[]).await).await;
        assert_eq!((got, got_type.as_str()), (status, error_type));
    }
    app.stop().await;
}

/// The malformed-multipart corpus: each a clear 4xx naming its kind, never forwarded.
#[tokio::test]
async fn malformed_multipart_bodies_get_clear_errors() {
    let app = spawn("full_native", "").await;
    let b = "b0undary";
    let json = image_request(json!({"<image:a>": {"type": "image", "part": "asset-0"}}));
    let good = |extra: &[(&str, Option<&str>, &[u8])]| {
        let mut parts: Vec<(&str, Option<&str>, &[u8])> = vec![
            ("request", Some("application/json"), &json),
            ("asset-0", Some("image/png"), PNG),
        ];
        parts.extend_from_slice(extra);
        multipart(b, &parts)
    };
    let truncated = {
        let mut body = good(&[]);
        body.truncate(body.len() - 20);
        body
    };
    let ct = format!("multipart/form-data; boundary={b}");
    let big_json = image_request(
        json!({"<image:a>": {"type": "image", "part": "asset-0"}, "pad": "x".repeat(70_000)}),
    );
    let cases: Vec<(&str, String, Vec<u8>, u16, &str)> = vec![
        (
            "missing boundary",
            "multipart/form-data".into(),
            good(&[]),
            400,
            "invalid_multipart",
        ),
        (
            "missing request part",
            ct.clone(),
            multipart(b, &[("asset-0", Some("image/png"), PNG)]),
            400,
            "invalid_multipart",
        ),
        (
            "duplicate part",
            ct.clone(),
            good(&[("asset-0", Some("image/png"), PNG)]),
            400,
            "invalid_multipart",
        ),
        (
            "duplicate request",
            ct.clone(),
            good(&[("request", Some("application/json"), &json)]),
            400,
            "invalid_multipart",
        ),
        (
            "absent asset",
            ct.clone(),
            multipart(b, &[("request", Some("application/json"), &json)]),
            400,
            "invalid_asset",
        ),
        (
            "unclaimed part",
            ct.clone(),
            good(&[("asset-9", Some("image/png"), PNG)]),
            400,
            "invalid_asset",
        ),
        (
            "not an image",
            ct.clone(),
            multipart(
                b,
                &[
                    ("request", Some("application/json"), &json),
                    ("asset-0", None, b"GIF89a-not-accepted"),
                ],
            ),
            400,
            "invalid_asset",
        ),
        (
            "html part",
            ct.clone(),
            multipart(
                b,
                &[
                    ("request", Some("application/json"), &json),
                    ("asset-0", Some("text/html"), PNG),
                ],
            ),
            415,
            "unsupported_media_type",
        ),
        (
            "truncated body",
            ct.clone(),
            truncated,
            400,
            "invalid_multipart",
        ),
        (
            "garbage",
            ct.clone(),
            b"\x00\xff garbage".to_vec(),
            400,
            "invalid_multipart",
        ),
        (
            "oversized request part",
            ct.clone(),
            multipart(
                b,
                &[
                    ("request", Some("application/json"), &big_json),
                    ("asset-0", Some("image/png"), PNG),
                ],
            ),
            413,
            "request_too_large",
        ),
    ];
    for (name, content_type, body, status, error_type) in cases {
        let (got, got_type, message) = error_of(post(&app, &content_type, body, &[]).await).await;
        assert_eq!(
            (got, got_type.as_str()),
            (status, error_type),
            "{name}: {message}"
        );
        assert!(!message.is_empty());
    }
    assert!(
        app.upstream.seen.lock().unwrap().is_empty(),
        "nothing malformed went upstream"
    );
    app.stop().await;
}
