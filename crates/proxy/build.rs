//! Stamps the source commit into the build for `releasegate_build_info{version, commit}`.
//!
//! The commit is `RELEASEGATE_BUILD_COMMIT` when set (a container build without `.git`),
//! else `git rev-parse --short=12 HEAD` when git and a repository are there, else
//! "unknown". Never fails the build, and depends only on the checked-out commit (not the
//! time, the machine or uncommitted changes), so the same commit builds the same binary.

use std::process::Command;

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
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                println!("cargo:rerun-if-changed={dir}/HEAD");
                if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
                    let common = if std::path::Path::new(&common).is_absolute() {
                        common
                    } else {
                        format!("{}/{common}", env!("CARGO_MANIFEST_DIR"))
                    };
                    println!("cargo:rerun-if-changed={common}/packed-refs");
                    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                        println!("cargo:rerun-if-changed={common}/{branch}");
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
