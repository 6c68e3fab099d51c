//! The plain path's parsing, lengths and encoding, against what hyper does.

use axum::http::HeaderName;

use super::names::{COMMON_NAMES, COMMON_TEXTS};
use super::*;

fn plain(extra: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: p\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn kind(bytes: &[u8]) -> &'static str {
    match parse(bytes) {
        Parsed::Plain(_) => "plain",
        Parsed::BodyPending { .. } => "body pending",
        Parsed::Partial => "partial",
        Parsed::Other => "other",
    }
}

#[test]
fn only_plain_requests_are_taken() {
    assert_eq!(kind(&plain("", "{}")), "plain");
    assert_eq!(kind(&plain("Connection: Keep-Alive\r\n", "{}")), "plain");
    assert_eq!(kind(&plain("", "")), "plain");
    // HTTP/1.0 that keeps its connection (ApacheBench's `-k`).
    let http10 = |extra: &str| {
        format!("POST /v1/systemone HTTP/1.0\r\n{extra}content-length: 2\r\n\r\n{{}}").into_bytes()
    };
    assert_eq!(kind(&http10("Connection: Keep-Alive\r\n")), "plain");
    assert_eq!(
        kind(&http10(
            "connection: keep-alive\r\nconnection: keep-alive\r\n"
        )),
        "plain"
    );
    // Still arriving.
    assert_eq!(kind(b""), "partial");
    assert_eq!(
        kind(b"POST /v1/systemone HTTP/1.1\r\nhost: p\r\n"),
        "partial"
    );
    let whole = plain("", "{\"model\": 1}");
    assert_eq!(kind(&whole[..whole.len() - 3]), "body pending");
    // Hyper's: other methods, paths, versions, framings and connection options.
    for other in [
        b"GET /v1/systemone HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"post /v1/systemone HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"POST /v1/systemone?x=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"POST /v1/systemone/ HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"POST http://p/v1/systemone HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"POST /v1/systemone HTTP/1.0\r\ncontent-length: 0\r\n\r\n".to_vec(),
        http10("connection: close\r\n"),
        http10("connection: keep-alive, close\r\n"),
        http10("connection: keep-alive\r\nconnection: close\r\n"),
        http10("keep-alive: timeout=5\r\n"),
        b"POST /v1/systemone HTTP/1.1\r\n\r\n".to_vec(),
        plain("content-length: 2\r\n", "{}"),
        plain("transfer-encoding: chunked\r\n", "{}"),
        plain("Expect: 100-continue\r\n", "{}"),
        plain("upgrade: h2c\r\n", "{}"),
        plain("connection: close\r\n", "{}"),
        plain("connection: keep-alive, upgrade\r\n", "{}"),
        b"POST /v1/systemone HTTP/1.1\r\ncontent-length: +2\r\n\r\n{}".to_vec(),
        b"POST /v1/systemone HTTP/1.1\r\ncontent-length: 2 2\r\n\r\n{}".to_vec(),
        b"POST /v1/systemone HTTP/1.1\r\ncontent-length: 99999999999999999999\r\n\r\n".to_vec(),
        format!(
            "POST /v1/systemone HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
            MAX_PLAIN_BODY + 1
        )
        .into_bytes(),
        b"POST /v1/systemone HTTP/1.1\r\nbad name: x\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
    ] {
        assert_eq!(kind(&other), "other", "{}", String::from_utf8_lossy(&other));
    }
    // More fields than hyper parses: hyper's (it refuses them).
    let many: String = (0..=MAX_HEADER_FIELDS)
        .map(|i| format!("x-{i}: v\r\n"))
        .collect();
    assert_eq!(kind(&plain(&many, "{}")), "other");
}

#[test]
fn a_plain_request_is_what_hyper_hands_the_service() {
    let bytes = Bytes::from(plain(
        "Authorization: Bearer k\r\nX-Many: 1\r\nx-many: 2\r\n",
        "{\"a\":1}",
    ));
    let Parsed::Plain(framing) = parse(&bytes) else {
        panic!("not plain");
    };
    assert_eq!(framing.total, bytes.len());
    let request = framing.request(&bytes).unwrap();
    assert_eq!(request.method(), Method::POST);
    assert_eq!(request.uri(), "/v1/systemone");
    assert_eq!(request.version(), Version::HTTP_11);
    let fields: Vec<(String, &[u8])> = request
        .headers()
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes()))
        .collect();
    assert_eq!(
        fields,
        [
            ("host".to_string(), &b"p"[..]),
            ("content-length".to_string(), b"7"),
            ("authorization".to_string(), b"Bearer k"),
            ("x-many".to_string(), b"1"),
            ("x-many".to_string(), b"2"),
        ]
    );
    assert!(request.extensions().is_empty());
    let body = futures_util::FutureExt::now_or_never(request.into_body().collect())
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"{\"a\":1}");

    let bytes = Bytes::from_static(
        b"POST /v1/systemone HTTP/1.0\r\nConnection: Keep-Alive\r\ncontent-length: 0\r\n\r\n",
    );
    let Parsed::Plain(framing) = parse(&bytes) else {
        panic!("not plain");
    };
    assert_eq!(framing.request(&bytes).unwrap().version(), Version::HTTP_10);
}

fn written_for(response: Response, draining: bool, version: Version) -> (String, bool) {
    let (bytes, close) = futures_util::FutureExt::now_or_never(encode(response, draining, version))
        .unwrap()
        .unwrap();
    (String::from_utf8(bytes).unwrap(), close)
}

fn written(response: Response, draining: bool) -> (String, bool) {
    written_for(response, draining, Version::HTTP_11)
}

/// The date line's value replaced by `D` (checked to be an IMF-fixdate).
fn undated(text: &str) -> String {
    let start = text.find("date: ").unwrap() + 6;
    let date = &text[start..start + 29];
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    format!("{}D{}", &text[..start], &text[start + 29..])
}

/// Asserts what `encode` wrote (`written`): whether it closes, and its text (dated).
fn assert_written((text, close): (String, bool), closes: bool, expected: &str) {
    assert_eq!(close, closes, "{text}");
    assert_eq!(undated(&text), expected);
}

/// An empty response with `status` whose handler says `connection: close`.
fn closing(status: axum::http::StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[test]
fn responses_are_written_as_hyper_writes_them() {
    let mut response = Response::new(Body::from("{\"x\":1}"));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(7u64));
    headers.append("x-a", HeaderValue::from_static("1"));
    headers.append("x-a", HeaderValue::from_static("2"));
    assert_written(
        written(response, false),
        false,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\
         x-a: 1\r\nx-a: 2\r\ndate: D\r\n\r\n{\"x\":1}",
    );
    // Another status, no length set: its canonical reason and a length after the fields.
    let mut response = Response::new(Body::from("no"));
    *response.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
    assert_written(
        written(response, false),
        false,
        "HTTP/1.1 422 Unprocessable Entity\r\ncontent-length: 2\r\ndate: D\r\n\r\nno",
    );
    // A handler's `connection: close`, and the drain's.
    assert_written(
        written(closing(axum::http::StatusCode::OK), false),
        true,
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\ndate: D\r\n\r\n",
    );
    assert_written(
        written(Response::new(Body::from("a")), true),
        true,
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\ndate: D\r\n\r\na",
    );
    // The drain's `close` after another option: one `connection` line, as hyper joins
    // them; other repeated fields keep a line each.
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("x-opt"));
    headers.append("x-b", HeaderValue::from_static("1"));
    headers.append("x-b", HeaderValue::from_static("2"));
    assert_written(
        written(response, true),
        true,
        "HTTP/1.1 200 OK\r\nconnection: x-opt, close\r\nx-b: 1\r\nx-b: 2\r\n\
         content-length: 0\r\ndate: D\r\n\r\n",
    );
}

#[test]
fn responses_to_http10_get_hypers_connection_fix_ups() {
    let http10 = |response, draining| written_for(response, draining, Version::HTTP_10);
    // Kept: `keep-alive` after the response's own fields, and no `200 OK` shortcut.
    let mut response = Response::new(Body::from("{}"));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    assert_written(
        http10(response, false),
        false,
        "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\n\
         content-length: 2\r\ndate: D\r\n\r\n{}",
    );
    // A handler's `close`: `keep-alive` appended to it, and the connection still closes.
    assert_written(
        http10(closing(axum::http::StatusCode::UNAUTHORIZED), false),
        true,
        "HTTP/1.0 401 Unauthorized\r\nconnection: close, keep-alive\r\n\
         content-length: 0\r\ndate: D\r\n\r\n",
    );
    // The drain: nothing added (closing is HTTP/1.0's default), and closed.
    assert_written(
        http10(Response::new(Body::from("a")), true),
        true,
        "HTTP/1.0 200 OK\r\ncontent-length: 1\r\ndate: D\r\n\r\na",
    );
}

#[test]
fn connection_options_and_lengths_are_read_as_hyper_reads_them() {
    assert!(says_close(b"close"));
    assert!(says_close(b"Keep-Alive, Close"));
    assert!(says_close(b" close "));
    assert!(!says_close(b"keep-alive"));
    assert!(!says_close(b"closed"));
    assert_eq!(content_length(b"0"), Some(0));
    assert_eq!(content_length(b"00012"), Some(12));
    assert_eq!(content_length(b""), None);
    assert_eq!(content_length(b"-1"), None);
    assert_eq!(content_length(b"1,1"), None);
    assert_eq!(content_length(b"9999999999999"), None);
}

#[test]
fn field_names_are_what_the_http_crate_makes_of_them() {
    for (name, text) in COMMON_NAMES.iter().zip(COMMON_TEXTS) {
        assert_eq!(name.as_str().as_bytes(), text);
    }
    let mut names: Vec<Vec<u8>> = COMMON_NAMES
        .iter()
        .flat_map(|name| {
            let lower = name.as_str().as_bytes().to_vec();
            let upper = lower.to_ascii_uppercase();
            // Every other letter upper-cased, as `X-TypeSafe-SDK`.
            let mixed = lower
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        *b
                    }
                })
                .collect();
            // One byte longer and shorter: not the common name.
            let longer = [lower.as_slice(), b"x"].concat();
            let shorter = lower[..lower.len() - 1].to_vec();
            [lower, upper, mixed, longer, shorter]
        })
        .collect();
    for other in [
        &b"X-TypeSafe-SDKs"[..],
        b"x-other",
        b"Tracestate",
        b"bad name",
        b"",
        b"\xff",
        b"x_typesafe_sdk",
    ] {
        names.push(other.to_vec());
    }
    for raw in &names {
        assert_eq!(
            field_name(raw),
            HeaderName::from_bytes(raw).ok(),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
    assert_eq!(
        field_name(b"X-TypeSafe-SDK").unwrap().as_str(),
        "x-typesafe-sdk"
    );
}
