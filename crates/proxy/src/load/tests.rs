use std::path::Path;

use releasegate_core::config::{Config, Error};

use super::*;

#[test]
fn embedded_default_is_valid() {
    let config = embedded_default().unwrap();
    assert!(config.contracts().contains_key("dispatcher"));
    assert_eq!(
        config.contract("planner").unwrap().questions()["coarse_cause"]
            .mechanism()
            .kind(),
        "wcpq"
    );
    // The shipped file and the embedded copy agree.
    let file = load(Some(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/releasegate.toml"
    ))))
    .unwrap();
    // (but for where the certificates are: the file's directory, or the binary).
    let lines = |config: &Config| -> Vec<String> {
        config
            .summary()
            .lines()
            .skip(1)
            .filter(|line| !line.starts_with("certification: "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(lines(&file), lines(&config));
    assert!(config.summary().contains("contract dispatcher"));
}

#[test]
fn the_shipped_configuration_serves_only_certified_policies() {
    use releasegate_core::certificate::{Kind, Mode};
    // The committed certificates match what the shipped file (and so the embedded default)
    // releases: a change to a certified contract that is not certified again fails here, as
    // `serve` would refuse it.
    let config = embedded_default().unwrap();
    assert_eq!(config.certification().mode(), Mode::Required);
    let entries: Vec<(Kind, &str)> = config
        .certification()
        .entries()
        .iter()
        .map(|entry| {
            assert!(
                entry.status.is_certified(),
                "{} {}: {}",
                entry.kind.as_str(),
                entry.name,
                entry.status.describe()
            );
            (entry.kind, entry.name.as_str())
        })
        .collect();
    assert_eq!(
        entries,
        [
            (Kind::Contract, "analyst-coarse"),
            (Kind::Contract, "dispatcher"),
            (Kind::Contract, "planner"),
            (Kind::Recipient, "analyst"),
        ]
    );
    assert_eq!(config.certification().refusal(), None);
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

mod compressed {
    //! Codebooks (and any file a configuration names) as `*.zst`.

    use super::*;

    #[test]
    fn a_zst_file_reads_back_as_the_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"{\"codewords\": [1, 2, 3]}".repeat(1000);
        let packed = dir.path().join("c.json.zst");
        write_file(&packed, &bytes).unwrap();
        let on_disk = std::fs::read(&packed).unwrap();
        assert_eq!(&on_disk[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
        assert!(on_disk.len() < bytes.len() / 10);
        assert_eq!(read_file(&packed).unwrap(), bytes);
        // Other names are written and read as they are.
        let plain = dir.path().join("c.json");
        write_file(&plain, &bytes).unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), bytes);
        assert_eq!(read_file(&plain).unwrap(), bytes);
    }

    #[test]
    fn a_zst_file_that_is_not_zstd_or_is_cut_short_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json.zst");
        std::fs::write(&path, b"{\"plain\": \"json\"}").unwrap();
        let error = read_file(&path).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        write_file(&path, &[7u8; 100_000]).unwrap();
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 4]).unwrap();
        assert_eq!(
            read_file(&path).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_configuration_serves_the_same_codebook_compressed() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("codebooks")).unwrap();
        let json = std::fs::read(root.join("codebooks/delivery-coarse_cause.json")).unwrap();
        write_file(
            &dir.path().join("codebooks/delivery-coarse_cause.json.zst"),
            &json,
        )
        .unwrap();
        let text = std::fs::read_to_string(root.join("releasegate.toml"))
            .unwrap()
            .replace(
                "codebooks/delivery-coarse_cause.json\"",
                "codebooks/delivery-coarse_cause.json.zst\"",
            );
        assert!(text.contains(".json.zst"));
        let path = dir.path().join("releasegate.toml");
        std::fs::write(&path, text).unwrap();
        let compressed = load_offline(Some(&path)).unwrap();
        let plain = load_offline(Some(&root.join("releasegate.toml"))).unwrap();
        let sha = |config: &Config| {
            match &config.contract("planner").unwrap().questions()["coarse_cause"].mechanism() {
                releasegate_core::mechanism::Mechanism::Wcpq(wcpq) => wcpq.codebook_sha256.clone(),
                other => panic!("{}", other.kind()),
            }
        };
        assert_eq!(
            sha(&compressed),
            sha(&plain),
            "the same codebook, the same hash"
        );
        // A broken frame names the file, like any unreadable codebook.
        std::fs::write(
            dir.path().join("codebooks/delivery-coarse_cause.json.zst"),
            b"not zstd",
        )
        .unwrap();
        let Err(Error::Invalid(problems)) = load_offline(Some(&path)) else {
            panic!("a broken codebook must be refused");
        };
        assert!(
            problems
                .iter()
                .any(|p| p.contains("delivery-coarse_cause.json.zst") && p.contains("zstd")),
            "{problems:?}"
        );
    }
}
