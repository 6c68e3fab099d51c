//! The offline tools' command glue: argument handling, files, progress bars.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use crate::codebook::{self, TrainingAnswer};
use crate::config::Config;
use crate::contract::Contract;
use crate::worlds::Split;
use crate::{dataset, replay, simulate, workflow, worlds};

/// A progress spinner on stderr when it is a terminal, hidden otherwise.
pub fn progress(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{spinner}} {{pos}} {what} ({{per_sec}}) {{elapsed}}"
    )) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// Loads the configuration for an offline tool and picks a contract.
pub fn contract(config: &Path, name: &str) -> Result<Arc<Contract>, String> {
    let config = Config::load_offline(Some(config)).map_err(|e| e.to_string())?;
    config.contract(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = config.contracts.keys().map(String::as_str).collect();
        format!("no contract named `{name}` (known: {})", known.join(", "))
    })
}

/// `releasegate replay`.
pub fn replay_command(config: &Path, contract_name: &str, input: &Path, output: &Path) -> ExitCode {
    let contract = match contract(config, contract_name) {
        Ok(contract) => contract,
        Err(message) => return super::usage_error(&message),
    };
    let reader = match worlds::open(input) {
        Ok(reader) => reader,
        Err(error) => return super::usage_error(&error),
    };
    let mut writer = match worlds::create(output) {
        Ok(writer) => writer,
        Err(error) => return super::usage_error(&error),
    };
    let bar = progress("worlds");
    let result = replay::replay(&contract, reader, &mut writer, &mut |n| bar.set_position(n));
    bar.finish_and_clear();
    match result {
        Ok(summary) => {
            match serde_json::to_string_pretty(&summary) {
                Ok(text) => println!("{text}"),
                Err(error) => return super::failure(&error),
            }
            ExitCode::SUCCESS
        }
        Err(error) => super::failure(&error),
    }
}

/// `releasegate simulate`.
pub fn simulate_command(pairs_per_domain: usize, seed: u64, output: &Path) -> ExitCode {
    if pairs_per_domain == 0 {
        return super::usage_error(&"--pairs-per-domain must be at least 1");
    }
    let options = simulate::Options {
        pairs_per_domain,
        seed,
    };
    let mut writer = match worlds::create(output) {
        Ok(writer) => writer,
        Err(error) => return super::usage_error(&error),
    };
    let bar = progress("worlds");
    for pair in simulate::Generator::new(&options) {
        let written = pair.map_err(|error| error.to_string()).and_then(|worlds| {
            worlds
                .iter()
                .try_for_each(|w| writer.write(w))
                .map_err(|e| e.to_string())
        });
        if let Err(message) = written {
            bar.finish_and_clear();
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
        bar.set_position(writer.n_written() as u64);
    }
    bar.finish_and_clear();
    if let Err(error) = writer.flush() {
        return super::failure(&error);
    }
    eprintln!(
        "wrote {} worlds to {}",
        writer.n_written(),
        output.display()
    );
    ExitCode::SUCCESS
}

/// Codebooks above this many grid vectors get a warning (mapping scans them).
pub const GRID_WARNING: u128 = 200_000;

/// `releasegate build-codebook`.
pub fn build_codebook_command(
    config: &Path,
    contract_name: &str,
    question: &str,
    input: &Path,
    output: &Path,
    denominator: u32,
) -> ExitCode {
    let config = match Config::load_without_codebooks(config) {
        Ok(config) => config,
        Err(error) => return super::usage_error(&error),
    };
    let Some(contract) = config.contract(contract_name) else {
        return super::usage_error(&format!("no contract named `{contract_name}`"));
    };
    let Some(rule) = contract.questions.get(question) else {
        return super::usage_error(&format!(
            "contract `{contract_name}` has no question `{question}`"
        ));
    };
    let Some(spec) = &rule.workflows else {
        return super::usage_error(&format!(
            "contracts.{contract_name}.questions.{question} has no `workflows` table: a codebook is built for frozen workflows"
        ));
    };
    let classes = rule.released_labels();
    let grid = codebook::grid_size(classes.len(), denominator);
    if grid > GRID_WARNING {
        let suggestion = codebook::largest_denominator_within(classes.len(), GRID_WARNING)
            .map_or_else(String::new, |d| {
                format!("; --denominator {d} keeps it under {GRID_WARNING}")
            });
        eprintln!(
            "warning: the denominator-{denominator} grid has {grid} vectors for {} classes (times 3 confidences){suggestion}",
            classes.len()
        );
    }
    let bytes = match std::fs::read(input) {
        Ok(bytes) => bytes,
        Err(error) => {
            return super::usage_error(&format!("cannot read {}: {error}", input.display()));
        }
    };
    let source_sha256 = workflow::sha256_hex(&bytes);
    let mut training = Vec::new();
    let mut skipped: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let bar = progress("worlds");
    for (index, world) in worlds::Reader::new(bytes.as_slice()).enumerate() {
        let world = match world {
            Ok(world) => world,
            Err(error) => {
                bar.finish_and_clear();
                return super::failure(&error);
            }
        };
        bar.set_position(index as u64 + 1);
        if world.split != Split::Train {
            continue;
        }
        match dataset::native_answer(contract, question, &world) {
            Ok(answer) => training.push(TrainingAnswer {
                pair_id: world.pair_id.clone(),
                probabilities: answer.vector.probabilities,
                confidence: answer.vector.confidence,
            }),
            Err(skip) => *skipped.entry(skip.to_string()).or_default() += 1,
        }
    }
    bar.set_message("building");
    let built = codebook::build(classes, denominator, spec, &training, source_sha256);
    bar.finish_and_clear();
    let built = match built {
        Ok(built) => built,
        Err(error) => return super::usage_error(&error),
    };
    if let Err(error) = built.codebook.write(output) {
        return super::failure(&error);
    }
    let summary = serde_json::json!({
        "codebook": output.display().to_string(),
        "contract": contract_name,
        "question": question,
        "classes": classes,
        "denominator": denominator,
        "training_answers": training.len(),
        "skipped_train_worlds": skipped,
        "workflows_sha256": built.codebook.workflows_sha256(),
        "stats": built.stats,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    ExitCode::SUCCESS
}
