//! Loading the configuration: the edge where the file system and the process
//! environment meet the core's validation.
//!
//! The core validates TOML text with [`Inputs`] it is handed; this module
//! reads the configuration file (or takes the embedded default), merges the
//! `RELEASEGATE_*` environment overrides, reads provider keys from the
//! environment and the files a configuration names from disk (or from the
//! binary, for the embedded default), and checks what only the file system
//! can tell (a decision log or capture path that is a directory).

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use releasegate_core::config::{
    Config, DecisionSink, ENV_PREFIX, Error, Inputs, is_config_env_key,
};
use releasegate_core::workflow::sha256_hex;

/// The default configuration file, also embedded in the binary.
pub const DEFAULT_PATH: &str = "config/releasegate.toml";
/// The embedded default configuration (simulated provider, demo recipients).
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../config/releasegate.toml");
/// Files the embedded default refers to, by their path relative to `config/`.
const EMBEDDED_FILES: [(&str, &[u8]); 5] = [
    (
        "codebooks/delivery-coarse_cause.json",
        include_bytes!("../../../config/codebooks/delivery-coarse_cause.json"),
    ),
    (
        "certificates/contract-dispatcher.json",
        include_bytes!("../../../config/certificates/contract-dispatcher.json"),
    ),
    (
        "certificates/contract-analyst-coarse.json",
        include_bytes!("../../../config/certificates/contract-analyst-coarse.json"),
    ),
    (
        "certificates/recipient-analyst.json",
        include_bytes!("../../../config/certificates/recipient-analyst.json"),
    ),
    (
        "certificates/contract-planner.json",
        include_bytes!("../../../config/certificates/contract-planner.json"),
    ),
];
/// The source name of the embedded default.
const EMBEDDED_SOURCE: &str = "embedded default";

/// Loads `path` (or the embedded default when `path` is `None` and the
/// default file does not exist) with environment overrides, and validates it.
pub fn load(path: Option<&Path>) -> Result<Config, Error> {
    load_with(path, true)
}

/// Like [`load`], for the offline tools: provider keys are not read (the
/// tools never contact a provider), so unset key variables are no error.
pub fn load_offline(path: Option<&Path>) -> Result<Config, Error> {
    load_with(path, false)
}

/// Like [`load_offline`], without loading WCPQ codebooks: for building the
/// codebook a contract will name. WCPQ questions come back with the
/// mechanism `none`; never serve such a configuration.
pub fn load_without_codebooks(path: &Path) -> Result<Config, Error> {
    load_codebook_free(path, false)
}

/// Like [`load_without_codebooks`], reading provider keys from the environment as `serve`
/// does: for `releasegate collect`, which calls a contract's provider (to gather the answers
/// its codebook will be built from) but releases nothing.
pub fn load_for_collect(path: &Path) -> Result<Config, Error> {
    load_codebook_free(path, true)
}

fn load_codebook_free(path: &Path, read_keys: bool) -> Result<Config, Error> {
    if !path.exists() {
        return Err(missing(path));
    }
    let figment = Figment::from(Toml::file(path)).merge(env_overrides());
    let source = format!("{} (codebooks not loaded)", path.display());
    let config = Config::from_figment(
        figment,
        source,
        &base_dir(Some(path)),
        Inputs {
            env: if read_keys { Some(&process_env) } else { None },
            files: &read_file,
            codebooks: false,
        },
    )?;
    check_paths(config)
}

/// The embedded default configuration (with its embedded codebooks).
#[cfg(test)]
pub(crate) fn embedded_default() -> Result<Config, Error> {
    let config = Config::from_toml_with(
        EMBEDDED_DEFAULT,
        EMBEDDED_SOURCE,
        Path::new("."),
        Inputs {
            env: Some(&process_env),
            files: &read_embedded,
            codebooks: true,
        },
    )?;
    check_paths(config)
}

/// Parses TOML text (no environment overrides; provider keys and the files it
/// names, relative to the working directory, are read): for tests and benches.
#[cfg(any(test, feature = "test-support"))]
pub fn from_toml(text: &str) -> Result<Config, Error> {
    from_toml_with_env(text, &process_env)
}

/// Like [`from_toml`], reading provider keys through `env` instead of the
/// process environment (tests inject keys without mutating global state).
#[cfg(any(test, feature = "test-support"))]
pub fn from_toml_with_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Error> {
    let config = Config::from_toml_with(
        text,
        "inline",
        Path::new("."),
        Inputs {
            env: Some(env),
            files: &read_file,
            codebooks: true,
        },
    )?;
    check_paths(config)
}

fn load_with(path: Option<&Path>, read_keys: bool) -> Result<Config, Error> {
    let file = match path {
        Some(path) => {
            if !path.exists() {
                return Err(missing(path));
            }
            Some(path)
        }
        None => Path::new(DEFAULT_PATH)
            .exists()
            .then_some(Path::new(DEFAULT_PATH)),
    };
    // Read once: the text parsed is the text hashed (`Origin::sha256`).
    let (text, source) = match file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|error| {
                Error::Load(format!(
                    "cannot read configuration file {}: {error}",
                    path.display()
                ))
            })?,
            path.display().to_string(),
        ),
        None => (EMBEDDED_DEFAULT.to_string(), EMBEDDED_SOURCE.to_string()),
    };
    let figment = Figment::from(Toml::string(&text)).merge(env_overrides());
    let embedded = file.is_none();
    let config = Config::from_figment(
        figment,
        source,
        &base_dir(file),
        Inputs {
            env: if read_keys { Some(&process_env) } else { None },
            files: if embedded { &read_embedded } else { &read_file },
            codebooks: true,
        },
    )?;
    check_paths(config.read_from(file.map(Path::to_path_buf), sha256_hex(text.as_bytes())))
}

/// A configuration file that is not there, and how to give the proxy one.
fn missing(path: &Path) -> Error {
    Error::Load(format!(
        "configuration file {} does not exist: write your own (config/releasegate.toml is the \
         demo; docs/tutorial.md starts from nothing) and name it with --config, or, in the \
         container image, mount it at that path (deploy/kubernetes mounts its ConfigMap there)",
        path.display()
    ))
}

/// The directory relative paths in the configuration file are resolved against.
fn base_dir(file: Option<&Path>) -> PathBuf {
    file.and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `RELEASEGATE_SECTION__KEY=value` overrides, only for the configuration's own
/// top-level keys (see [`is_config_env_key`]).
fn env_overrides() -> Env {
    Env::prefixed(ENV_PREFIX)
        .split("__")
        .filter(|key| is_config_env_key(key.as_str()))
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Largest content of a zstd-compressed file (`*.zst`) the configuration names, once
/// decompressed: a corrupt or hostile frame cannot take more memory than this.
pub const MAX_DECOMPRESSED_BYTES: u64 = 1 << 30;

/// zstd level of the files [`write_file`] compresses: about 13 times smaller for a shipped
/// codebook, a second per megabyte of JSON.
const ZSTD_LEVEL: i32 = 19;

/// Whether `path` names a zstd-compressed file (`.zst`).
fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "zst")
}

/// Reads a file the configuration names (a codebook, a model): a `*.zst` file is
/// decompressed, so the core sees (and hashes) the same bytes as for the uncompressed file.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let bytes = std::fs::read(path)?;
    if !is_zstd(path) {
        return Ok(bytes);
    }
    decompress(&bytes)
}

fn decompress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let decoder = zstd::stream::read::Decoder::new(bytes)
        .map_err(|error| invalid(format!("not a zstd file: {error}")))?;
    let mut out = Vec::new();
    decoder
        .take(MAX_DECOMPRESSED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|error| invalid(format!("not a valid zstd file: {error}")))?;
    if out.len() as u64 > MAX_DECOMPRESSED_BYTES {
        return Err(invalid(format!(
            "decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// Writes `bytes` to `path`, zstd-compressed (with a checksum) when `path` ends in `.zst`:
/// how `build-codebook --out X.json.zst` writes a codebook that [`read_file`] reads back.
/// The decompressed content is `bytes` exactly, so byte reproducibility holds for it.
pub fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if !is_zstd(path) {
        return std::fs::write(path, bytes);
    }
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.include_contentsize(true)?;
    encoder.set_pledged_src_size(Some(bytes.len() as u64))?;
    std::io::Write::write_all(&mut encoder, bytes)?;
    std::fs::write(path, encoder.finish()?)
}

/// Files of the embedded default come from the binary.
fn read_embedded(path: &Path) -> std::io::Result<Vec<u8>> {
    EMBEDDED_FILES
        .iter()
        .find(|(name, _)| path.ends_with(name))
        .map(|(_, bytes)| bytes.to_vec())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not embedded"))
}

/// What only the file system can tell about a validated configuration.
fn check_paths(config: Config) -> Result<Config, Error> {
    if let Some(log) = &config.decision_log()
        && let DecisionSink::File(path) = &log.sink()
        && path.is_dir()
    {
        return Err(Error::Invalid(vec![format!(
            "decision_log.path: {} is a directory; name a file",
            path.display()
        )]));
    }
    let directories: Vec<String> = config
        .captures()
        .iter()
        .filter(|(_, capture)| capture.path().is_dir())
        .map(|(name, capture)| {
            format!(
                "contracts.{name}.capture.path: {} is a directory; name a file",
                capture.path().display()
            )
        })
        .collect();
    if !directories.is_empty() {
        return Err(Error::Invalid(directories));
    }
    Ok(config)
}

#[cfg(test)]
mod tests;
