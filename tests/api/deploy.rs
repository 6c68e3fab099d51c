//! Configuration as deployments meet it: `check-config` and `serve` agree, the environment of
//! a Kubernetes pod, the shipped manifests.

use super::binary::{BIN, Served, serve_command};
use super::helpers::{Provider, TestConfig, contract, question, recipient, scratch};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What Kubernetes injects into every pod of the namespace for a Service named `releasegate`
/// (service links), and for one named `releasegate-server`.
const SERVICE_LINKS: [(&str, &str); 12] = [
    ("RELEASEGATE_PORT", "tcp://10.0.0.1:80"),
    ("RELEASEGATE_SERVICE_HOST", "10.0.0.1"),
    ("RELEASEGATE_SERVICE_PORT", "80"),
    ("RELEASEGATE_SERVICE_PORT_HTTP", "80"),
    ("RELEASEGATE_PORT_80_TCP", "tcp://10.0.0.1:80"),
    ("RELEASEGATE_PORT_80_TCP_ADDR", "10.0.0.1"),
    ("RELEASEGATE_PORT_80_TCP_PORT", "80"),
    ("RELEASEGATE_PORT_80_TCP_PROTO", "tcp"),
    ("RELEASEGATE_SERVER_SERVICE_HOST", "10.0.0.2"),
    ("RELEASEGATE_SERVER_PORT", "tcp://10.0.0.2:80"),
    ("RELEASEGATE_SERVER_PORT_80_TCP_ADDR", "10.0.0.2"),
    ("RELEASEGATE_SERVER_SERVICE_PORT", "80"),
];

/// `releasegate check-config --config PATH` with extra environment variables.
fn check_config(path: &std::path::Path, env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(path)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Runs `serve` until it either exits (its status) or reports that it serves (`None`; the
/// process is then stopped).
fn serve(path: &std::path::Path, env: &[(&str, &str)]) -> Option<i32> {
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(path)
        .envs([
            ("RELEASEGATE_SERVER__LISTEN", "127.0.0.1:0"),
            ("RELEASEGATE_SERVER__ADMIN_LISTEN", "127.0.0.1:0"),
        ])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let serving = BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("releasegate serving"));
        let _ = tx.send(serving);
    });
    // A hang guard only: a healthy start or a refusal takes well under a second.
    let serving = rx.recv_timeout(Duration::from_secs(120)).unwrap_or(false);
    if serving {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let status = child.wait().unwrap();
    status.code()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A one-contract configuration on a remote provider at `base_url`, with `extra` lines.
fn with_provider(base_url: &str, extra: &str) -> TestConfig {
    TestConfig {
        provider: Provider::Url(base_url.into()),
        provider_extra: extra.into(),
        recipients: vec![recipient("r", "deploy-test-key", &["c"])],
        contracts: vec![contract(
            "c",
            "",
            vec![question("q", &["A", "B"], "choice", "")],
        )],
        ..TestConfig::bare()
    }
}

#[test]
fn check_config_refuses_what_serve_cannot_run_and_both_agree() {
    let dir = scratch("agree");
    let local = "http://127.0.0.1:18410";
    let cases = [
        // tokio's semaphore panics beyond MAX_PERMITS (serve used to exit 101).
        (
            with_provider(local, "max_concurrency = 4611686018427387904"),
            "providers.up.max_concurrency",
        ),
        // The provider key would go to evil.example.
        (
            with_provider("http://127.0.0.1:18410@evil.example", ""),
            "providers.up.base_url",
        ),
        (
            with_provider(local, "timeout_ms = 99999999999"),
            "providers.up.timeout_ms",
        ),
        (
            TestConfig {
                server: "max_upstream_body_bytes = 9223372036854775807".into(),
                ..with_provider(local, "")
            },
            "server.max_upstream_body_bytes",
        ),
        // A provider key variable that is not set: an error for both.
        (
            with_provider(local, "api_key_env = \"RELEASEGATE_TEST_KEY_NOT_SET\""),
            "RELEASEGATE_TEST_KEY_NOT_SET",
        ),
    ];
    for (index, (text, needle)) in cases.iter().enumerate() {
        let path = dir.join(format!("case{index}.toml"));
        std::fs::write(&path, text.toml("")).unwrap();
        let checked = check_config(&path, &[]);
        assert_eq!(
            checked.status.code(),
            Some(64),
            "{needle}: {}",
            stderr(&checked)
        );
        assert!(
            stderr(&checked).contains(needle),
            "{needle}: {}",
            stderr(&checked)
        );
        assert_eq!(
            serve(&path, &[]),
            Some(64),
            "serve must refuse it too ({needle})"
        );
    }
    // And what check-config accepts, serve runs.
    let path = dir.join("ok.toml");
    std::fs::write(
        &path,
        with_provider(
            local,
            "api_key_env = \"RELEASEGATE_TEST_KEY_SET\"\nmax_concurrency = 100000",
        )
        .toml(""),
    )
    .unwrap();
    let key = [("RELEASEGATE_TEST_KEY_SET", "sk-test")];
    let checked = check_config(&path, &key);
    assert!(checked.status.success(), "{}", stderr(&checked));
    assert_eq!(serve(&path, &key), None);
}

/// The demo's keys are published: `serve` and `check-config` refuse any configuration holding
/// one on an address beyond loopback (the shipped file and the embedded default alike), and
/// say how to give the proxy a configuration of its own.
#[test]
fn the_demo_keys_are_served_on_loopback_only() {
    let shipped = std::path::Path::new(ROOT).join("config/releasegate.toml");
    let beyond = [("RELEASEGATE_SERVER__LISTEN", "0.0.0.0:0")];
    assert_eq!(serve(&shipped, &beyond), Some(64));
    let checked = check_config(&shipped, &beyond);
    assert_eq!(checked.status.code(), Some(64));
    let message = stderr(&checked);
    assert!(
        message.contains("published demo keys of `dispatcher`")
            && message.contains("--config PATH")
            && message.contains("/etc/releasegate/releasegate.toml"),
        "{message}"
    );
    // The embedded default (no file in the working directory, no --config).
    let empty = scratch("embedded-demo");
    let embedded = Command::new(BIN)
        .arg("serve")
        .current_dir(&*empty)
        .envs(beyond)
        .env("RELEASEGATE_SERVER__ADMIN_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(embedded.status.code(), Some(64), "{}", stderr(&embedded));
    assert!(stderr(&embedded).contains("(embedded default) holds the published demo keys"));
    // On loopback the demo serves, as the README's "Try it" runs it.
    assert_eq!(serve(&shipped, &[]), None);
}

/// The image bakes in neither a configuration nor a listener override: its CMD names the path
/// the Deployment mounts the ConfigMap at, and the ConfigMap's own `listen` is what serves
/// (the Dockerfile's dry run runs both cases).
#[test]
fn the_image_serves_the_mounted_configuration_as_written() {
    let root = std::path::Path::new(ROOT);
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(!dockerfile.contains("RELEASEGATE_"), "{dockerfile}");
    assert!(!dockerfile.contains("COPY config"), "{dockerfile}");
    assert!(dockerfile.contains(
        r#"CMD ["serve", "--config", "/etc/releasegate/releasegate.toml", "--log-json"]"#
    ));
    let deployment =
        std::fs::read_to_string(root.join("deploy/kubernetes/deployment.yaml")).unwrap();
    assert!(
        deployment.contains("mountPath: /etc/releasegate,"),
        "{deployment}"
    );
    let toml = configmap_toml(
        &std::fs::read_to_string(root.join("deploy/kubernetes/configmap.yaml")).unwrap(),
    );
    assert!(toml.contains("listen = \"0.0.0.0:8080\""), "{toml}");
}

#[test]
fn kubernetes_service_links_are_not_configuration() {
    let config = std::path::Path::new(ROOT).join("config/releasegate.toml");
    // The reproduction: this used to exit 64 (`unknown field: found port`).
    let checked = check_config(&config, &[("RELEASEGATE_PORT", "tcp://10.0.0.1:80")]);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let checked = check_config(&config, &SERVICE_LINKS);
    assert!(checked.status.success(), "{}", stderr(&checked));
    assert_eq!(
        serve(&config, &SERVICE_LINKS),
        None,
        "serve starts beside them"
    );

    // The configuration's own keys still come from the environment...
    let checked = check_config(&config, &[("RELEASEGATE_SERVER__LISTEN", "127.0.0.1:8181")]);
    assert!(String::from_utf8_lossy(&checked.stdout).contains("listen 127.0.0.1:8181"));
    let checked = check_config(&config, &[("RELEASEGATE_SERVER__MAX_BODY_BYTES", "0")]);
    assert_eq!(checked.status.code(), Some(64));
    assert!(stderr(&checked).contains("server.max_body_bytes"));
    // ...and a misspelled key of a known section is an error naming it and its origin.
    for (name, key) in [
        ("RELEASEGATE_SERVER__LISTN", "server.listn"),
        ("RELEASEGATE_PROVIDERS__SIM__TIMEOUT", "providers.sim"),
    ] {
        let checked = check_config(&config, &[(name, "1")]);
        assert_eq!(checked.status.code(), Some(64), "{name}");
        assert!(
            stderr(&checked).contains(key),
            "{name}: {}",
            stderr(&checked)
        );
        assert!(
            stderr(&checked).contains("environment"),
            "{}",
            stderr(&checked)
        );
        assert_eq!(serve(&config, &[(name, "1")]), Some(64));
    }
}

/// The TOML inside the ConfigMap manifest (the block scalar under `releasegate.toml: |`).
fn configmap_toml(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|l| l.trim() != "releasegate.toml: |");
    lines.next().expect("the ConfigMap holds releasegate.toml");
    let mut out = String::new();
    for line in lines {
        if !line.trim().is_empty() && !line.starts_with("    ") {
            break;
        }
        out.push_str(line.strip_prefix("    ").unwrap_or(""));
        out.push('\n');
    }
    out
}

#[test]
fn the_kubernetes_manifests_turn_off_service_links_and_ship_a_valid_configuration() {
    let dir = std::path::Path::new(ROOT).join("deploy/kubernetes");
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    assert!(
        deployment
            .lines()
            .any(|line| line.trim() == "enableServiceLinks: false"),
        "the pod spec sets enableServiceLinks: false"
    );
    let toml = configmap_toml(&std::fs::read_to_string(dir.join("configmap.yaml")).unwrap());
    let scratch = scratch("configmap");
    let path = scratch.join("releasegate.toml");
    std::fs::write(&path, &toml).unwrap();
    // Every provider key variable the configuration names is set by the Deployment.
    let key_vars: Vec<&str> = toml
        .lines()
        .filter_map(|line| line.trim().strip_prefix("api_key_env = "))
        .map(|value| value.trim_matches('"'))
        .collect();
    assert!(!key_vars.is_empty());
    let mut env = SERVICE_LINKS.to_vec();
    for var in &key_vars {
        assert!(
            deployment.contains(&format!("- name: {var}")),
            "the Deployment sets {var}"
        );
        env.push((var, "sk-test"));
    }
    let checked = check_config(&path, &env);
    assert!(checked.status.success(), "{}", stderr(&checked));
}

/// Every `releasegate_*` series the shipped alerts, dashboard and operator's page query is one
/// the proxy exports (histogram suffixes stripped), so a renamed metric cannot leave them
/// silently empty.
#[test]
fn the_alerts_dashboard_and_operations_page_query_real_metrics() {
    let root = std::path::Path::new(ROOT);
    let source: String = [
        "crates/proxy/src/metrics.rs",
        "crates/proxy/src/metrics/certified.rs",
        "crates/proxy/src/metrics/families.rs",
        "crates/proxy/src/metrics/routing.rs",
        "crates/proxy/src/server/listener.rs",
    ]
    .iter()
    .map(|path| std::fs::read_to_string(root.join(path)).unwrap())
    .collect();
    for file in [
        "deploy/prometheus/alerts.yaml",
        "deploy/grafana/releasegate-dashboard.json",
        "docs/operations.md",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let mut names: Vec<&str> = text
            .match_indices("releasegate_")
            .map(|(at, _)| {
                let end = text[at..]
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .map_or(text.len(), |n| at + n);
                &text[at..end]
            })
            // Prefixes in a grep pattern (`releasegate_config_(info|...)`) are not names.
            .filter(|name| !name.ends_with('_'))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(!names.is_empty(), "{file}");
        for name in names {
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            assert!(
                source.contains(&format!("\"{base}\"")),
                "{file} queries {name}, which the proxy does not export"
            );
        }
    }
}

#[test]
fn the_kubernetes_manifests_reload_an_edited_configmap() {
    let dir = std::path::Path::new(ROOT).join("deploy/kubernetes");
    let toml = configmap_toml(&std::fs::read_to_string(dir.join("configmap.yaml")).unwrap());
    assert!(
        toml.lines()
            .any(|line| line.trim() == "watch_config = true")
    );
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    // A subPath mount never sees ConfigMap updates.
    assert!(!deployment.contains("subPath:"));
    assert!(deployment.contains("mountPath: /etc/releasegate"));
}

/// `kubectl kustomize deploy/kubernetes`, or `None` (saying so) without kubectl.
fn kustomize() -> Option<String> {
    let output = match Command::new("kubectl")
        .args(["kustomize", "deploy/kubernetes"])
        .current_dir(ROOT)
        .output()
    {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("kubectl is not installed: the manifests' sources stand in for the render");
            return None;
        }
        Err(error) => panic!("kubectl: {error}"),
    };
    assert!(output.status.success(), "{}", stderr(&output));
    Some(String::from_utf8(output.stdout).unwrap())
}

/// The rendered ConfigMap's `releasegate.toml` (the source file's without kubectl).
fn rendered_config() -> String {
    let dir = std::path::Path::new(ROOT).join("deploy/kubernetes");
    let manifest = match kustomize() {
        Some(rendered) => rendered
            .split("\n---\n")
            .find(|doc| doc.lines().any(|l| l == "kind: ConfigMap"))
            .expect("the render holds the ConfigMap")
            .to_string(),
        None => std::fs::read_to_string(dir.join("configmap.yaml")).unwrap(),
    };
    configmap_toml(&manifest)
}

/// The environment the Deployment gives the container from the Secret of
/// `secret.template.yaml`: `(variable, key in the Secret)`, every key of the template used.
fn secret_template_variables() -> Vec<(String, String)> {
    let dir = std::path::Path::new(ROOT).join("deploy/kubernetes");
    let template = std::fs::read_to_string(dir.join("secret.template.yaml")).unwrap();
    let keys: Vec<String> = template
        .lines()
        .skip_while(|l| l.trim() != "stringData:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (key, value) = l.trim().split_once(':').unwrap();
            assert_eq!(value.trim(), "\"\"", "the template holds no key: {l}");
            key.to_string()
        })
        .collect();
    assert!(!keys.is_empty(), "the template names the Secret's keys");
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    let lines: Vec<&str> = deployment.lines().map(str::trim).collect();
    keys.into_iter()
        .map(|key| {
            let reference =
                format!("secretKeyRef: {{name: releasegate-provider-keys, key: {key}}}");
            let at = lines
                .iter()
                .position(|l| *l == reference)
                .unwrap_or_else(|| panic!("the Deployment reads the Secret's {key}"));
            let variable = lines[..at]
                .iter()
                .rev()
                .find_map(|l| l.strip_prefix("- name: "))
                .unwrap();
            (variable.to_string(), key)
        })
        .collect()
}

/// Starts `serve` on `path` (listeners on 127.0.0.1:0) and waits for its "serving" line.
fn start(path: &std::path::Path, env: &[(String, String)]) -> Served {
    let mut command = serve_command(path);
    command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Served::start(command)
}

/// One HTTP/1.1 request over a fresh connection; the response's status.
fn status(addr: &str, head: &str, body: &str) -> u16 {
    exchange(addr, head, body).0
}

/// One HTTP/1.1 request over a fresh connection; the response's status and whole text.
fn exchange(addr: &str, head: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "{head}\r\nHost: releasegate\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    (status, response)
}

#[test]
fn the_rendered_configmap_starts_with_the_secret_templates_variables_and_knows_no_key() {
    let toml = rendered_config();
    assert!(
        !toml.contains("\n[[recipients]]"),
        "the shipped configuration binds no key: {toml}"
    );
    let scratch = scratch("rendered");
    let path = scratch.join("releasegate.toml");
    std::fs::write(&path, &toml).unwrap();
    // Every key variable the configuration names comes from the Secret the template describes.
    let variables = secret_template_variables();
    for line in toml.lines() {
        if let Some(var) = line.trim().strip_prefix("api_key_env = ") {
            let var = var.trim_matches('"');
            assert!(
                variables.iter().any(|(name, _)| name == var),
                "{var} is not set from the Secret"
            );
        }
    }
    // A provider that refuses connections on loopback: nothing leaves the machine.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut env: Vec<(String, String)> = variables
        .iter()
        .map(|(name, _)| (name.clone(), "sk-placeholder-from-the-template".to_string()))
        .collect();
    env.push((
        "RELEASEGATE_PROVIDERS__TYPESAFE__BASE_URL".into(),
        upstream.clone(),
    ));
    env.extend(
        SERVICE_LINKS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );

    let served = start(&path, &env);
    assert_eq!(status(&served.admin, "GET /readyz HTTP/1.1", ""), 200);
    // worker_threads = 0: one event loop per CPU the process may use, and where that came from.
    let serving = served.logged_json("releasegate serving").unwrap();
    let fields = &serving["fields"];
    assert!(fields["cpus"].as_u64().unwrap() >= 1, "{fields}");
    assert_eq!(fields["event_loops"], fields["cpus"], "{fields}");
    assert!(
        fields["cpus_from"].as_str().unwrap().contains("CPU"),
        "{fields}"
    );
    // No key opens it, the old demo key included.
    for key in ["demo-dispatcher-key", "demo-auditor-key", "anything"] {
        let head = format!("POST /v1/systemone HTTP/1.1\r\nAuthorization: Bearer {key}");
        assert_eq!(status(&served.public, &head, "{}"), 401, "{key}");
    }
    drop(served);

    // The README's way of adding a recipient: its key's hash from `hash-key`.
    let key = "a-key-only-this-test-knows-7f3a9c";
    let mut hashing = Command::new(BIN)
        .arg("hash-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        hashing
            .stdin
            .take()
            .unwrap()
            .write_all(key.as_bytes())
            .unwrap();
    }
    let hash = String::from_utf8(hashing.wait_with_output().unwrap().stdout).unwrap();
    let added = format!(
        "{toml}\n[[recipients]]\nname = \"dispatcher\"\nkey_sha256 = \"{}\"\ncontracts = [\"dispatcher\"]\n",
        hash.trim()
    );
    std::fs::write(&path, added).unwrap();
    let served = start(&path, &env);
    let head = format!("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer {key}");
    // Past authentication: the provider (closed on purpose) is what fails.
    assert_eq!(status(&served.public, &head, ""), 502);
    let head = "GET /v1/models HTTP/1.1\r\nAuthorization: Bearer demo-dispatcher-key";
    assert_eq!(status(&served.public, head, ""), 401);
}

/// The dashboard's namespace and instance variables filter every query (a panel that
/// ignored them would mix deployments that share a Prometheus).
#[test]
fn every_dashboard_query_follows_the_namespace_and_instance_variables() {
    let root = std::path::Path::new(ROOT);
    let text =
        std::fs::read_to_string(root.join("deploy/grafana/releasegate-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(variables.contains(&"namespace") && variables.contains(&"instance"));
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            // Every series selector: a metric name followed by its matchers.
            for (at, _) in expr.match_indices(['{']) {
                let matchers = &expr[at..at + expr[at..].find('}').unwrap()];
                if expr[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    queries += 1;
                    assert!(
                        matchers.contains(r#"namespace=~"$namespace""#)
                            && matchers.contains(r#"instance=~"$instance""#),
                        "{}: {expr}",
                        panel["title"]
                    );
                }
            }
            assert!(expr.contains('{'), "{}: {expr}", panel["title"]);
        }
    }
    assert!(queries > 10);
}

/// `build-codebook --out X.json.zst` writes the shipped codebook compressed: decompressed, it
/// is the shipped file byte for byte, and a configuration naming it passes `check-config`
/// with the same codebook hash.
#[test]
fn build_codebook_writes_a_zstd_codebook_that_the_proxy_reads() {
    let dir = scratch("zst-codebook");
    let worlds = dir.join("worlds.jsonl");
    let run = |command: &mut Command| {
        let output = command.output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        output
    };
    run(Command::new(BIN)
        .args([
            "simulate",
            "--pairs-per-domain",
            "240",
            "--seed",
            "0",
            "--out",
        ])
        .arg(&worlds));
    std::fs::create_dir(dir.join("codebooks")).unwrap();
    let out = dir.join("codebooks/delivery-coarse_cause.json.zst");
    run(Command::new(BIN)
        .args(["build-codebook", "--config"])
        .arg(format!("{ROOT}/config/releasegate.toml"))
        .args(["--contract", "planner", "--question", "coarse_cause"])
        .args(["--denominator", "20", "--pool", "grid+training", "--worlds"])
        .arg(&worlds)
        .arg("--out")
        .arg(&out));
    let packed = std::fs::read(&out).unwrap();
    let shipped = std::fs::read(format!(
        "{ROOT}/config/codebooks/delivery-coarse_cause.json"
    ))
    .unwrap();
    assert!(packed.len() * 5 < shipped.len(), "{} bytes", packed.len());
    assert!(
        zstd::stream::decode_all(&packed[..]).unwrap() == shipped,
        "the decompressed codebook is the shipped one, byte for byte"
    );
    let config = std::fs::read_to_string(format!("{ROOT}/config/releasegate.toml"))
        .unwrap()
        .replace(
            "codebooks/delivery-coarse_cause.json\"",
            "codebooks/delivery-coarse_cause.json.zst\"",
        )
        // The shipped certificates: the codebook's hash is its content's, compressed or not.
        .replace(
            "certificates = \"certificates\"",
            &format!("certificates = \"{ROOT}/config/certificates\""),
        );
    let path = dir.join("releasegate.toml");
    std::fs::write(&path, config).unwrap();
    let checked = check_config(&path, &[]);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let plain = check_config(
        &std::path::Path::new(ROOT).join("config/releasegate.toml"),
        &[],
    );
    // The same summary (the configuration's own path and hash aside).
    let summary = |output: &Output| -> Vec<String> {
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .skip(1)
            .filter(|line| !line.starts_with("reload:"))
            .map(str::to_string)
            .collect()
    };
    assert!(
        summary(&plain)
            .iter()
            .any(|line| line.contains("mechanism wcpq"))
    );
    assert_eq!(summary(&checked), summary(&plain));
}
