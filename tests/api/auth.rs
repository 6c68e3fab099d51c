//! Authentication and contract selection.

use serde_json::Value;

use crate::helpers::{CLIENT_KEY, Headers, MULTI_KEY, error_of, request, spawn};

#[tokio::test]
async fn each_auth_case_gets_its_status() {
    let app = spawn("choice", "").await;
    let body = serde_json::to_vec(&request()).unwrap();
    let bearer_one = format!("Bearer {CLIENT_KEY}");
    let bearer_two = format!("Bearer {MULTI_KEY}");
    let cases: Vec<(Headers, u16, &str)> = vec![
        // No key at all, or none as a bearer key, is 403 (as the System One API answers);
        // a key it does not know is 401.
        (vec![], 403, "authentication_error"),
        (
            vec![("authorization", "Bearer wrong")],
            401,
            "authentication_error",
        ),
        (
            vec![("authorization", "Basic abc")],
            403,
            "authentication_error",
        ),
        (vec![("x-api-key", "wrong")], 401, "authentication_error"),
        (
            vec![
                ("authorization", &bearer_one),
                ("x-release-contract", "other"),
            ],
            403,
            "permission_denied",
        ),
        (
            vec![
                ("authorization", &bearer_one),
                ("x-release-contract", "nonexistent"),
            ],
            403,
            "permission_denied",
        ),
        (
            vec![("authorization", &bearer_two)],
            400,
            "contract_required",
        ),
    ];
    for (headers, status, error_type) in cases {
        let (got_status, got_type, _) = error_of(app.post_raw(body.clone(), &headers).await).await;
        assert_eq!(
            (got_status, got_type.as_str()),
            (status, error_type),
            "{headers:?}"
        );
    }
    // Nothing was forwarded for refused callers.
    assert!(app.upstream.seen.lock().unwrap().is_empty());

    // A key bound to several contracts picks one with the header.
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &bearer_two),
                ("x-release-contract", "other"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let released: Value = response.json().await.unwrap();
    assert_eq!(
        released["usage"],
        serde_json::json!({"input_tokens": 0, "output_tokens": 0})
    );
    let response = app.post_raw(body, &[("x-api-key", CLIENT_KEY)]).await;
    assert_eq!(response.status(), 200);
    app.stop().await;
}

#[tokio::test]
async fn models_are_listed_for_authenticated_callers_only() {
    let app = spawn("choice", "").await;
    let url = format!("{}/v1/models", app.address);
    let refused = app.client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    let refused = app
        .client
        .get(&url)
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let response = app
        .client
        .get(&url)
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.contains("UPSTREAM-SECRET"));
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["models"][0]["name"], "jev-latest");
    assert_eq!(body["models"].as_array().unwrap().len(), 2);
    app.stop().await;
}
