//! The binary's subcommands.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

#[test]
fn hash_key_prints_the_sha256_of_stdin() {
    let mut child = Command::new(BIN)
        .arg("hash-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"demo-dispatcher-key\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        "d2aacb68b85bbdced6e4c3f176f8c2c9f0e8faa9e41842a3c426d1111a37022b"
    );
}

#[test]
fn check_config_accepts_the_default_and_names_the_broken_key() {
    let dir = std::env::temp_dir().join(format!("releasegate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new(BIN)
        .args([
            "check-config",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/releasegate.toml"),
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("contract dispatcher"));

    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "[server]\nmax_body_bytes = 0\n").unwrap();
    let bad = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("server.max_body_bytes"));

    let missing = Command::new(BIN)
        .args(["check-config", "--config", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(64));
    let _ = std::fs::remove_dir_all(&dir);
}
