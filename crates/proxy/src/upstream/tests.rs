use super::*;

fn provider_config(base_url: &str, key: &str) -> Config {
    let text = format!(
        "[providers.up]\nkind = \"systemone\"\nbase_url = \"{base_url}\"\napi_key_env = \"KEY\"\n\
         [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
         [contracts.c]\nprovider = \"up\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_native\"\n",
        "0".repeat(64)
    );
    let key = key.to_string();
    crate::load::from_toml_with_env(&text, &move |_| Some(key.clone())).unwrap()
}

/// An `https://` provider goes through TLS: a server that answers in plain HTTP fails
/// the handshake, which is a connection failure (502), never a plain-text exchange.
#[tokio::test]
async fn https_providers_are_reached_over_tls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                .await;
        }
    });
    let upstreams = Upstreams::new(
        &provider_config(&format!("https://127.0.0.1:{port}"), "sk-1"),
        Metrics::new().unwrap(),
    )
    .unwrap();
    let body = Bytes::from_static(b"{}");
    let json = HeaderValue::from_static("application/json");
    let post = Post {
        body: std::slice::from_ref(&body),
        content_type: &json,
        json: &body,
        sent: None,
        headers: &HeaderMap::new(),
        switches: &[],
    };
    let reply = upstreams.systemone("up", None, post).await;
    assert!(matches!(reply, Err(Error::Connect(_))), "{reply:?}");
    server.abort();
}

#[test]
fn provider_urls_and_keys_are_checked_once_at_start_up() {
    let metrics = || Metrics::new().unwrap();
    let upstreams =
        Upstreams::new(&provider_config("http://127.0.0.1:9/", "sk-1"), metrics()).unwrap();
    let Upstream::Remote(remote) = &upstreams.providers["up"].upstream else {
        panic!("not remote");
    };
    assert_eq!(
        remote.systemone_url.to_string(),
        "http://127.0.0.1:9/v1/systemone"
    );
    assert_eq!(
        remote.models_url.to_string(),
        "http://127.0.0.1:9/v1/models"
    );
    // The key is held as a sensitive header value: never printed.
    assert!(remote.authorization.as_ref().unwrap().is_sensitive());
    assert!(!format!("{upstreams:?}").contains("sk-1"));

    // Bad URLs and keys are refused earlier, by the configuration's checks.
}
