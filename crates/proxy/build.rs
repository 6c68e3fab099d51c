//! Stamps the source commit into the build for `releasegate_build_info{version, commit}`.
//!
//! The commit is `RELEASEGATE_BUILD_COMMIT` when set (a container build without `.git`),
//! else `git rev-parse --short=12 HEAD` when git and a repository are there, else
//! "unknown". Never fails the build, and depends only on the checked-out commit (not the
//! time, the machine or uncommitted changes), so the same commit builds the same binary.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Reruns this script when `path` (a file, or every file under a directory) changes.
fn watch(path: PathBuf) {
    println!("cargo:rerun-if-changed={}", path.display());
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Only what a label may carry: hex digits (a commit id), at most 40 of them.
fn clean(commit: &str) -> Option<String> {
    let commit = commit.trim();
    (!commit.is_empty() && commit.len() <= 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| commit.to_ascii_lowercase())
}

fn main() {
    println!("cargo:rerun-if-env-changed=RELEASEGATE_BUILD_COMMIT");
    let from_env = std::env::var("RELEASEGATE_BUILD_COMMIT").ok();
    let commit = match from_env.as_deref().and_then(clean) {
        Some(commit) => commit,
        None => {
            // Rebuild when HEAD moves: HEAD itself, the branch it points at, packed refs.
            // Only paths that exist are watched: Cargo counts a missing path as changed,
            // and would rerun this script (and rebuild the crate) on every build.
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                watch(Path::new(&dir).join("HEAD"));
                if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
                    let common = if Path::new(&common).is_absolute() {
                        PathBuf::from(common)
                    } else {
                        Path::new(env!("CARGO_MANIFEST_DIR")).join(common)
                    };
                    let packed = common.join("packed-refs");
                    if packed.exists() {
                        watch(packed);
                    }
                    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                        // A branch only in packed refs (or not yet made) gets its loose
                        // file at its next commit: then the nearest existing directory
                        // above it changes.
                        let mut path = common.join(branch);
                        while !path.exists() && path.pop() {}
                        if path.starts_with(&common) && path != common {
                            watch(path);
                        }
                    }
                }
            } else {
                println!("cargo:rerun-if-changed=build.rs");
            }
            git(&["rev-parse", "--short=12", "HEAD"])
                .as_deref()
                .and_then(clean)
                .unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=RELEASEGATE_BUILD_COMMIT={commit}");
}
