//! The offline commands on input they must refuse (a pair across splits, a repeated world id,
//! an output that is their input) and on a stdout that closes before they are done.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::cli::simulate;
use super::helpers::scratch;

const BIN: &str = env!("CARGO_BIN_EXE_releasegate");

/// `config/NAME` of the repository.
fn shipped(name: &str) -> String {
    format!("{}/config/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `replay` of the tuple-bench delivery contract from `worlds` into `out`.
fn replay(worlds: &Path, out: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["replay", "--config", &shipped("tuple-bench.toml")])
        .args(["--contract", "delivery", "--worlds"])
        .arg(worlds)
        .arg("--out")
        .arg(out);
    command
}

/// `build-codebook` of the tuple-bench delivery question from `worlds` into `out`.
fn build_codebook(worlds: &Path, out: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["build-codebook", "--config", &shipped("tuple-bench.toml")])
        .args(["--contract", "delivery", "--question", "coarse_cause"])
        .args(["--denominator", "4", "--worlds"])
        .arg(worlds)
        .arg("--out")
        .arg(out);
    command
}

/// A quick `audit` of the tuple-bench delivery contract over `worlds`.
fn audit(worlds: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["audit", "--config", &shipped("tuple-bench.toml")])
        .args(["--contract", "delivery", "--views", "no_output,choice"])
        .args(["--bootstrap", "50", "--threads", "1", "--worlds"])
        .arg(worlds);
    command
}

/// The exit code and stderr of `command`.
fn run(command: &mut Command) -> (Option<i32>, String) {
    let output: Output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

/// The simulator's worlds (`pairs` per domain) with `edit` applied to the parsed lines,
/// written to `dir/name`.
fn edited(
    dir: &Path,
    name: &str,
    pairs: u32,
    edit: impl FnOnce(&mut Vec<serde_json::Value>),
) -> PathBuf {
    let source = dir.join(format!("source-{name}"));
    let text = String::from_utf8(simulate(pairs, 8, &source)).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut lines);
    let path = dir.join(name);
    let body: String = lines.iter().map(|w| format!("{w}\n")).collect();
    std::fs::write(&path, body).unwrap();
    path
}

/// Index of the first world of `domain` in `split` and of its mate.
fn pair_in(lines: &[serde_json::Value], domain: &str, split: &str) -> (usize, usize) {
    let first = lines
        .iter()
        .position(|w| w["domain"] == domain && w["split"] == split)
        .unwrap();
    let mate = lines
        .iter()
        .enumerate()
        .position(|(i, w)| i != first && w["pair_id"] == lines[first]["pair_id"])
        .unwrap();
    (first, mate)
}

#[test]
fn every_worlds_reader_refuses_a_pair_across_splits_and_a_repeated_world_id() {
    let dir = scratch("refused-input");
    let mut split_pair = (String::new(), 0, 0);
    let across = edited(&dir, "across.jsonl", 40, |lines| {
        let (first, mate) = pair_in(lines, "delivery", "test");
        lines[mate]["split"] = serde_json::json!("train");
        split_pair = (
            lines[first]["pair_id"].as_str().unwrap().to_string(),
            first.min(mate) + 1,
            first.max(mate) + 1,
        );
    });
    let (pair, first_line, second_line) = split_pair;
    let mut repeated_id = (String::new(), 0, 0);
    let repeated = edited(&dir, "repeated.jsonl", 5, |lines| {
        let last = lines.len() - 1;
        lines[last]["world_id"] = lines[3]["world_id"].clone();
        repeated_id = (
            lines[3]["world_id"].as_str().unwrap().to_string(),
            4,
            last + 1,
        );
    });
    let (id, id_first, id_second) = repeated_id;
    let three = edited(&dir, "three.jsonl", 5, |lines| {
        lines[2]["labels"]["hypotheses"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!("zzz"));
    });
    let out = dir.join("out");
    let split_message = format!(
        "line {second_line}: pair `{pair}` has a world in split train here and one in split \
         test on line {first_line} (both worlds of a pair share a split)"
    );
    let id_message = format!(
        "line {id_second}: world id `{id}` repeats the world of line {id_first} (world ids are \
         unique)"
    );
    for (name, (code, stderr), expected) in [
        ("audit", run(&mut audit(&across)), (65, &split_message)),
        (
            "build-codebook",
            run(&mut build_codebook(&across, &out)),
            (1, &split_message),
        ),
        (
            "replay",
            run(&mut replay(&across, &out)),
            (1, &split_message),
        ),
        ("audit", run(&mut audit(&repeated)), (1, &id_message)),
        (
            "build-codebook",
            run(&mut build_codebook(&repeated, &out)),
            (1, &id_message),
        ),
        (
            "replay",
            run(&mut replay(&repeated, &out)),
            (1, &id_message),
        ),
    ] {
        assert_eq!(code, Some(expected.0), "{name}: {stderr}");
        assert!(stderr.contains(expected.1.as_str()), "{name}: {stderr}");
    }
    // A third hypothesis is a labels problem on its line, not malformed json.
    let (code, stderr) = run(&mut replay(&three, &out));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "line 3: not a valid world: labels.hypotheses must hold the pair's two \
             mechanisms, got 3 names"
        ),
        "{stderr}"
    );
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = scratch("same-file");
    let worlds = dir.join("worlds.jsonl");
    let bytes = simulate(5, 1, &worlds);
    std::fs::create_dir(dir.join("sub")).unwrap();
    let mut spellings = vec![
        worlds.clone(),
        dir.join("sub").join("..").join("worlds.jsonl"),
    ];
    #[cfg(unix)]
    {
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&worlds, &link).unwrap();
        spellings.push(link);
    }
    for out in &spellings {
        let mut json = audit(&worlds);
        json.arg("--json").arg(out);
        for (name, command) in [
            ("replay", &mut replay(&worlds, out)),
            ("build-codebook", &mut build_codebook(&worlds, out)),
            ("audit --json", &mut json),
        ] {
            let (code, stderr) = run(command);
            assert_eq!(code, Some(64), "{name} {}: {stderr}", out.display());
            assert!(
                stderr.contains("is the file --worlds") && stderr.contains("choose another"),
                "{name}: {stderr}"
            );
            assert_eq!(std::fs::read(&worlds).unwrap(), bytes, "{name}");
        }
    }
    let config = PathBuf::from(shipped("tuple-bench.toml"));
    let (code, stderr) = run(&mut replay(&worlds, &config));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("is the file --config"), "{stderr}");
}

#[test]
fn offline_commands_stop_quietly_when_stdout_closes() {
    let dir = scratch("closed-stdout");
    let worlds = dir.join("worlds.jsonl");
    simulate(40, 8, &worlds);
    let mut check_config = Command::new(BIN);
    check_config.args(["check-config", "--config", &shipped("releasegate.toml")]);
    for (name, command) in [
        ("check-config", &mut check_config),
        ("replay", &mut replay(&worlds, &dir.join("out.jsonl"))),
        ("audit", &mut audit(&worlds)),
    ] {
        // A pipe whose reader is gone before the command starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = command.stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(141), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert!(!stderr.contains("error:"), "{name}: {stderr}");
    }
}

#[test]
fn a_pair_the_audit_reads_one_world_of_is_named_with_its_lines_and_the_cause() {
    let dir = scratch("lone-world");
    let mut expected = String::new();
    let worlds = edited(&dir, "worlds.jsonl", 40, |lines| {
        let (first, mate) = pair_in(lines, "delivery", "test");
        lines[mate]["labels"]["T"] = serde_json::json!("NOT_A_CLASS");
        let pair = lines[first]["pair_id"].as_str().unwrap();
        let mut described = [
            (first, "audited"),
            (mate, "left out (authorized_class_not_in_contract)"),
        ];
        described.sort();
        expected = format!(
            "input check: pair `{pair}`: {}",
            described
                .iter()
                .map(|(i, fate)| format!(
                    "line {} (world `{}`) {fate}",
                    i + 1,
                    lines[*i]["world_id"].as_str().unwrap()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    });
    let (code, stderr) = run(&mut audit(&worlds));
    assert_eq!(code, Some(65), "{stderr}");
    assert!(
        stderr.contains("pair ids that do not group exactly two worlds (the first, `")
            && stderr.contains("` groups 1 world)"),
        "{stderr}"
    );
    assert!(stderr.contains(&expected), "{expected}\n{stderr}");
}
