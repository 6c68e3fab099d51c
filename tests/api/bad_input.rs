//! Bad client input gets a clear 4xx and is never forwarded.

use serde_json::{Value, json};

use crate::helpers::{CLIENT_KEY, Headers, error_of, request, spawn};

#[tokio::test]
async fn schema_errors_get_422_in_the_real_apis_validation_shape() {
    let app = spawn("choice", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let without = |key: &str| {
        let mut body = request();
        body.as_object_mut().unwrap().remove(key);
        serde_json::to_vec(&body).unwrap()
    };
    let with = |pointer: &str, value: Value| {
        let mut body = request();
        *body.pointer_mut(pointer).unwrap() = value;
        serde_json::to_vec(&body).unwrap()
    };
    let cases: Vec<(Vec<u8>, Value, &str)> = vec![
        (b"{not json".to_vec(), json!(["body", 1]), "json_invalid"),
        (
            vec![0xff, 0xfe, 0x00, 0x01],
            json!(["body", 0]),
            "json_invalid",
        ),
        (without("model"), json!(["body", "model"]), "missing"),
        (without("state"), json!(["body", "state"]), "missing"),
        (
            without("questions"),
            json!(["body", "questions"]),
            "missing",
        ),
        (
            with("/model", json!(["jev"])),
            json!(["body", "model"]),
            "string_type",
        ),
        (
            with("/state", json!(42)),
            json!(["body", "state", "str"]),
            "string_type",
        ),
        (
            with("/questions", json!({})),
            json!(["body", "questions"]),
            "too_short",
        ),
        (
            with("/questions/cause/type", json!("ranking")),
            json!(["body", "questions", "cause"]),
            "union_tag_invalid",
        ),
        (
            with("/questions/cause/criteria", json!(null)),
            json!(["body", "questions", "cause", "choice", "criteria"]),
            "dict_type",
        ),
    ];
    for (body, loc, kind) in cases {
        let response = app.post_raw(body, &[("authorization", &auth)]).await;
        assert_eq!(response.status(), 422, "{loc}");
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        let first = &body["detail"][0];
        assert_eq!(
            (&first["loc"], first["type"].as_str()),
            (&loc, Some(kind)),
            "{text}"
        );
        assert!(
            first["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "{text}"
        );
        assert!(first.get("input").is_none(), "{text}");
        assert!(
            !text.contains("ranking") && !text.contains("jev"),
            "echoed input: {text}"
        );
    }
    assert!(app.upstream.seen.lock().unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn contract_violations_get_400_naming_the_problem() {
    let app = spawn("choice", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let mut uncovered = request();
    uncovered["questions"]["secret_cause"] =
        json!({"type": "choice", "criteria": {"x": null, "y": null}});
    let mut wrong_classes = request();
    wrong_classes["questions"]["cause"]["criteria"] = json!({"A": null, "B": null});
    let mut box_question = request();
    box_question["questions"]["cause"] = json!({"type": "box", "instructions": "Where?"});
    // A question outside the contract is not released: 403 naming it.
    let (status, got_type, message) = error_of(
        app.post_raw(
            serde_json::to_vec(&uncovered).unwrap(),
            &[("authorization", &auth)],
        )
        .await,
    )
    .await;
    assert_eq!((status, got_type.as_str()), (403, "question_not_released"));
    assert!(
        message.contains("question `secret_cause` is not released"),
        "{message}"
    );
    let cases: Vec<(Value, &str)> = vec![
        (wrong_classes, "classes"),
        (box_question, "asks it as a choice question"),
    ];
    for (body, needle) in cases {
        let (status, got_type, message) = error_of(
            app.post_raw(
                serde_json::to_vec(&body).unwrap(),
                &[("authorization", &auth)],
            )
            .await,
        )
        .await;
        assert_eq!((status, got_type.as_str()), (400, "invalid_request"));
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
            vec![("content-type", "application/xml")],
            415,
            "unsupported_media_type",
        ),
        // Multipart is read (tests/api/images.rs): a JSON body under its content type
        // is not a multipart body.
        (
            vec![("content-type", "multipart/form-data; boundary=x")],
            400,
            "invalid_multipart",
        ),
        (vec![("content-encoding", "zstd")], 400, "invalid_json"),
        (vec![("content-encoding", "gzip")], 400, "invalid_json"),
        // Media types in any case.
        (
            vec![("content-type", "APPLICATION/XML")],
            415,
            "unsupported_media_type",
        ),
        (
            vec![("content-type", "Multipart/Form-Data; boundary=x")],
            400,
            "invalid_multipart",
        ),
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
    // And a JSON body under `Application/JSON; charset=UTF-8` is read as JSON.
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &auth),
                ("content-type", "Application/JSON; charset=UTF-8"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
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

#[tokio::test]
async fn a_model_that_is_not_a_plain_id_is_refused_before_the_provider_is_asked() {
    let app = crate::helpers::spawn("choice", "").await;
    for model in ["x y", "é", " jev-latest", &"m".repeat(129), "-jev", "a\"b"] {
        let mut body = crate::helpers::request();
        body["model"] = serde_json::json!(model);
        let response = app.post(&body).await;
        let (status, error_type, message) = crate::helpers::error_of(response).await;
        assert_eq!(
            (status, error_type.as_str()),
            (400, "invalid_request"),
            "{model:?}"
        );
        assert!(
            message.contains("plain model id") && !message.contains(model),
            "{message}"
        );
    }
    assert!(
        app.upstream.seen.lock().unwrap().is_empty(),
        "a refused request went upstream"
    );
    let metrics = app.metrics().await;
    assert!(!metrics.contains("reason=\"bad_model\"} 1"), "{metrics}");
    app.stop().await;
}
