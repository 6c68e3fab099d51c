//! Configuration reload in process: under load nothing fails, keys added and removed take
//! effect at their reload, a broken configuration is refused whole, requests in flight
//! finish on their own generation, and `watch_config` follows a ConfigMap-style symlink swap.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::helpers::{
    CLIENT_KEY, PATIENCE, Provider, TestApp, TestConfig, Upstream, recipient, request, scratch,
    spawn_upstream, start,
};

/// A key that only some configurations bind.
const ADDED_KEY: &str = "client-key-added";

/// Which configuration a test writes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Version {
    /// The stable recipient only.
    Base,
    /// Plus the recipient of `ADDED_KEY`.
    Added,
    /// Plus a recipient bound to a contract that does not exist: refused.
    Broken,
}

fn config(version: Version, base_url: &str, server_extra: &str) -> TestConfig {
    let mut recipients = vec![recipient("stable", CLIENT_KEY, &["main"])];
    match version {
        Version::Base => {}
        Version::Added => recipients.push(recipient("added", ADDED_KEY, &["main"])),
        Version::Broken => recipients.push(recipient("added", ADDED_KEY, &["no_such_contract"])),
    }
    TestConfig {
        server: format!("shutdown_grace_ms = 500\n{server_extra}"),
        max_body_bytes: None,
        provider: Provider::Url(base_url.to_string()),
        recipients,
        ..TestConfig::single()
    }
}

fn config_text(version: Version, base_url: &str, server_extra: &str) -> String {
    config(version, base_url, server_extra).toml("")
}

/// The proxy running in this process on a configuration file (its upstream is the file's).
struct Running(TestApp);

impl std::ops::Deref for Running {
    type Target = TestApp;

    fn deref(&self) -> &TestApp {
        &self.0
    }
}

impl Running {
    async fn start(path: &Path) -> Running {
        let config = releasegate_proxy::load::load(Some(path)).unwrap();
        Running(start(config, Upstream::default()).await)
    }

    async fn status(&self, key: &str) -> u16 {
        decide(&self.client, &self.address, key).await
    }

    /// Reloads `path` off the async workers, as SIGHUP does.
    async fn reload(&self, path: &Path) -> Result<String, String> {
        let state = self.state.clone();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || state.reload_from(&path))
            .await
            .unwrap()
            .map_err(|error| error.to_string())
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

async fn decide(client: &reqwest::Client, address: &str, key: &str) -> u16 {
    tokio::time::timeout(
        PATIENCE,
        client
            .post(format!("{address}/v1/systemone"))
            .bearer_auth(key)
            .json(&request())
            .send(),
    )
    .await
    .expect("no answer")
    .map(|response| response.status().as_u16())
    .unwrap_or(0)
}

/// The value of one series in a metrics text (`None` when absent).
fn series(metrics: &str, name: &str) -> Option<String> {
    let prefix = format!("{name} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|value| value.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_reloads_under_load_fail_no_request_and_keys_follow_their_reload() {
    let (_upstream, base_url) = spawn_upstream().await;
    let dir = scratch("load");
    let files: Vec<(Version, PathBuf)> = [Version::Added, Version::Base, Version::Broken]
        .into_iter()
        .map(|version| {
            let path = dir.join(format!("{version:?}.toml"));
            std::fs::write(&path, config_text(version, &base_url, "")).unwrap();
            (version, path)
        })
        .collect();
    let proxy = Running::start(&files[1].1).await;
    assert_eq!(proxy.status(CLIENT_KEY).await, 200);
    assert_eq!(proxy.status(ADDED_KEY).await, 401);

    // Four callers with the stable key, for the whole test (bounded in count too).
    let stop = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(0));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, running) = (stop.clone(), running.clone());
            let address = proxy.address.clone();
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let (mut sent, mut failed) = (0u32, Vec::new());
                while !stop.load(Ordering::Relaxed) && sent < 20_000 {
                    let status = decide(&client, &address, CLIENT_KEY).await;
                    if status != 200 {
                        failed.push(status);
                    }
                    if sent == 0 {
                        running.fetch_add(1, Ordering::SeqCst);
                    }
                    sent += 1;
                }
                (sent, failed)
            })
        })
        .collect();
    // The reloads start once every caller is under way.
    let under_way = tokio::time::timeout(PATIENCE, async {
        while running.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(under_way.is_ok(), "the callers never got going");

    let (mut ok, mut refused) = (0, 0);
    let mut added_is_bound = false;
    let mut live_sha = String::new();
    for round in 0..20 {
        let (version, path) = &files[round % 3];
        let result = proxy.reload(path).await;
        match version {
            Version::Broken => {
                let error = result.expect_err("a broken configuration was accepted");
                assert!(error.contains("recipients[1].contracts"), "{error}");
                refused += 1;
            }
            _ => {
                live_sha = result.expect("a valid configuration was refused");
                ok += 1;
                added_is_bound = *version == Version::Added;
            }
        }
        // The added key works exactly while a configuration that binds it is in force.
        let expected = if added_is_bound { 200 } else { 401 };
        assert_eq!(
            proxy.status(ADDED_KEY).await,
            expected,
            "round {round}: after reloading {version:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for task in load {
        let (sent, failed) = task.await.unwrap();
        assert!(failed.is_empty(), "stable requests failed: {failed:?}");
        total += sent;
    }
    assert!(total > 0);

    let metrics = proxy.metrics().await;
    assert_eq!(
        series(&metrics, "releasegate_config_reloads_total{result=\"ok\"}"),
        Some(ok.to_string())
    );
    assert_eq!(
        series(
            &metrics,
            "releasegate_config_reloads_total{result=\"error\"}"
        ),
        Some(refused.to_string())
    );
    // One config_info series: the file in force (sha256sum of its bytes).
    let info: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("releasegate_config_info{"))
        .collect();
    assert_eq!(
        info,
        [format!("releasegate_config_info{{sha256=\"{live_sha}\"}} 1").as_str()]
    );
    let last_valid = &files[if added_is_bound { 0 } else { 1 }].1;
    assert_eq!(
        live_sha,
        releasegate_core::workflow::sha256_hex(&std::fs::read(last_valid).unwrap())
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_in_flight_finish_on_the_configuration_they_started_with() {
    let (upstream, base_url) = spawn_upstream().await;
    upstream.close();
    let dir = scratch("inflight");
    let added = dir.join("added.toml");
    let base = dir.join("base.toml");
    std::fs::write(&added, config_text(Version::Added, &base_url, "")).unwrap();
    std::fs::write(&base, config_text(Version::Base, &base_url, "")).unwrap();
    let proxy = Running::start(&added).await;
    // A request of the added key reaches the provider, then its key is removed.
    let in_flight = {
        let client = proxy.client.clone();
        let address = proxy.address.clone();
        tokio::spawn(async move { decide(&client, &address, ADDED_KEY).await })
    };
    upstream.arrived().await;
    proxy.reload(&base).await.unwrap();
    upstream.release_one();
    assert_eq!(
        in_flight.await.unwrap(),
        200,
        "the in-flight request failed"
    );
    // New requests see the new configuration.
    assert_eq!(proxy.status(ADDED_KEY).await, 401);
    upstream.open();
    assert_eq!(proxy.status(CLIENT_KEY).await, 200);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_changes_a_start_up_setting_is_refused_whole() {
    let (_upstream, base_url) = spawn_upstream().await;
    let dir = scratch("fixed");
    let path = dir.join("releasegate.toml");
    std::fs::write(&path, config_text(Version::Base, &base_url, "")).unwrap();
    let proxy = Running::start(&path).await;
    let sha = proxy.state.config_sha256();
    // The added recipient comes with a changed listener and body cap: nothing applies.
    let changed = dir.join("changed.toml");
    std::fs::write(
        &changed,
        config_text(Version::Added, &base_url, "max_body_bytes = 4096").replace(
            "listen = \"127.0.0.1:0\"\nadmin",
            "listen = \"127.0.0.1:1\"\nadmin",
        ),
    )
    .unwrap();
    let error = proxy.reload(&changed).await.unwrap_err();
    assert!(
        error.contains("server.listen") && error.contains("server.max_body_bytes"),
        "{error}"
    );
    assert_eq!(proxy.status(ADDED_KEY).await, 401);
    assert_eq!(proxy.state.config_sha256(), sha);
    let metrics = proxy.metrics().await;
    assert!(metrics.contains(&format!("releasegate_config_info{{sha256=\"{sha}\"}} 1")));
    assert_eq!(
        series(
            &metrics,
            "releasegate_config_reloads_total{result=\"error\"}"
        )
        .as_deref(),
        Some("1")
    );
    proxy.stop().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn watch_config_follows_a_configmap_symlink_swap() {
    use std::os::unix::fs::symlink;
    let (_upstream, base_url) = spawn_upstream().await;
    // The layout of a ConfigMap volume: releasegate.toml -> ..data/releasegate.toml,
    // ..data -> ..v1; an update writes ..v2 and renames a new ..data over the old one.
    let dir = scratch("watch");
    let watch = "watch_config = true\nwatch_interval_ms = 50";
    let write_version = |name: &str, version: Version| {
        std::fs::create_dir(dir.join(name)).unwrap();
        std::fs::write(
            dir.join(name).join("releasegate.toml"),
            config_text(version, &base_url, watch),
        )
        .unwrap();
    };
    let swap_to = |name: &str| {
        symlink(name, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    };
    write_version("..v1", Version::Base);
    symlink("..v1", dir.join("..data")).unwrap();
    symlink("..data/releasegate.toml", dir.join("releasegate.toml")).unwrap();
    let proxy = Running::start(&dir.join("releasegate.toml")).await;
    assert_eq!(proxy.status(ADDED_KEY).await, 401);

    write_version("..v2", Version::Added);
    swap_to("..v2");
    let added = tokio::time::timeout(PATIENCE, async {
        while proxy.status(ADDED_KEY).await != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(added.is_ok(), "the watch never reloaded the swapped file");

    // A broken update is refused; the running configuration stays.
    write_version("..v3", Version::Broken);
    swap_to("..v3");
    let refused = tokio::time::timeout(PATIENCE, async {
        loop {
            let metrics = proxy.metrics().await;
            if series(
                &metrics,
                "releasegate_config_reloads_total{result=\"error\"}",
            )
            .as_deref()
                == Some("1")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "the broken update was never tried");
    assert_eq!(proxy.status(ADDED_KEY).await, 200);
    assert_eq!(proxy.status(CLIENT_KEY).await, 200);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_adds_or_changes_a_capture_is_refused() {
    let (_upstream, base_url) = spawn_upstream().await;
    let dir = scratch("capture-reload");
    let path = dir.join("releasegate.toml");
    // `main` with a capture, and the recipients of `version`.
    let with_capture = |rate: &str, version: Version| TestConfig {
        contract: format!("capture = {{ path = \"captured.jsonl\", sample_rate = {rate} }}"),
        ..config(version, &base_url, "")
    };
    std::fs::write(&path, config_text(Version::Base, &base_url, "")).unwrap();
    let proxy = Running::start(&path).await;
    std::fs::write(&path, with_capture("1", Version::Added).toml("")).unwrap();
    let error = proxy.reload(&path).await.unwrap_err();
    assert!(
        error.contains("contracts.main.capture: cannot change on reload"),
        "{error}"
    );
    assert_eq!(proxy.status(ADDED_KEY).await, 401, "nothing of it applies");
    proxy.stop().await;

    // Started with a capture, a reload that keeps it applies; one that changes it does not.
    std::fs::write(&path, with_capture("1", Version::Base).toml("")).unwrap();
    let proxy = Running::start(&path).await;
    assert!(dir.join("captured.jsonl").exists());
    std::fs::write(&path, with_capture("1", Version::Added).toml("")).unwrap();
    proxy.reload(&path).await.unwrap();
    assert_eq!(proxy.status(ADDED_KEY).await, 200);
    std::fs::write(&path, with_capture("0.5", Version::Added).toml("")).unwrap();
    let error = proxy.reload(&path).await.unwrap_err();
    assert!(error.contains("contracts.main.capture"), "{error}");
    proxy.stop().await;
}
