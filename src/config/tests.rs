use super::*;

const MINIMAL: &str = r#"
[providers.sim]
kind = "simulated"

[[recipients]]
name = "r"
key_sha256 = "d2aacb68b85bbdced6e4c3f176f8c2c9f0e8faa9e41842a3c426d1111a37022b"
contracts = ["c"]

[contracts.c]
provider = "sim"

[contracts.c.questions.q]
classes = ["A", "B", "C"]
view = "full_native"
"#;

fn problems(text: &str) -> Vec<String> {
    match Config::from_toml(text) {
        Err(Error::Invalid(problems)) => problems,
        Err(Error::Load(message)) => vec![message],
        Ok(_) => Vec::new(),
    }
}

#[test]
fn embedded_default_is_valid() {
    let config = Config::embedded_default().unwrap();
    assert!(config.contracts.contains_key("dispatcher"));
    assert_eq!(
        config.contract("planner").unwrap().questions["coarse_cause"]
            .mechanism
            .kind(),
        "wcpq"
    );
    // The shipped file and the embedded copy agree.
    let file = Config::load(Some(Path::new(DEFAULT_PATH))).unwrap();
    assert_eq!(
        file.summary().lines().skip(1).collect::<Vec<_>>(),
        config.summary().lines().skip(1).collect::<Vec<_>>()
    );
    assert!(config.summary().contains("contract dispatcher"));
}

#[test]
fn minimal_config_gets_server_defaults() {
    let config = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(config.server.listen.port(), 8080);
    assert_eq!(config.server.max_body_bytes, 1024 * 1024);
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.server.body_read_timeout, Duration::from_secs(30));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(60));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(config.server.admin_max_connections, 64);
    assert_eq!(config.server.drain_delay, Duration::ZERO);
    assert_eq!(config.server.worker_threads, 0);
    let single = Config::from_toml(&format!("[server]\nworker_threads = 1\n{MINIMAL}")).unwrap();
    assert_eq!(single.server.worker_threads, 1);
    assert_eq!(single.server.event_loops(), 1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(config.server.event_loops(), cores);
    assert!(single.summary().contains("worker threads 1"));
    assert!(config.summary().contains("worker threads one per core"));
    assert!(config.server.access_log);
    assert!(config.summary().contains("access log on"));
    let quiet = Config::from_toml(&format!("[server]\naccess_log = false\n{MINIMAL}")).unwrap();
    assert!(!quiet.server.access_log);
    assert_eq!(
        config.contract("c").unwrap().questions["q"].classes.len(),
        3
    );
}

#[test]
fn errors_name_the_key_and_reason() {
    let cases = [
        (MINIMAL.replace("provider = \"sim\"", "provider = \"nope\""), "contracts.c.provider"),
        (MINIMAL.replace("[\"A\", \"B\", \"C\"]", "[\"A\"]"), "contracts.c.questions.q.classes"),
        (MINIMAL.replace("[\"A\", \"B\", \"C\"]", "[\"A\", \"A\"]"), "listed twice"),
        (MINIMAL.replace("contracts = [\"c\"]", "contracts = [\"x\"]"), "recipients[0].contracts"),
        (MINIMAL.replace("key_sha256 = \"d2", "key_sha256 = \"zz"), "recipients[0].key_sha256"),
        (MINIMAL.replace("full_native", "everything"), "view"),
        (
            format!("{MINIMAL}withhold_labels = [\"Z\"]\n"),
            "contracts.c.questions.q.withhold_labels",
        ),
        (format!("{MINIMAL}coarsen = {{ Z = \"Y\" }}\n"), "contracts.c.questions.q.coarsen"),
        (format!("{MINIMAL}surprise = 1\n"), "surprise"),
        (
            MINIMAL.replace("kind = \"simulated\"", "kind = \"systemone\"\nbase_url = \"ftp://x\""),
            "providers.sim.base_url",
        ),
        (
            MINIMAL.replace(
                "kind = \"simulated\"",
                "kind = \"systemone\"\nbase_url = \"http://x\"\napi_key_env = \"RELEASEGATE_TEST_UNSET_KEY_VAR\"",
            ),
            "RELEASEGATE_TEST_UNSET_KEY_VAR",
        ),
        (format!("[server]\nlisten = \"nowhere\"\n{MINIMAL}"), "server.listen"),
        (format!("[server]\nheader_read_timeout_ms = 0\n{MINIMAL}"), "server.header_read_timeout_ms"),
        (format!("[server]\nbody_read_timeout_ms = 0\n{MINIMAL}"), "server.body_read_timeout_ms"),
        (format!("[server]\nidle_timeout_ms = 0\n{MINIMAL}"), "server.idle_timeout_ms"),
        (format!("[server]\nmax_connections = 0\n{MINIMAL}"), "server.max_connections"),
        (format!("[server]\nadmin_max_connections = 2000000\n{MINIMAL}"), "server.admin_max_connections"),
        (format!("[server]\nworker_threads = 5000\n{MINIMAL}"), "server.worker_threads"),
    ];
    for (text, needle) in cases {
        let found = problems(&text);
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "expected a problem naming {needle}, got {found:?}"
        );
    }
}

#[test]
fn coarsening_orders_labels_by_first_appearance() {
    let text =
        format!("{MINIMAL}coarsen = {{ A = \"X\", C = \"X\" }}\nwithhold_labels = [\"B\"]\n");
    let config = Config::from_toml(&text).unwrap();
    let rule = &config.contract("c").unwrap().questions["q"];
    let coarsening = rule.coarsen.as_ref().unwrap();
    assert_eq!(coarsening.labels, vec!["X".to_string(), "B".to_string()]);
    assert_eq!(coarsening.map, vec![0, 1, 0]);
    assert_eq!(rule.withhold, vec![false, true]);
}

#[test]
fn sha256_hex_parses_only_64_hex_digits() {
    assert!(parse_sha256_hex(&"ab".repeat(32)).is_some());
    assert!(parse_sha256_hex(&"ab".repeat(31)).is_none());
    assert!(parse_sha256_hex(&"zz".repeat(32)).is_none());
    assert!(parse_sha256_hex(&"é".repeat(32)).is_none());
}
