//! `GET /v1/questions`: a recipient fetches the questions its contract pins, in System One
//! request form, and sends them back unchanged.

use serde_json::{Value, json};

use crate::helpers::{
    CLIENT_KEY, MULTI_KEY, TestConfig, contract, error_of, question, recipient, spawn,
};

/// `GET path` with `key` (none: no key) and optional `X-Release-Contract`.
async fn get(
    app: &crate::helpers::TestApp,
    path: &str,
    key: Option<&str>,
    header: Option<&str>,
) -> reqwest::Response {
    let mut request = app.client.get(format!("{}{path}", app.address));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(contract) = header {
        request = request.header("x-release-contract", contract);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_recipient_fetches_its_contracts_questions_and_sends_them_back_unchanged() {
    let app = spawn("full_native", "").await;
    let response = get(&app, "/v1/questions", Some(CLIENT_KEY), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .starts_with("rg-")
    );
    let body: Value = response.json().await.unwrap();
    let pinned = json!({
        "cause": {"type": "choice", "instructions": "Why?", "criteria": {"A": null, "B": "b", "C": null, "D": null}},
        "level": {"type": "score", "criteria": ["low", "mid", "high"]},
        "urgent": {"type": "noul", "instructions": "Urgent?"}
    });
    assert_eq!(body, json!({"questions": pinned}));
    assert_eq!(
        app.upstream.seen.lock().unwrap().len(),
        0,
        "nothing asked upstream"
    );
    // Sent back as they came: accepted, and what goes upstream is the same text.
    let request =
        json!({"model": "jev-latest", "state": {"ticket": "t"}, "questions": body["questions"]});
    let answered = app.post(&request).await;
    assert_eq!(answered.status(), 200);
    let upstream: Value = serde_json::from_slice(&app.upstream.last().body).unwrap();
    assert_eq!(upstream["questions"], pinned);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "releasegate_request_duration_seconds_count{contract=\"main\",route=\"questions\",status_class=\"2xx\"} 1"
        ),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_listing_follows_the_contract_choice_and_refuses_as_every_route_does() {
    let lines = "instructions = \"Which team?\"\ndescriptions = { billing = \"Payments\" }";
    let config = TestConfig {
        recipients: vec![
            recipient("one", CLIENT_KEY, &["main"]),
            recipient("two", MULTI_KEY, &["main", "desk"]),
        ],
        contracts: vec![contract(
            "desk",
            "",
            vec![question("team", &["billing", "technical"], "choice", lines)],
        )],
        ..TestConfig::default()
    };
    let app = config.spawn().await;
    let desk = json!({"questions": {"team": {"type": "choice", "instructions": "Which team?",
        "criteria": {"billing": "Payments", "technical": null}}}});
    // By path prefix and by header: only the chosen contract's questions, none of `main`'s.
    for (path, header) in [
        ("/contracts/desk/v1/questions", None),
        ("/v1/questions", Some("desk")),
    ] {
        let response = get(&app, path, Some(MULTI_KEY), header).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.json::<Value>().await.unwrap(), desk, "{path}");
    }
    // Refusals: no key, a contract not bound to the key, no contract chosen, a conflict.
    let cases = [
        ("/v1/questions", None, None, 403, "authentication_error"),
        (
            "/contracts/desk/v1/questions",
            Some(CLIENT_KEY),
            None,
            403,
            "permission_denied",
        ),
        (
            "/v1/questions",
            Some(MULTI_KEY),
            None,
            400,
            "contract_required",
        ),
        (
            "/contracts/desk/v1/questions",
            Some(MULTI_KEY),
            Some("main"),
            400,
            "contract_conflict",
        ),
    ];
    for (path, key, header, status, kind) in cases {
        let (got, error_type, _) = error_of(get(&app, path, key, header).await).await;
        assert_eq!(
            (got, error_type.as_str()),
            (status, kind),
            "{path} {key:?} {header:?}"
        );
    }
    let other = app
        .client
        .post(format!("{}/v1/questions", app.address))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 405);
    assert_eq!(app.upstream.seen.lock().unwrap().len(), 0);
    app.stop().await;
}
