use super::*;
use std::time::Duration;

use crate::mechanism::Mechanism;
use crate::wire::Kind;

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
fn the_decision_log_is_off_unless_configured_and_summarized() {
    let config = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(config.decision_log, None);
    assert!(config.summary().contains("decision log: off\n"));
    let config = Config::from_toml(&format!(
        "{MINIMAL}[decision_log]\npath = \"/var/log/d.jsonl\"\nmax_files = 3\n"
    ))
    .unwrap();
    let log = config.decision_log.clone().unwrap();
    assert_eq!(
        log.sink,
        DecisionSink::File(PathBuf::from("/var/log/d.jsonl"))
    );
    assert_eq!(
        (log.max_bytes, log.max_files, log.queue_capacity),
        (100 * 1024 * 1024, 3, 4096)
    );
    assert!(config.summary().contains(
        "decision log: /var/log/d.jsonl (rotated at 104857600 bytes, 3 files kept) · queue 4096"
    ));
    let config =
        Config::from_toml(&format!("{MINIMAL}[decision_log]\npath = \"stdout\"\n")).unwrap();
    assert_eq!(config.decision_log.unwrap().sink, DecisionSink::Stdout);
}

#[test]
fn a_rate_limit_defaults_its_burst_to_the_rate_rounded_up() {
    let limited = |table: &str| {
        let text = MINIMAL.replace(
            "contracts = [\"c\"]",
            &format!("contracts = [\"c\"]\nrate_limit = {table}"),
        );
        let config = Config::from_toml(&text).unwrap();
        assert!(config.summary().contains("rate limit"));
        config.recipients[0].rate_limit.unwrap()
    };
    assert_eq!(limited("{ requests_per_second = 2.5 }").burst, 3);
    assert_eq!(limited("{ requests_per_second = 0.001 }").burst, 1);
    let limit = limited("{ requests_per_second = 10, burst = 50 }");
    assert_eq!((limit.requests_per_second, limit.burst), (10.0, 50));
    assert_eq!(
        Config::from_toml(MINIMAL).unwrap().recipients[0].rate_limit,
        None
    );
}

#[test]
fn the_budget_on_request_bytes_is_set_or_an_eighth_of_the_memory_limit() {
    let auto = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(auto.server.max_decoded_bytes_in_flight(), None);
    assert_eq!(
        auto.server.decoded_bytes_queue_timeout(),
        Duration::from_secs(1)
    );
    let (low, high) = AUTO_BUDGET_BYTES;
    // An eighth of the limit, within 64 MiB to 256 MiB; the low end when unknown.
    assert_eq!(auto.server.decoded_bytes_budget(Some(1 << 30)), 128 << 20);
    assert_eq!(
        auto.server.decoded_bytes_budget(Some(256 << 20)),
        low as usize
    );
    assert_eq!(
        auto.server.decoded_bytes_budget(Some(64 << 30)),
        high as usize
    );
    assert_eq!(auto.server.decoded_bytes_budget(None), low as usize);
    assert!(auto.summary().contains(
        "request bytes in flight: auto (an eighth of the memory limit, 64 MiB to 256 MiB) · queue 1000 ms"
    ));
    let set = Config::from_toml(&format!(
        "[server]\nmax_decoded_bytes_in_flight = 10485760\ndecoded_bytes_queue_timeout_ms = 250\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(set.server.decoded_bytes_budget(Some(1 << 30)), 10 << 20);
    assert!(
        set.summary()
            .contains("request bytes in flight: at most 10485760 bytes · queue 250 ms")
    );
    // Fixed at start, like every `[server]` key.
    assert_eq!(
        auto.server.changed_keys(&set.server),
        vec![
            "server.max_decoded_bytes_in_flight",
            "server.decoded_bytes_queue_timeout_ms"
        ]
    );
    let refused = problems(&format!(
        "[server]\nmax_decoded_bytes_in_flight = 1000\ndecoded_bytes_queue_timeout_ms = 3600001\n{MINIMAL}"
    ));
    assert!(
        refused
            .iter()
            .any(|p| p.starts_with("server.max_decoded_bytes_in_flight: must be between")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|p| p.starts_with("server.decoded_bytes_queue_timeout_ms: must be between")),
        "{refused:?}"
    );
}

#[test]
fn a_recipient_may_cap_its_requests_in_flight() {
    assert_eq!(
        Config::from_toml(MINIMAL).unwrap().recipients[0].max_in_flight,
        None
    );
    let text = MINIMAL.replace(
        "contracts = [\"c\"]",
        "contracts = [\"c\"]\nmax_in_flight = 4",
    );
    let config = Config::from_toml(&text).unwrap();
    assert_eq!(config.recipients[0].max_in_flight, Some(4));
    assert!(
        config
            .summary()
            .contains("recipient r: contracts c · at most 4 in flight (per replica)")
    );
    let zero = MINIMAL.replace(
        "contracts = [\"c\"]",
        "contracts = [\"c\"]\nmax_in_flight = 0",
    );
    assert!(
        problems(&zero)
            .iter()
            .any(|p| p.starts_with("recipients[0].max_in_flight: must be between 1 and")),
        "{:?}",
        problems(&zero)
    );
}

/// Two keys under one name would share one cache room, rate limit, in-flight cap and
/// connections, and one identity in the gate and the logs.
#[test]
fn two_recipients_may_not_share_a_name() {
    let second = |name: &str| {
        format!(
            "{MINIMAL}\n[[recipients]]\nname = \"{name}\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n",
            "ab".repeat(32)
        )
    };
    assert!(Config::from_toml(&second("s")).is_ok());
    assert_eq!(
        problems(&second("r")),
        [
            "recipients[1].name: `r` is also the name of recipients[0]; give every recipient a \
          name of its own"
        ]
    );
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
    assert_eq!(single.server.event_loops(6), 1);
    assert_eq!(config.server.event_loops(6), 6);
    assert_eq!(config.server.event_loops(0), 1);
    assert!(single.summary().contains("worker threads 1"));
    assert!(config.summary().contains("worker threads one per CPU"));
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
        (
            MINIMAL.replace("kind = \"simulated\"", "kind = \"simulated\"\ntimeout_ms = 5"),
            "timeout_ms",
        ),
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

/// A class question's quantize step divides 1 (else the release sums below 1, which no
/// client reads as a distribution), and a noul question's top_k keeps both outcomes.
#[test]
fn baselines_that_would_release_no_distribution_are_refused() {
    let with = |mechanism: &str| {
        MINIMAL.replace(
            "view = \"full_native\"",
            &format!("view = \"full_native\"\nmechanism = {mechanism}"),
        )
    };
    assert!(Config::from_toml(&with("{ kind = \"quantize\", step = 0.25 }")).is_ok());
    assert_eq!(
        problems(&with("{ kind = \"quantize\", step = 0.3 }")),
        [
            "contracts.c.questions.q: quantize step must divide 1 (0.5, 0.25, 0.2, 0.1, 0.05, ...), \
          got 0.3: the released probabilities would not sum to 1"
        ]
    );
    let noul = |k: u32| {
        format!(
            "{MINIMAL}[contracts.c.questions.n]\nclasses = [\"false\", \"true\"]\nview = \"full_native\"\n\
             mechanism = {{ kind = \"top_k\", k = {k} }}\n"
        )
    };
    assert!(Config::from_toml(&noul(2)).is_ok());
    assert_eq!(problems(&noul(1)).len(), 1);
    assert!(
        problems(&noul(1))[0]
            .starts_with("contracts.c.questions.n: top_k on a noul question needs k = 2")
    );
}

/// The System One API documents 2 to 10 score levels: a contract asking more would be
/// refused on every request, so it is refused at once; the same labels may still be a
/// declared choice question's.
#[test]
fn a_score_question_has_at_most_ten_levels() {
    let levels = |n: usize, extra: &str| {
        let labels: Vec<String> = (0..n).map(|i| format!("\"{i}\"")).collect();
        format!(
            "{MINIMAL}[contracts.c.questions.s]\nclasses = [{}]\nview = \"choice\"\n{extra}",
            labels.join(", ")
        )
    };
    assert!(Config::from_toml(&levels(10, "")).is_ok());
    assert_eq!(
        problems(&levels(11, "")),
        [
            "contracts.c.questions.s.classes: a score question has 2 to 10 levels (the System One \
          API's documented limit), got 11"
        ]
    );
    assert!(Config::from_toml(&levels(26, "type = \"choice\"\n")).is_ok());
}

#[test]
fn a_question_pins_its_type_and_text() {
    let text = format!(
        "{MINIMAL}instructions = \"Which?\"\ndescriptions = {{ B = \"bee\", C = {{ text = \"sea\" }} }}\n\
         [contracts.c.questions.s]\nclasses = [\"1\", \"0\"]\nview = \"choice\"\n\
         [contracts.c.questions.n]\nclasses = [\"true\", \"false\"]\nview = \"choice\"\n\
         [contracts.c.questions.t]\nclasses = [\"true\", \"false\"]\nview = \"choice\"\ntype = \"choice\"\n"
    );
    let config = Config::from_toml(&text).unwrap();
    let questions = &config.contract("c").unwrap().questions;
    let q = &questions["q"].question;
    assert_eq!(q.kind, Kind::Choice);
    assert_eq!(q.instructions, Some(serde_json::json!("Which?")));
    assert_eq!(
        q.descriptions,
        vec![
            None,
            Some(serde_json::json!("bee")),
            Some(serde_json::json!({"text": "sea"}))
        ]
    );
    assert!(!q.caller_text);
    assert_eq!(questions["s"].question.kind, Kind::Score);
    assert_eq!(questions["n"].question.kind, Kind::Noul);
    assert_eq!(questions["t"].question.kind, Kind::Choice);
    assert!(config.warnings().is_empty());

    let cases = [
        (
            format!("{MINIMAL}descriptions = {{ Z = \"z\" }}\n"),
            "contracts.c.questions.q.descriptions: `Z` is not one of the classes",
        ),
        (
            format!("{MINIMAL}descriptions = {{ A = 5 }}\n"),
            "contracts.c.questions.q.descriptions.A: must be System One content",
        ),
        (
            format!("{MINIMAL}instructions = \" \"\n"),
            "contracts.c.questions.q.instructions: must not be blank",
        ),
        (
            format!("{MINIMAL}instructions = true\n"),
            "contracts.c.questions.q.instructions: must be System One content",
        ),
        (
            format!("{MINIMAL}type = \"score\"\n"),
            "contracts.c.questions.q.type: a score question's classes",
        ),
        (
            format!("{MINIMAL}type = \"noul\"\n"),
            "contracts.c.questions.q.type: a noul question's classes",
        ),
        (
            format!("{MINIMAL}type = \"box\"\n"),
            "contracts.c.questions.q.classes: a box question has no classes",
        ),
        (
            MINIMAL.replace("[\"A\", \"B\", \"C\"]", "[\"0\", \"1\"]")
                + "coarsen = { \"0\" = \"X\" }\n",
            "contracts.c.questions.q.coarsen: applies to choice questions only",
        ),
    ];
    for (text, needle) in cases {
        let found = problems(&text);
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "expected a problem naming {needle}, got {found:?}"
        );
    }
    let risky = Config::from_toml(&format!("{MINIMAL}caller_text = true\n")).unwrap();
    assert!(risky.warnings()[0].starts_with("contracts.c.questions.q.caller_text = true"));
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
    assert!(parse_sha256_hex(&"+a".repeat(32)).is_none());
    assert!(parse_sha256_hex(&"é".repeat(32)).is_none());
}

/// `MINIMAL` with a remote provider `up` (key in `UP_KEY`) and `extra` lines in its table.
fn remote(base_url: &str, extra: &str) -> String {
    MINIMAL.replace(
        "kind = \"simulated\"",
        &format!("kind = \"systemone\"\nbase_url = \"{base_url}\"\n{extra}"),
    )
}

fn remote_config(text: &str) -> Result<Config, Error> {
    Config::from_toml_with_env(text, &|name| (name == "UP_KEY").then(|| "k".to_string()))
}

fn remote_problems(text: &str) -> Vec<String> {
    match remote_config(text) {
        Err(Error::Invalid(problems)) => problems,
        Err(Error::Load(message)) => vec![message],
        Ok(_) => Vec::new(),
    }
}

#[test]
fn base_url_must_be_a_plain_http_base() {
    let rejected = [
        // The provider key would go to evil.example (user name `127.0.0.1`, password `18410`).
        "http://127.0.0.1:18410@evil.example",
        "https://user@api.example",
        "https://:secret@api.example",
        "https://api.example/?region=eu",
        "https://api.example/#v1",
        "https://api.example?",
        "ftp://api.example",
        "file:///etc/passwd",
        "unix:/run/provider.sock",
        "api.example",
        "https://",
        "https://api.example:0",
        "https://api.example:99999",
        // Not in the form the HTTP client sends, so not what the operator reads:
        "https://API.example",
        "https://api.example/a/../b",
        "https://api.example\\\\@127.0.0.1",
        " https://api.example",
        "https://api .example",
        "https:/api.example",
        "",
    ];
    for url in rejected {
        let found = remote_problems(&remote(url, ""));
        assert!(
            found.iter().any(|p| p.contains("providers.sim.base_url")),
            "{url:?} must be rejected naming the key, got {found:?}"
        );
    }
    let accepted = [
        ("http://127.0.0.1:18410", "http://127.0.0.1:18410"),
        ("https://api.typesafe.ai/", "https://api.typesafe.ai"),
        (
            "https://gw.example/typesafe/",
            "https://gw.example/typesafe",
        ),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ];
    for (url, expected) in accepted {
        let config = remote_config(&remote(url, ""))
            .unwrap_or_else(|error| panic!("{url:?} must be accepted: {error}"));
        match &config.providers["sim"] {
            Provider::SystemOne(provider) => assert_eq!(provider.base_url, expected),
            Provider::Simulated => panic!("a remote provider"),
        }
    }
}

#[test]
fn numeric_keys_outside_their_range_are_errors_naming_the_key() {
    let huge = i64::MAX.to_string();
    let server = |key: &str, value: &str| format!("[server]\n{key} = {value}\n{MINIMAL}");
    let provider =
        |key: &str, value: &str| remote("http://127.0.0.1:1", &format!("{key} = {value}"));
    let cases = [
        (
            provider("max_concurrency", "4611686018427387904"),
            "providers.sim.max_concurrency",
        ),
        (
            provider("max_concurrency", &huge),
            "providers.sim.max_concurrency",
        ),
        (
            provider("max_concurrency", "100001"),
            "providers.sim.max_concurrency",
        ),
        (
            provider("max_concurrency", "0"),
            "providers.sim.max_concurrency",
        ),
        // Inside the internally tagged provider table serde names the table, not the key.
        (provider("max_concurrency", "-1"), "providers.sim"),
        (provider("timeout_ms", "0"), "providers.sim.timeout_ms"),
        (
            provider("timeout_ms", "3600001"),
            "providers.sim.timeout_ms",
        ),
        (provider("timeout_ms", &huge), "providers.sim.timeout_ms"),
        (
            provider("queue_timeout_ms", "3600001"),
            "providers.sim.queue_timeout_ms",
        ),
        (
            provider("queue_timeout_ms", &huge),
            "providers.sim.queue_timeout_ms",
        ),
        (provider("timeout_ms", "1.5"), "providers.sim"),
        (server("max_body_bytes", "0"), "server.max_body_bytes"),
        (
            server("max_body_bytes", "1073741825"),
            "server.max_body_bytes",
        ),
        (server("max_body_bytes", &huge), "server.max_body_bytes"),
        (
            server("max_upstream_body_bytes", "0"),
            "server.max_upstream_body_bytes",
        ),
        (
            server("max_upstream_body_bytes", &huge),
            "server.max_upstream_body_bytes",
        ),
        (
            server("shutdown_grace_ms", "3600001"),
            "server.shutdown_grace_ms",
        ),
        (
            server("shutdown_grace_ms", &huge),
            "server.shutdown_grace_ms",
        ),
        (server("shutdown_grace_ms", "-5"), "shutdown_grace_ms"),
        (
            format!("{MINIMAL}[decision_log]\npath = \"d.jsonl\"\nmax_bytes = 4095\n"),
            "decision_log.max_bytes",
        ),
        (
            format!("{MINIMAL}[decision_log]\npath = \"d.jsonl\"\nmax_files = 0\n"),
            "decision_log.max_files",
        ),
        (
            format!("{MINIMAL}[decision_log]\npath = \"d.jsonl\"\nqueue_capacity = 0\n"),
            "decision_log.queue_capacity",
        ),
        (
            format!("{MINIMAL}[decision_log]\npath = \"\"\n"),
            "decision_log.path",
        ),
        (
            MINIMAL.replace(
                "contracts = [\"c\"]",
                "contracts = [\"c\"]\nrate_limit = { requests_per_second = 0 }",
            ),
            "recipients[0].rate_limit.requests_per_second",
        ),
        (
            MINIMAL.replace(
                "contracts = [\"c\"]",
                "contracts = [\"c\"]\nrate_limit = { requests_per_second = 1e7 }",
            ),
            "recipients[0].rate_limit.requests_per_second",
        ),
        (
            MINIMAL.replace(
                "contracts = [\"c\"]",
                "contracts = [\"c\"]\nrate_limit = { requests_per_second = 5, burst = 0 }",
            ),
            "recipients[0].rate_limit.burst",
        ),
        (
            MINIMAL.replace(
                "contracts = [\"c\"]",
                "contracts = [\"c\"]\nrate_limit = { requests_per_second = 5, burst = 1000001 }",
            ),
            "recipients[0].rate_limit.burst",
        ),
        (
            server("watch_interval_ms", "49"),
            "server.watch_interval_ms",
        ),
        (
            server("watch_interval_ms", "3600001"),
            "server.watch_interval_ms",
        ),
        (
            format!(
                "{MINIMAL}[contracts.c.questions.q.workflows]\nfamilies = [\"selective\"]\nprofiles = [\"authored\"]\ncosts = {{ c_wrong = 1e300, c_review = 2, c_check = 0.4, matrix = [[0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]] }}\n"
            ),
            "contracts.c.questions.q.workflows.costs",
        ),
    ];
    for (text, needle) in cases {
        let found = remote_problems(&text);
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "expected a problem naming {needle}, got {found:?}"
        );
    }
    // The bounds themselves are accepted.
    let edges = format!(
        "[server]\nmax_body_bytes = 1073741824\nmax_upstream_body_bytes = 1\nshutdown_grace_ms = 3600000\nwatch_interval_ms = 50\n{}",
        remote(
            "http://127.0.0.1:1",
            "timeout_ms = 3600000\nqueue_timeout_ms = 3600000\nmax_concurrency = 100000"
        )
    );
    assert_eq!(remote_problems(&edges), Vec::<String>::new());
}

#[test]
fn a_provider_key_that_cannot_be_a_header_is_an_error() {
    let text = remote("http://127.0.0.1:1", "api_key_env = \"BAD_KEY\"");
    for bad in ["line\nbreak", "tab\tinside", "naïve"] {
        let env = |name: &str| (name == "BAD_KEY").then(|| bad.to_string());
        let found = match Config::from_toml_with_env(&text, &env) {
            Err(Error::Invalid(problems)) => problems,
            other => panic!("{bad:?} must be rejected, got {other:?}"),
        };
        assert!(found.iter().any(|p| p.contains("BAD_KEY")), "{found:?}");
    }
    let env = |name: &str| (name == "BAD_KEY").then(|| " sk-live_0123/+= \n".to_string());
    assert!(Config::from_toml_with_env(&text, &env).is_ok());
}

#[test]
fn only_the_configuration_own_sections_come_from_the_environment() {
    let sections = raw::sections();
    for section in ["server", "providers", "recipients", "contracts"] {
        assert!(
            sections.contains(&section),
            "{section} missing from {sections:?}"
        );
    }
    // Every listed name is a real top-level key: an empty table of it parses.
    for section in sections {
        let text = format!("{MINIMAL}\n[{section}]\n");
        let found = problems(&text);
        assert!(
            !found.iter().any(|p| p.contains("unknown field")),
            "{section}: {found:?}"
        );
    }
    for key in [
        "server.listen",
        "SERVER.LISTEN",
        "server.listn",
        "providers.typesafe.timeout_ms",
        "contracts.dispatcher.usage",
        "server",
    ] {
        assert!(is_config_env_key(key), "{key} targets the configuration");
    }
    // What Kubernetes injects for Services named `releasegate` and `releasegate-server`.
    for key in [
        "port",
        "service_host",
        "service_port",
        "service_port_http",
        "port_80_tcp",
        "port_80_tcp_addr",
        "port_80_tcp_port",
        "port_80_tcp_proto",
        "server_service_host",
        "server_port_80_tcp_addr",
        "",
    ] {
        assert!(!is_config_env_key(key), "{key} is not configuration");
    }
}

#[test]
fn a_contract_policy_is_validated() {
    let with = |policy: &str| {
        MINIMAL.replace(
            "provider = \"sim\"\n",
            &format!("provider = \"sim\"\npolicy = {policy}\n"),
        )
    };
    let config = Config::from_toml(&with(
        "{ keep = [\"choice\", \"q.probabilities\"], hide = [\"secret\"], max_recovery_gain = 0.05 }",
    ))
    .unwrap();
    let policy = config.contract("c").unwrap().policy.clone().unwrap();
    assert_eq!(policy.max_recovery_gain, 0.05);
    assert_eq!(policy.keep.len(), 2);
    assert!(policy.dropped(config.contract("c").unwrap()).is_empty());
    let narrow = Config::from_toml(
        &with("{ keep = [\"confidence\"] }").replace("full_native", "full_probabilities"),
    )
    .unwrap();
    let contract = narrow.contract("c").unwrap();
    assert_eq!(
        contract.policy.as_ref().unwrap().dropped(contract),
        ["q.confidence"]
    );
    assert!(
        Config::from_toml(MINIMAL)
            .unwrap()
            .contract("c")
            .unwrap()
            .policy
            .is_none()
    );
    for (policy, expected) in [
        ("{ keep = [\"score\"] }", "contracts.c.policy.keep"),
        ("{ keep = [\"other.choice\"] }", "does not cover"),
        ("{ hide = [\"T\"] }", "contracts.c.policy.hide"),
        ("{ max_recovery_gain = 0.1 }", "bounds what `hide` names"),
        ("{ hide = [\"secret\"], max_recovery_gain = 1.5 }", "[0, 1]"),
        ("{ hide = [\"secret\"], surprise = 1 }", "surprise"),
    ] {
        let problems = problems(&with(policy)).join("\n");
        assert!(problems.contains(expected), "{policy}: {problems}");
    }
}

#[test]
fn every_server_key_is_fixed_at_start() {
    // A value other than the default for every `[server]` key; a key added to the file's
    // definition without one here fails the test.
    let values = [
        ("listen", "\"127.0.0.1:7\""),
        ("admin_listen", "\"127.0.0.1:8\""),
        ("max_body_bytes", "7"),
        ("max_upstream_body_bytes", "7"),
        ("max_image_bytes", "7"),
        ("max_asset_bytes", "7"),
        ("max_decoded_bytes_in_flight", "7340032"),
        ("decoded_bytes_queue_timeout_ms", "7"),
        ("shutdown_grace_ms", "7"),
        ("header_read_timeout_ms", "7"),
        ("body_read_timeout_ms", "7"),
        ("idle_timeout_ms", "7"),
        ("max_connections", "7"),
        ("admin_max_connections", "7"),
        ("drain_delay_ms", "7"),
        ("watch_config", "true"),
        ("watch_interval_ms", "700"),
        ("worker_threads", "7"),
        ("access_log", "false"),
        ("certificates", "\"certs\""),
        ("certification", "\"advisory\""),
    ];
    let base = Config::from_toml(MINIMAL).unwrap();
    assert!(base.server.changed_keys(&base.server).is_empty());
    let keys = raw::field_names::<raw::RawServer>();
    assert_eq!(keys.len(), values.len());
    for key in keys {
        let value = values
            .iter()
            .find(|(name, _)| name == key)
            .unwrap_or_else(|| panic!("give server.{key} a value in this test"))
            .1;
        // A certification mode other than `off` needs its directory, in both files.
        let (base, context) = if *key == "certification" {
            let context = "certificates = \"certs\"\n";
            let text = format!("[server]\n{context}{MINIMAL}");
            (Config::from_toml(&text).unwrap(), context)
        } else {
            (Config::from_toml(MINIMAL).unwrap(), "")
        };
        let changed =
            Config::from_toml(&format!("[server]\n{context}{key} = {value}\n{MINIMAL}")).unwrap();
        assert_eq!(
            base.server.changed_keys(&changed.server),
            [format!("server.{key}")],
            "{key}"
        );
    }
}

#[test]
fn a_capture_is_validated_summarized_and_warned_about() {
    let with = |table: &str| {
        MINIMAL.replace(
            "[contracts.c]\nprovider = \"sim\"\n",
            &format!("[contracts.c]\nprovider = \"sim\"\ncapture = {table}\n"),
        )
    };
    let config = Config::from_toml(MINIMAL).unwrap();
    assert!(config.captures.is_empty());
    assert!(!config.summary().contains("capture"));

    let config =
        Config::from_toml(&with("{ path = \"/data/c.jsonl\", sample_rate = 0.25 }")).unwrap();
    let capture = &config.captures["c"];
    assert_eq!(capture.path(), Path::new("/data/c.jsonl"));
    assert_eq!(capture.sample_rate(), 0.25);
    assert_eq!(
        (
            capture.max_bytes(),
            capture.max_files(),
            capture.queue_capacity()
        ),
        (100 * 1024 * 1024, 5, 1024)
    );
    let summary = config.summary();
    assert!(
        summary.contains("capture c: /data/c.jsonl · sample rate 0.25 · rotated at 104857600 bytes, 5 files kept · queue 1024"),
        "{summary}"
    );
    assert!(
        summary.contains("warning: contracts.c.capture: /data/c.jsonl stores a sample (0.25) of this contract's native answers"),
        "{summary}"
    );

    for (table, key) in [
        (
            "{ path = \"c.jsonl\", sample_rate = 0 }",
            "contracts.c.capture.sample_rate",
        ),
        (
            "{ path = \"c.jsonl\", sample_rate = 1.5 }",
            "contracts.c.capture.sample_rate",
        ),
        (
            "{ path = \"c.jsonl\", sample_rate = nan }",
            "contracts.c.capture.sample_rate",
        ),
        (
            "{ path = \"\", sample_rate = 1 }",
            "contracts.c.capture.path",
        ),
        (
            "{ path = \"stdout\", sample_rate = 1 }",
            "contracts.c.capture.path",
        ),
        (
            "{ path = \"c.jsonl\", sample_rate = 1, max_bytes = 10 }",
            "contracts.c.capture.max_bytes",
        ),
        (
            "{ path = \"c.jsonl\", sample_rate = 1, queue_capacity = 0 }",
            "contracts.c.capture.queue_capacity",
        ),
        (
            "{ path = \"c.jsonl\", sample_rate = 1, every = 3 }",
            "every",
        ),
        ("{ sample_rate = 1 }", "path"),
    ] {
        let found = problems(&with(table));
        assert!(found.iter().any(|p| p.contains(key)), "{table}: {found:?}");
    }

    // One writer per file.
    let shared = format!(
        "{}[decision_log]\npath = \"/data/c.jsonl\"\n",
        with("{ path = \"/data/c.jsonl\", sample_rate = 1 }")
    );
    let found = problems(&shared);
    assert!(
        found
            .iter()
            .any(|p| p.contains("contracts.c.capture.path") && p.contains("decision_log.path")),
        "{found:?}"
    );
}

#[test]
fn a_rate_limit_store_is_a_plain_redis_url_with_its_password_from_the_environment() {
    let config = Config::from_toml(MINIMAL).unwrap();
    assert!(config.rate_limit_store.is_none());
    assert!(config.summary().contains("rate limits: per replica"));

    let text = format!(
        "{MINIMAL}[rate_limit_store]\nkind = \"redis\"\nurl = \"redis://redis.ns.svc:6380/2\"\n"
    );
    let store = Config::from_toml(&text).unwrap().rate_limit_store.unwrap();
    assert_eq!(store.url(), "redis://redis.ns.svc:6380/2");
    assert_eq!(store.timeout(), Duration::from_millis(100));
    assert_eq!(store.retry_interval(), Duration::from_secs(1));
    assert_eq!(store.key_prefix(), "releasegate");
    assert!(store.password().is_none());
    assert!(
        Config::from_toml(&text)
            .unwrap()
            .summary()
            .contains("rate limits: shared through redis redis://redis.ns.svc:6380/2")
    );

    let with_password = format!(
        "{MINIMAL}[rate_limit_store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\n\
         password_env = \"RG_REDIS_PASSWORD\"\ntimeout_ms = 20\nretry_interval_ms = 500\n\
         key_prefix = \"team-a\"\n"
    );
    let env = |name: &str| (name == "RG_REDIS_PASSWORD").then(|| "s3cret".to_string());
    let config = Config::from_toml_with(
        &with_password,
        "test",
        Path::new("."),
        Inputs {
            env: Some(&env),
            files: &|_| Err(std::io::ErrorKind::NotFound.into()),
            codebooks: true,
        },
    )
    .unwrap();
    let store = config.rate_limit_store.as_ref().unwrap();
    assert_eq!(
        secrecy::ExposeSecret::expose_secret(store.password().unwrap()),
        "s3cret"
    );
    assert_eq!(store.timeout(), Duration::from_millis(20));
    assert_eq!(store.key_prefix(), "team-a");
    assert!(!config.summary().contains("s3cret"));
    assert!(!format!("{config:?}").contains("s3cret"));

    for (table, needle) in [
        ("url = \"redis://:pw@host\"", "rate_limit_store.url"),
        ("url = \"redis://user:pw@host\"", "password_env"),
        ("url = \"rediss://host\"", "TLS"),
        ("url = \"http://host\"", "redis://"),
        ("url = \"redis://host/x\"", "database number"),
        ("url = \"redis://host?db=1\"", "query"),
        ("url = \"not a url\"", "rate_limit_store.url"),
        (
            "url = \"redis://h\"\ntimeout_ms = 0",
            "rate_limit_store.timeout_ms",
        ),
        (
            "url = \"redis://h\"\ntimeout_ms = 10001",
            "rate_limit_store.timeout_ms",
        ),
        (
            "url = \"redis://h\"\nretry_interval_ms = 5",
            "rate_limit_store.retry_interval_ms",
        ),
        (
            "url = \"redis://h\"\nkey_prefix = \"a b\"",
            "rate_limit_store.key_prefix",
        ),
        (
            "url = \"redis://h\"\nkey_prefix = \"\"",
            "rate_limit_store.key_prefix",
        ),
        ("url = \"redis://h\"\nkeyprefix = \"x\"", "keyprefix"),
    ] {
        let text = format!("{MINIMAL}[rate_limit_store]\nkind = \"redis\"\n{table}\n");
        let found = problems(&text);
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "{table}: {found:?}"
        );
    }
    let unknown = format!("{MINIMAL}[rate_limit_store]\nkind = \"memcached\"\nurl = \"x\"\n");
    assert!(!problems(&unknown).is_empty());
    // An unset password variable is an error where keys are read, and ignored offline.
    let unset = format!(
        "{MINIMAL}[rate_limit_store]\nkind = \"redis\"\nurl = \"redis://h\"\npassword_env = \"RG_UNSET_VAR_X\"\n"
    );
    assert!(
        problems(&unset)
            .iter()
            .any(|p| p.contains("rate_limit_store.password_env"))
    );
}

#[test]
fn contracts_forward_only_headers_of_the_fixed_list() {
    use crate::contract::ForwardHeader;
    let with = |list: &str| {
        MINIMAL.replace(
            "provider = \"sim\"",
            &format!("provider = \"sim\"\nforward_headers = {list}"),
        )
    };
    let config = Config::from_toml(&with(
        r#"["typesafe-danger-zone-images", "TypeSafe-Danger-Zone-Long-Context"]"#,
    ))
    .unwrap();
    assert_eq!(
        config.contract("c").unwrap().forward_headers,
        [
            ForwardHeader::DangerZoneImages,
            ForwardHeader::DangerZoneLongContext
        ]
    );
    assert!(
        Config::from_toml(MINIMAL)
            .unwrap()
            .contract("c")
            .unwrap()
            .forward_headers
            .is_empty()
    );
    let got = problems(&with(
        r#"["Authorization", "TypeSafe-Danger-Zone-Images", "typesafe-danger-zone-images"]"#,
    ));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("contracts.c.forward_headers[0]: `Authorization` is not a header"));
    assert!(
        got[1].starts_with("contracts.c.forward_headers[2]"),
        "{got:?}"
    );
    assert!(ForwardHeader::is_on(b" True "));
    assert!(!ForwardHeader::is_on(b"1"));
    assert!(!ForwardHeader::is_on(b"true; x"));
}

#[test]
fn an_allowed_question_must_release_something_and_deny_is_explained() {
    let got = problems(&MINIMAL.replace("view = \"full_native\"", "view = \"no_output\""));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("contracts.c.questions.q.view: `no_output`")
            && got[0].contains("question_not_released"),
        "{got:?}"
    );
    assert_eq!(
        crate::mechanism::Fallback::Deny.typed_clients(crate::contract::Shape::Complete),
        Some(
            "a denied answer is missing from `answers`: Python `response.answers[id]` raises KeyError, the JS SDK's `answers[id]` is undefined (reading a field throws TypeError); check for the id before reading it, or use fallback \"choice_only\""
        )
    );
    assert_eq!(
        crate::mechanism::Fallback::Native.typed_clients(crate::contract::Shape::Complete),
        None
    );
}

#[test]
fn box_questions_take_a_view_and_quantize_and_nothing_of_classes() {
    let base = MINIMAL
        .split("[contracts.c.questions.q]")
        .next()
        .unwrap()
        .to_string()
        + "[contracts.c.questions.where]\ntype = \"box\"\ninstructions = \"Where is the damage?\"\n";
    let config = Config::from_toml(&format!(
        "{base}view = \"choice\"\nmechanism = {{ kind = \"quantize\", step = 0.05 }}\n"
    ))
    .unwrap();
    let rule = &config.contract("c").unwrap().questions["where"];
    assert_eq!(rule.question.kind, Kind::Box);
    assert!(rule.classes.is_empty());
    assert!(matches!(rule.mechanism, Mechanism::Quantize { step, .. } if step == 0.05));
    // No audit reads box answers: the gate may not certify them, and check-config says so.
    let contract = config.contract("c").unwrap();
    assert_eq!(contract.not_certifiable(), ["where"]);
    assert!(contract.not_certifiable_reasons()[0].contains("box"));
    assert!(
        config
            .warnings()
            .iter()
            .any(|w| w.starts_with("contracts.c.questions.where: a box question"))
    );
    assert!(Config::from_toml(&format!("{base}view = \"full_native\"\n")).is_ok());
    let cases = [
        (
            "view = \"full_probabilities\"\n",
            "where.view: a box question is released as",
        ),
        ("view = \"no_output\"\n", "where.view: `no_output`"),
        (
            "view = \"choice\"\nclasses = [\"A\", \"B\"]\n",
            "where.classes: a box question has no classes",
        ),
        (
            "view = \"choice\"\ncoarsen = { A = \"X\" }\n",
            "where.coarsen: a box question",
        ),
        (
            "view = \"choice\"\nmechanism = { kind = \"top_k\", k = 2 }\n",
            "where.mechanism: a box question takes no mechanism or",
        ),
        (
            "view = \"choice\"\nmechanism = { kind = \"quantize\", step = 0.123456789012 }\n",
            "where.mechanism: a box question's quantize takes a `step`",
        ),
        (
            "view = \"choice\"\nmechanism = { kind = \"quantize\", step = 0.1, confidence = \"native\" }\n",
            "(no `confidence` option)",
        ),
        (
            "view = \"choice\"\nworkflows = { preset = \"tuple-bench\" }\n",
            "where.workflows: a box question",
        ),
    ];
    for (extra, needle) in cases {
        let found = problems(&format!("{base}{extra}"));
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "{extra}: expected {needle}, got {found:?}"
        );
    }
}

#[test]
fn usage_keep_is_warned_about_where_the_contract_hides_something() {
    let with_usage = |usage: &str, question: &str| {
        let text = MINIMAL.replace(
            "provider = \"sim\"\n",
            &format!("provider = \"sim\"\nusage = \"{usage}\"\n"),
        );
        let text = text.replace("view = \"full_native\"\n", question);
        Config::from_toml(&text).unwrap()
    };
    let usage_warnings = |config: &Config| -> Vec<String> {
        config
            .warnings()
            .into_iter()
            .filter(|w| w.starts_with("contracts.c.usage = \"keep\""))
            .collect()
    };
    let hiding = [
        (
            "view = \"full_native\"\ncoarsen = { A = \"AB\", B = \"AB\" }\n",
            "coarsens",
        ),
        (
            "view = \"full_native\"\nwithhold_labels = [\"A\"]\n",
            "withholds",
        ),
        (
            "view = \"full_native\"\nmechanism = { kind = \"quantize\", step = 0.1 }\n",
            "mechanism",
        ),
        ("view = \"choice\"\n", "full_native"),
    ];
    for (question, why) in hiding {
        let found = usage_warnings(&with_usage("keep", question));
        assert_eq!(found.len(), 1, "{question}: {found:?}");
        assert!(found[0].contains(why), "{question}: {found:?}");
        assert!(found[0].contains("usage = \"input\""), "{found:?}");
        for usage in ["input", "drop"] {
            assert!(usage_warnings(&with_usage(usage, question)).is_empty());
        }
    }
    // A contract that releases everything in full has nothing for the count to undo.
    assert!(usage_warnings(&with_usage("keep", "view = \"full_native\"\n")).is_empty());
    assert_eq!(
        with_usage("input", "view = \"choice\"\n").contracts["c"].usage,
        crate::contract::Usage::Input
    );
}

#[test]
fn a_hiding_contract_without_a_pinned_model_is_warned_about() {
    // On a remote provider (the simulator's ids are its own, fixed ones).
    let remote = "[providers.far]\nkind = \"systemone\"\nbase_url = \"http://127.0.0.1:1\"\n\n";
    let with = |provider: &str, extra: &str| {
        let text = MINIMAL.replace(
            "provider = \"sim\"\n",
            &format!("provider = \"{provider}\"\n{extra}"),
        );
        Config::from_toml(&format!("{remote}{text}")).unwrap()
    };
    let model_warnings = |config: &Config| -> Vec<String> {
        config
            .warnings()
            .into_iter()
            .filter(|w| w.starts_with("contracts.c.model is not pinned"))
            .collect()
    };
    let hiding = "policy = { hide = [\"secret\"], max_recovery_gain = 0.1 }\n";
    let found = model_warnings(&with("far", hiding));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("Pin model"), "{found:?}");
    // Pinned, nothing hidden, or the simulator: no warning.
    let pinned = format!("{hiding}model = \"m-1\"\n");
    assert!(model_warnings(&with("far", &pinned)).is_empty());
    assert!(model_warnings(&with("far", "")).is_empty());
    assert!(model_warnings(&with("far", "policy = { keep = [\"choice\"] }\n")).is_empty());
    assert!(model_warnings(&with("sim", hiding)).is_empty());
}

#[test]
fn providers_failover_circuits_and_caches_are_validated() {
    let two = |contract: &str, provider: &str| {
        format!(
            "[providers.sim]\nkind = \"simulated\"\n\
             [providers.far]\nkind = \"systemone\"\nbase_url = \"http://127.0.0.1:1\"\n{provider}\n\
             [contracts.c]\n{contract}\n\
             [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_native\"\n"
        )
    };
    let config = Config::from_toml(&two(
        "providers = [\"far\", \"sim\"]\nfailover_on = [503, 429]\nretry_sent = true\n\
         cache = { ttl_s = 60, max_bytes = 1048576, scope = \"provider\" }",
        "circuit = { failures = 3, window_ms = 1000, cooldown_ms = 500 }",
    ))
    .unwrap();
    let c = &config.contracts()["c"];
    assert_eq!(c.providers(), ["far", "sim"]);
    assert_eq!(c.provider(), "far");
    assert_eq!(c.failover().statuses(), [503, 429]);
    assert!(c.failover().retry_sent() && c.failover().on_status(429));
    assert!(!c.failover().on_status(500));
    let cache = c.cache().unwrap();
    assert_eq!(cache.ttl(), std::time::Duration::from_secs(60));
    assert_eq!(cache.scope(), crate::contract::CacheScope::Provider);
    assert_eq!(cache.store(), crate::contract::CacheStore::Memory);
    let Provider::SystemOne(far) = &config.providers()["far"] else {
        panic!("remote")
    };
    assert_eq!(far.circuit().unwrap().failures, 3);
    let summary = config.summary();
    assert!(
        summary.contains("providers far, sim (failover on [503, 429], retry_sent"),
        "{summary}"
    );
    assert!(
        summary.contains("scope provider") && summary.contains("warning"),
        "{summary}"
    );
    // Token counts differ between providers: forwarding them under several is warned of.
    let counted = |contract: &str| {
        Config::from_toml(&two(contract, ""))
            .unwrap()
            .warnings()
            .into_iter()
            .filter(|w| w.contains("with several providers"))
            .count()
    };
    assert_eq!(
        counted("providers = [\"far\", \"sim\"]\nusage = \"input\""),
        1
    );
    assert_eq!(
        counted("providers = [\"far\", \"sim\"]\nusage = \"keep\""),
        1
    );
    assert_eq!(counted("providers = [\"far\", \"sim\"]"), 0);
    assert_eq!(counted("provider = \"sim\"\nusage = \"input\""), 0);
    // `provider = "x"` is a list of one with the default failover statuses and no cache.
    let one = Config::from_toml(&two("provider = \"sim\"", "")).unwrap();
    let c = &one.contracts()["c"];
    assert_eq!(c.providers(), ["sim"]);
    assert_eq!(
        c.failover().statuses(),
        crate::contract::DEFAULT_FAILOVER_ON
    );
    assert!(!c.failover().retry_sent() && c.cache().is_none());

    for (contract, provider, expected) in [
        ("provider = \"sim\"\nproviders = [\"far\"]", "", "not both"),
        ("providers = []", "", "at least one provider"),
        ("", "", "no provider"),
        (
            "providers = [\"sim\", \"gone\"]",
            "",
            "contracts.c.providers: no provider named `gone`",
        ),
        ("providers = [\"sim\", \"sim\"]", "", "listed twice"),
        (
            "provider = \"sim\"\nfailover_on = [200]",
            "",
            "contracts.c.failover_on: 200",
        ),
        (
            "provider = \"sim\"\nfailover_on = [503, 503]",
            "",
            "contracts.c.failover_on: 503",
        ),
        (
            "provider = \"sim\"\ncache = { ttl_s = 0, max_bytes = 4096 }",
            "",
            "contracts.c.cache.ttl_s",
        ),
        (
            "provider = \"sim\"\ncache = { ttl_s = 5, max_bytes = 1 }",
            "",
            "contracts.c.cache.max_bytes",
        ),
        (
            "provider = \"sim\"\ncache = { ttl_s = 5, max_bytes = 4096, scope = \"all\" }",
            "",
            "scope",
        ),
        (
            "provider = \"sim\"",
            "circuit = { failures = 0, window_ms = 1, cooldown_ms = 1 }",
            "providers.far.circuit.failures",
        ),
        (
            "provider = \"sim\"",
            "circuit = { failures = 2, window_ms = 1, cooldown_ms = 0 }",
            "providers.far.circuit.cooldown_ms",
        ),
    ] {
        let found = problems(&two(contract, provider));
        assert!(
            found.iter().any(|problem| problem.contains(expected)),
            "{contract} / {provider}: {found:?}"
        );
    }
}

/// A contract `w` whose WCPQ question names `codebook` with `fallback`.
fn wcpq_config(fallback: &str, codebook: &str) -> String {
    format!(
        "[providers.sim]\nkind = \"simulated\"\n[contracts.w]\nprovider = \"sim\"\n\
         [contracts.w.questions.coarse_cause]\n\
         classes = [\"DELAY\", \"ADDRESS\", \"DAMAGE\", \"DELIVERY_RECORD\"]\nview = \"full_native\"\n\
         mechanism = {{ kind = \"wcpq\", codebook = \"{codebook}\", fallback = \"{fallback}\" }}\n\
         workflows = {{ preset = \"tuple-bench\" }}\n"
    )
}

#[test]
fn every_shape_a_typed_client_cannot_read_is_warned_about_with_what_to_use() {
    let warned = |config: &Config, prefix: &str, instead: &str| {
        config
            .warnings()
            .iter()
            .any(|w| w.starts_with(prefix) && w.contains(instead))
    };
    let minimal = MINIMAL.replace(
        "provider = \"sim\"\n",
        "provider = \"sim\"\nshape = \"minimal\"\n",
    );
    let key = "contracts.c.shape = \"minimal\"";
    let config = Config::from_toml(&minimal).unwrap();
    assert!(warned(&config, key, "shape = \"complete\""));
    assert!(config.summary().contains(&format!("warning: {key}")));
    assert!(!warned(&Config::from_toml(MINIMAL).unwrap(), key, ""));
    // A WCPQ `deny` fallback (the shipped codebook, read from the crate's directory).
    let shipped = "../../config/codebooks/delivery-coarse_cause.json";
    let key = "contracts.w.questions.coarse_cause.mechanism.fallback = \"deny\"";
    let config = Config::from_toml(&wcpq_config("deny", shipped)).unwrap();
    assert!(warned(&config, key, "fallback = \"choice_only\""));
    assert!(warned(&config, key, "result.choices[\"coarse_cause\"]"));
    let native = Config::from_toml(&wcpq_config("native", shipped)).unwrap();
    assert!(!warned(&native, key, ""));
}

#[test]
fn without_codebooks_everything_else_is_checked_and_the_skipped_ones_named() {
    let text = wcpq_config("deny", "codebooks/not-built-yet.json");
    // Loaded to be served, the missing codebook is an error ...
    assert!(
        problems(&text)
            .iter()
            .any(|p| p.contains("cannot read codebook") && p.contains("not-built-yet.json"))
    );
    // ... and without codebooks the rest is checked, and what was skipped is said.
    let inputs = |codebooks| Inputs {
        env: None,
        files: &|_| Err(std::io::ErrorKind::NotFound.into()),
        codebooks,
    };
    let config = Config::from_toml_with(&text, "t", Path::new("base"), inputs(false)).unwrap();
    assert_eq!(
        config.unloaded_codebooks(),
        [UnloadedCodebook {
            question: "contracts.w.questions.coarse_cause".into(),
            path: Path::new("base/codebooks/not-built-yet.json").into(),
            fallback: Some(crate::mechanism::Fallback::Deny),
        }]
    );
    let summary = config.summary();
    assert!(
        summary.contains("skipped (codebooks not loaded)"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "  contracts.w.questions.coarse_cause: codebook base/codebooks/not-built-yet.json (does not exist yet)"
        ),
        "{summary}"
    );
    // Its deny fallback is still warned about.
    assert!(
        config
            .warnings()
            .iter()
            .any(|w| w.starts_with("contracts.w.questions.coarse_cause.mechanism.fallback"))
    );
    // Other problems are still found.
    let broken = text.replace("view = \"full_native\"", "view = \"everything\"");
    assert!(Config::from_toml_with(&broken, "t", Path::new("."), inputs(false)).is_err());
    // A configuration loaded to be served skips nothing.
    let served = Config::from_toml(MINIMAL).unwrap();
    assert!(served.unloaded_codebooks().is_empty());
    assert!(!served.summary().contains("skipped"));
}
