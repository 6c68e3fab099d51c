//! The offline tools' command glue: argument handling, files, progress bars.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::Config;
use crate::contract::Contract;
use crate::{replay, simulate, worlds};

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
