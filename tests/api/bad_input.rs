//! Bad client input gets a clear 4xx and is never forwarded.

use serde_json::json;

use crate::helpers::{CLIENT_KEY, Headers, error_of, request, spawn};

#[tokio::test]
async fn malformed_requests_get_400_naming_the_problem() {
    let app = spawn("choice", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let mut no_model = request();
    no_model.as_object_mut().unwrap().remove("model");
    let mut no_state = request();
    no_state.as_object_mut().unwrap().remove("state");
    let mut no_questions = request();
    no_questions.as_object_mut().unwrap().remove("questions");
    let mut uncovered = request();
    uncovered["questions"]["secret_cause"] =
        json!({"type": "choice", "criteria": {"x": null, "y": null}});
    let mut wrong_classes = request();
    wrong_classes["questions"]["cause"]["criteria"] = json!({"A": null, "B": null});
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"{not json".to_vec(), "invalid_json", "not valid JSON"),
        (
            vec![0xff, 0xfe, 0x00, 0x01],
            "invalid_json",
            "not valid JSON",
        ),
        (
            serde_json::to_vec(&no_model).unwrap(),
            "invalid_request",
            "`model`",
        ),
        (
            serde_json::to_vec(&no_state).unwrap(),
            "invalid_request",
            "`state`",
        ),
        (
            serde_json::to_vec(&no_questions).unwrap(),
            "invalid_request",
            "`questions`",
        ),
        (
            serde_json::to_vec(&uncovered).unwrap(),
            "invalid_request",
            "`secret_cause` is not covered",
        ),
        (
            serde_json::to_vec(&wrong_classes).unwrap(),
            "invalid_request",
            "classes",
        ),
    ];
    for (body, error_type, needle) in cases {
        let (status, got_type, message) =
            error_of(app.post_raw(body, &[("authorization", &auth)]).await).await;
        assert_eq!(status, 400);
        assert_eq!(got_type, error_type);
        assert!(
            message.contains(needle),
            "{message} should mention {needle}"
        );
    }
    assert!(app.upstream.seen.lock().unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn oversize_bodies_get_413_before_and_after_decompression() {
    let app = spawn("choice", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let big = vec![b' '; 70_000];
    let (status, error_type, _) =
        error_of(app.post_raw(big.clone(), &[("authorization", &auth)]).await).await;
    assert_eq!((status, error_type.as_str()), (413, "request_too_large"));
    // A small zstd body that expands past the limit is refused too.
    let bomb = zstd::encode_all(vec![b' '; 1_000_000].as_slice(), 19).unwrap();
    assert!(bomb.len() < 65536);
    let (status, _, _) = error_of(
        app.post_raw(
            bomb,
            &[("authorization", &auth), ("content-encoding", "zstd")],
        )
        .await,
    )
    .await;
    assert_eq!(status, 413);
    assert!(app.upstream.seen.lock().unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn unsupported_encodings_and_media_types_are_refused() {
    let app = spawn("choice", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let body = serde_json::to_vec(&request()).unwrap();
    let cases: Vec<(Headers, u16, &str)> = vec![
        (
            vec![("content-encoding", "br")],
            415,
            "unsupported_media_type",
        ),
        (
            vec![("content-type", "multipart/form-data; boundary=x")],
            415,
            "unsupported_media_type",
        ),
        (vec![("content-encoding", "zstd")], 400, "invalid_json"),
        (vec![("content-encoding", "gzip")], 400, "invalid_json"),
    ];
    for (mut headers, status, error_type) in cases {
        headers.push(("authorization", &auth));
        let (got_status, got_type, _) = error_of(app.post_raw(body.clone(), &headers).await).await;
        assert_eq!(
            (got_status, got_type.as_str()),
            (status, error_type),
            "{headers:?}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn unknown_routes_get_a_json_404() {
    let app = spawn("choice", "").await;
    let response = app
        .client
        .get(format!("{}/v2/anything", app.address))
        .send()
        .await
        .unwrap();
    let (status, error_type, _) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (404, "not_found"));
    app.stop().await;
}
