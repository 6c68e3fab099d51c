//! Configuration reload: on SIGHUP, and on a change of the configuration file or a file
//! it names when `[server] watch_config = true`.
//!
//! A reload runs every check a start runs (`load::load`, then what `AppState::prepare`
//! builds: provider clients, the key table), then swaps the new generation in with one
//! atomic pointer store. Requests hold the generation they started with to their end, so
//! nothing in flight changes configuration half-way and nothing is dropped. A configuration
//! that fails any check, or that changes a start-up setting (`[server]`: listeners, limits,
//! the watch itself), is refused as a whole and the running one stays in force.
//!
//! The watch polls: every `watch_interval_ms` it stats the files (following symlinks) and,
//! when a stamp changed, hashes their contents. A content change is reloaded once it has
//! stayed the same for one more interval (a debounce for editors and copies that write in
//! several steps). Polling sees through the symlink swaps of Kubernetes ConfigMap volumes,
//! works on every file system, and needs no watch descriptors.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::{AppState, Live, StartError};
use releasegate_core::config::{self, Config};

/// Why a reload was refused (the running configuration stays in force).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The configuration was loaded from no file (the embedded default or a string).
    #[error("the configuration was not loaded from a file; nothing to reload")]
    NoFile,
    /// The new configuration does not load or validate.
    #[error(transparent)]
    Config(#[from] config::Error),
    /// The new configuration changes settings fixed at start.
    #[error(
        "invalid configuration:\n  - {}",
        .0.iter().map(|key| format!("{key}: cannot change on reload; restart the proxy")).collect::<Vec<_>>().join("\n  - ")
    )]
    Fixed(Vec<String>),
    /// What the configuration needs could not be built.
    #[error("cannot prepare the new configuration")]
    Start(#[from] StartError),
}

// === impl AppState (reload) ===

impl AppState {
    /// Reloads the configuration from the file it was loaded from (SIGHUP, file watch).
    pub fn reload(&self) -> Result<String, ReloadError> {
        let path = self.inner.live.load().config.origin().path.clone();
        match path {
            Some(path) => self.reload_from(&path),
            None => {
                self.count_reload(false);
                tracing::error!(
                    error = %ReloadError::NoFile,
                    "configuration reload refused; the running configuration stays in force"
                );
                Err(ReloadError::NoFile)
            }
        }
    }

    /// Loads `path` with every check of a start and, when it passes, makes it the
    /// configuration of every request that starts from now on. Returns the new
    /// configuration's SHA-256. On error nothing changes; the error (naming the key) is
    /// logged and counted. Blocking (it reads files): call it off the async workers.
    pub fn reload_from(&self, path: &Path) -> Result<String, ReloadError> {
        // One reload at a time, from load to swap: a slower, older load never wins.
        let _one = self
            .inner
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = crate::load::load(Some(path))
            .map_err(ReloadError::from)
            .and_then(|config| self.install(config));
        self.count_reload(result.is_ok());
        match &result {
            Ok(sha256) => tracing::info!(
                source = %path.display(),
                sha256 = %sha256,
                "configuration reloaded"
            ),
            Err(error) => tracing::error!(
                source = %path.display(),
                error = %error_chain(error),
                "configuration reload refused; the running configuration stays in force"
            ),
        }
        result
    }

    fn install(&self, config: Config) -> Result<String, ReloadError> {
        if let Some(refusal) = config.certification().refusal() {
            return Err(StartError::Uncertified(refusal).into());
        }
        if let Some(refusal) = crate::demo::exposed(&config) {
            return Err(StartError::DemoKeys(refusal).into());
        }
        let current = self.live();
        let mut changed = self.inner.server.changed_keys(config.server());
        if current.config.decision_log() != config.decision_log() {
            changed.push("decision_log".to_string());
        }
        // A capture's file and writer are started once: adding, removing or changing one needs
        // a restart.
        let names: std::collections::BTreeSet<&String> = current
            .config
            .captures()
            .keys()
            .chain(config.captures().keys())
            .collect();
        for name in names {
            if current.config.captures().get(name) != config.captures().get(name) {
                changed.push(format!("contracts.{name}.capture"));
            }
        }
        if !changed.is_empty() {
            return Err(ReloadError::Fixed(changed));
        }
        let sha256 = config.origin().sha256.clone();
        // Reloads are serialized: `current` is still the live generation at the swap.
        let live = Live::new(config, &self.inner.metrics, Some(&current))?;
        let new = Arc::new(live);
        let old = self.inner.live.swap(new.clone());
        self.inner.metrics.redescribe(&old.config, &new.config);
        for warning in new.config.certification_warnings() {
            tracing::warn!("{warning}");
        }
        Ok(sha256)
    }

    fn count_reload(&self, ok: bool) {
        self.inner
            .metrics
            .config_reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

/// Starts the file watch when `watch_config` is on and the configuration came from a file.
pub(super) fn spawn_watch(state: &AppState) -> Option<tokio::task::JoinHandle<()>> {
    let server = &state.inner.server;
    if !server.watch_config() {
        return None;
    }
    if state.inner.live.load().config.origin().path.is_none() {
        tracing::warn!("watch_config is on but the configuration is not a file; not watching");
        return None;
    }
    Some(tokio::spawn(watch(state.clone(), server.watch_interval())))
}

/// What the watch knows about the files: their stamps and the hash of their contents.
#[derive(Debug)]
struct Watched {
    paths: Vec<PathBuf>,
    stamps: Vec<Option<Stamp>>,
    digest: [u8; 32],
}

/// A file's size, modification time and identity (following symlinks).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    id: (u64, u64),
}

impl Watched {
    fn of(config: &Config) -> Watched {
        let paths: Vec<PathBuf> = config
            .origin()
            .path
            .iter()
            .chain(&config.origin().files)
            .cloned()
            .collect();
        let stamps = stamps(&paths);
        let digest = digest(&paths);
        Watched {
            paths,
            stamps,
            digest,
        }
    }
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<Stamp>> {
    paths
        .iter()
        .map(|path| {
            let metadata = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let id = {
                use std::os::unix::fs::MetadataExt;
                (metadata.dev(), metadata.ino())
            };
            #[cfg(not(unix))]
            let id = (0, 0);
            Some(Stamp {
                len: metadata.len(),
                modified: metadata.modified().ok(),
                id,
            })
        })
        .collect()
}

/// One hash over every file's path and contents (a missing file hashes as missing).
fn digest(paths: &[PathBuf]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for path in paths {
        hasher.update(path.as_os_str().as_encoded_bytes());
        match std::fs::read(path) {
            Ok(bytes) => {
                hasher.update([1]);
                hasher.update((bytes.len() as u64).to_le_bytes());
                hasher.update(&bytes);
            }
            Err(_) => hasher.update([0]),
        }
    }
    hasher.finalize().into()
}

/// Whether the configuration file's contents differ from the text the running
/// configuration was loaded from (its `origin.sha256`).
fn changed_since_load(config: &Config) -> bool {
    let Some(path) = &config.origin().path else {
        return false;
    };
    let Ok(bytes) = std::fs::read(path) else {
        return true;
    };
    releasegate_core::workflow::sha256_hex(&bytes) != config.origin().sha256
}

/// What one look at the files decided.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Nothing changed (or a change is still settling).
    Wait,
    /// The contents changed and stayed so for one interval: reload.
    Reload,
}

/// The watch's state between looks.
#[derive(Debug)]
struct Watch {
    known: Watched,
    /// A changed content seen once, reloaded if the next look sees it again.
    pending: Option<[u8; 32]>,
}

impl Watch {
    /// Looks at the files once (blocking).
    fn look(&mut self) -> Step {
        let now = stamps(&self.known.paths);
        if now == self.known.stamps && self.pending.is_none() {
            return Step::Wait;
        }
        let digest = digest(&self.known.paths);
        self.known.stamps = now;
        if digest == self.known.digest {
            self.pending = None;
            return Step::Wait;
        }
        if self.pending != Some(digest) {
            self.pending = Some(digest);
            return Step::Wait;
        }
        self.pending = None;
        self.known.digest = digest;
        Step::Reload
    }
}

async fn watch(state: AppState, interval: std::time::Duration) {
    let known = {
        let live = state.live();
        tokio::task::spawn_blocking(move || {
            let known = Watched::of(&live.config);
            (known, changed_since_load(&live.config))
        })
        .await
    };
    let Ok((mut known, stale)) = known else {
        return;
    };
    // The file may have changed between loading the configuration and this first
    // look: then what is on disk is not what runs, so the first look must reload.
    let pending = stale.then(|| {
        let on_disk = known.digest;
        known.digest = [0; 32];
        on_disk
    });
    tracing::info!(
        files = known.paths.len(),
        interval_ms = interval.as_millis() as u64,
        "watching the configuration files"
    );
    let mut watch = Watch { known, pending };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let state = state.clone();
        let looked = tokio::task::spawn_blocking(move || {
            let step = watch.look();
            if step == Step::Reload {
                tracing::info!("configuration files changed; reloading");
                if state.reload().is_ok() {
                    // The new configuration may name other files: watch those from now on.
                    let live = state.live();
                    let paths = Watched::of(&live.config);
                    if paths.paths != watch.known.paths {
                        watch.known = paths;
                    }
                }
            }
            watch
        })
        .await;
        match looked {
            Ok(next) => watch = next,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("releasegate-{name}-"))
            .tempdir()
            .unwrap()
    }

    fn watching(paths: Vec<PathBuf>) -> Watch {
        Watch {
            known: Watched {
                stamps: stamps(&paths),
                digest: digest(&paths),
                paths,
            },
            pending: None,
        }
    }

    #[test]
    fn a_change_reloads_once_it_has_settled_for_one_look() {
        let scratch_dir = scratch("settle");
        let dir = scratch_dir.path();
        let file = dir.join("a.toml");
        std::fs::write(&file, "one").unwrap();
        let mut watch = watching(vec![file.clone()]);
        assert_eq!(watch.look(), Step::Wait);
        std::fs::write(&file, "two, longer").unwrap();
        assert_eq!(watch.look(), Step::Wait, "first sight of a change waits");
        assert_eq!(watch.look(), Step::Reload, "unchanged since: reload");
        assert_eq!(watch.look(), Step::Wait, "reloaded once only");
        // A write that restores the same bytes is no change.
        std::fs::write(&file, "two, longer").unwrap();
        assert_eq!(watch.look(), Step::Wait);
        assert_eq!(watch.look(), Step::Wait);
        // A file still being written keeps the reload waiting.
        std::fs::write(&file, "three").unwrap();
        assert_eq!(watch.look(), Step::Wait);
        std::fs::write(&file, "three, done").unwrap();
        assert_eq!(watch.look(), Step::Wait);
        assert_eq!(watch.look(), Step::Reload);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_swap_is_a_change() {
        // A ConfigMap volume: file -> ..data/file, ..data -> ..v1, swapped by rename.
        let scratch_dir = scratch("swap");
        let dir = scratch_dir.path();
        for (version, text) in [("..v1", "one"), ("..v2", "two")] {
            std::fs::create_dir(dir.join(version)).unwrap();
            std::fs::write(dir.join(version).join("c.toml"), text).unwrap();
        }
        std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/c.toml", dir.join("c.toml")).unwrap();
        let mut watch = watching(vec![dir.join("c.toml")]);
        assert_eq!(watch.look(), Step::Wait);
        std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        assert_eq!(watch.look(), Step::Wait);
        assert_eq!(watch.look(), Step::Reload);
    }

    #[test]
    fn a_file_changed_after_loading_is_stale() {
        let scratch_dir = scratch("stale");
        let dir = scratch_dir.path();
        let file = dir.join("releasegate.toml");
        std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
        let config = crate::load::load(Some(&file)).unwrap();
        assert!(!changed_since_load(&config));
        std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:1\"\n").unwrap();
        assert!(changed_since_load(&config));
        std::fs::remove_file(&file).unwrap();
        assert!(changed_since_load(&config), "a vanished file is a change");
        assert!(!changed_since_load(&crate::load::from_toml("").unwrap()));
    }
}
