//! How much memory the process may use, for the budget on request bytes
//! (`server.max_decoded_bytes_in_flight` unset: an eighth of it, `Server::decoded_bytes_budget`):
//! the smallest cgroup v2 `memory.max` along the process's cgroup and its ancestors, else the
//! machine's memory (`/proc/meminfo` `MemTotal`). Read once per process, like the CPUs
//! (`cpus`).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::cpus::{parse_proc_cgroup, read, smallest};

/// What the memory limit was read from (`check-config` and start-up print it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// A cgroup v2 `memory.max` of this many bytes.
    CgroupV2(u64),
    /// No cgroup limit: the machine's `MemTotal`, in bytes.
    MemTotal(u64),
    /// Neither could be read.
    Unknown,
}

impl Source {
    /// The limit in bytes, if known.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Source::CgroupV2(bytes) | Source::MemTotal(bytes) => Some(bytes),
            Source::Unknown => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::CgroupV2(bytes) => write!(f, "cgroup v2 memory.max of {bytes} bytes"),
            Source::MemTotal(bytes) => write!(f, "MemTotal of {bytes} bytes (no cgroup limit)"),
            Source::Unknown => f.write_str("no memory limit found"),
        }
    }
}

/// The process's memory limit, read once.
pub fn limit() -> Source {
    static LIMIT: OnceLock<Source> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        if let Some(bytes) = cgroup_v2() {
            return Source::CgroupV2(bytes);
        }
        read("/proc/meminfo")
            .and_then(|text| parse_mem_total(&text))
            .map_or(Source::Unknown, Source::MemTotal)
    })
}

/// The budget in force for `server` on this machine, and the sentence `check-config` and
/// start-up print about it.
pub fn budget(server: &releasegate_core::config::Server) -> (usize, String) {
    let bytes = server.decoded_bytes_budget(limit().bytes());
    let how = match server.max_decoded_bytes_in_flight() {
        Some(_) => "server.max_decoded_bytes_in_flight".to_string(),
        None => format!("an eighth of the {}, within 64 MiB to 256 MiB", limit()),
    };
    (
        bytes,
        format!(
            "request bytes in flight: at most {bytes} bytes ({how}) · queue {} ms\n",
            server.decoded_bytes_queue_timeout().as_millis()
        ),
    )
}

/// The smallest `memory.max` along the process's cgroup v2 path.
fn cgroup_v2() -> Option<u64> {
    let (v2, _) = parse_proc_cgroup(&read("/proc/self/cgroup")?);
    let root = PathBuf::from("/sys/fs/cgroup");
    // Bytes as f64 are exact below 2^53 (8 PiB).
    let bytes = smallest(&root, &v2?, |dir| {
        read(dir.join("memory.max")).and_then(|text| parse_memory_max(&text))
    })?;
    Some(bytes as u64)
}

/// cgroup v2 `memory.max`: a byte count, or `max` for none.
fn parse_memory_max(text: &str) -> Option<f64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes > 0).then_some(bytes as f64)
}

/// `/proc/meminfo`'s `MemTotal:   N kB`, in bytes.
fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB") && kib > 0).then(|| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_max_and_mem_total_are_read() {
        assert_eq!(parse_memory_max("536870912\n"), Some(536_870_912.0));
        assert_eq!(parse_memory_max("max\n"), None);
        assert_eq!(parse_memory_max("0\n"), None);
        assert_eq!(
            parse_mem_total("MemTotal:       16318480 kB\nMemFree: 1 kB\n"),
            Some(16_318_480 * 1024)
        );
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: 12 MB\n"), None);
    }

    #[test]
    fn this_process_has_a_budget_within_the_auto_range() {
        let text = format!(
            "[providers.p]\nkind = \"simulated\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
             [contracts.c]\nprovider = \"p\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_native\"\n",
            "0".repeat(64)
        );
        let config = crate::load::from_toml_with_env(&text, &|_| None).unwrap();
        let (bytes, line) = budget(config.server());
        let (low, high) = releasegate_core::config::AUTO_BUDGET_BYTES;
        assert!((low..=high).contains(&(bytes as u64)), "{bytes}");
        assert!(line.contains(&format!("at most {bytes} bytes")), "{line}");
        let fixed = format!("[server]\nmax_decoded_bytes_in_flight = 2097152\n{text}");
        let config = crate::load::from_toml_with_env(&fixed, &|_| None).unwrap();
        let (bytes, line) = budget(config.server());
        assert_eq!(bytes, 2 << 20);
        assert!(
            line.contains("(server.max_decoded_bytes_in_flight)"),
            "{line}"
        );
    }
}
