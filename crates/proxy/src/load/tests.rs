use std::path::Path;

use releasegate_core::config::{Config, Error};

use super::*;

#[test]
fn embedded_default_is_valid() {
    let config = embedded_default().unwrap();
    assert!(config.contracts.contains_key("dispatcher"));
    assert_eq!(
        config.contract("planner").unwrap().questions["coarse_cause"]
            .mechanism
            .kind(),
        "wcpq"
    );
    // The shipped file and the embedded copy agree.
    let file = load(Some(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/releasegate.toml"
    ))))
    .unwrap();
    assert_eq!(
        file.summary().lines().skip(1).collect::<Vec<_>>(),
        config.summary().lines().skip(1).collect::<Vec<_>>()
    );
    assert!(config.summary().contains("contract dispatcher"));
}

#[test]
fn concurrency_limit_stays_below_what_tokio_accepts() {
    assert!(
        usize::try_from(releasegate_core::config::limits::MAX_CONCURRENCY.1).unwrap()
            <= tokio::sync::Semaphore::MAX_PERMITS
    );
}

mod starts {
    //! Whatever validation accepts also starts: `AppState::prepare` (what `check-config` runs)
    //! and the bound application, for the numeric keys at and beyond their limits.

    use proptest::prelude::*;

    use super::*;
    use crate::server::{AppState, Application};

    const KEY_ENV: &str = "UP_KEY";

    /// A configuration with every numeric key set; the provider `up` is unreachable.
    fn numeric(values: [u64; 6]) -> String {
        let [body, upstream_body, grace, timeout, queue, concurrency] = values;
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             max_body_bytes = {body}\nmax_upstream_body_bytes = {upstream_body}\nshutdown_grace_ms = {grace}\n\
             [providers.up]\nkind = \"systemone\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"{KEY_ENV}\"\n\
             timeout_ms = {timeout}\nqueue_timeout_ms = {queue}\nmax_concurrency = {concurrency}\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
             [contracts.c]\nprovider = \"up\"\n\
             [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n",
            crate::auth::hash_key("client"),
        )
    }

    fn load(values: [u64; 6]) -> Result<Config, Error> {
        from_toml_with_env(&numeric(values), &|name| {
            (name == KEY_ENV).then(|| "k".to_string())
        })
    }

    fn in_range(values: [u64; 6]) -> bool {
        use releasegate_core::config::limits::*;
        let ranges = [
            BODY_BYTES,
            BODY_BYTES,
            SHUTDOWN_GRACE_MS,
            TIMEOUT_MS,
            QUEUE_TIMEOUT_MS,
            MAX_CONCURRENCY,
        ];
        values
            .iter()
            .zip(ranges)
            .all(|(v, (min, max))| (min..=max).contains(v))
    }

    /// Values around every limit (and the extremes TOML can hold).
    fn value() -> impl Strategy<Value = u64> {
        let edges: Vec<u64> = [0, 1, 2, 100_000, 3_600_000, 1 << 30, 1 << 61, 1 << 62]
            .into_iter()
            .flat_map(|v: u64| [v.saturating_sub(1), v, v + 1])
            .chain([i64::MAX as u64])
            .collect();
        prop_oneof![
            3 => proptest::sample::select(edges),
            1 => 0..=i64::MAX as u64,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn accepted_numeric_values_prepare_without_panic(values in proptest::array::uniform6(value())) {
            match load(values) {
                Ok(config) => {
                    prop_assert!(in_range(values), "{values:?} is out of range but was accepted");
                    prop_assert!(AppState::prepare(config).is_ok());
                }
                Err(error) => prop_assert!(!in_range(values), "{values:?} rejected: {error}"),
            }
        }
    }

    /// Sends one request through a proxy built from `values` (the provider is unreachable).
    async fn serve_one(values: [u64; 6]) -> u16 {
        let config = load(values).unwrap();
        let app = Application::build(config).await.unwrap();
        let url = format!("http://127.0.0.1:{}/v1/systemone", app.port());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        let body = r#"{"model": "m", "state": {}, "questions": {"q": {"type": "choice", "criteria": {"A": null, "B": null}}}}"#;
        let response = reqwest::Client::new()
            .post(url)
            .header("authorization", "Bearer client")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the proxy answers (no panic)");
        let status = response.status().as_u16();
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        status
    }

    #[tokio::test]
    async fn the_limits_of_every_numeric_key_serve() {
        use releasegate_core::config::limits::*;
        let highest = [
            BODY_BYTES.1,
            BODY_BYTES.1,
            SHUTDOWN_GRACE_MS.1,
            TIMEOUT_MS.1,
            QUEUE_TIMEOUT_MS.1,
            MAX_CONCURRENCY.1,
        ];
        // Connection refused: 502, whatever the limits.
        assert_eq!(serve_one(highest).await, 502);
        let lowest = [
            // A 1-byte body cap refuses the request itself.
            BODY_BYTES.0,
            BODY_BYTES.0,
            SHUTDOWN_GRACE_MS.0,
            TIMEOUT_MS.0,
            QUEUE_TIMEOUT_MS.0,
            MAX_CONCURRENCY.0,
        ];
        assert_eq!(serve_one(lowest).await, 413);
        let mut tight = lowest;
        tight[0] = 4096;
        assert!([502, 504].contains(&serve_one(tight).await));
    }
}
