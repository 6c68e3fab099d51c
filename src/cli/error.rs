//! The commands' one error type: what went wrong, and the exit code it ends the process with.
//!
//! A command returns `Result<_, Error>` and uses `?`; [`Error::exit`], called once by
//! `cli::main`, prints the message on stderr (`error: ...`) and picks the exit code. Outcomes
//! that are not errors (the gate's 3 and 4, `collect`'s 75) stay the commands' own
//! `ExitCode`s.

use std::fmt::Display;
use std::path::Path;
use std::process::ExitCode;

/// Exit status for unusable configuration or arguments (EX_USAGE).
pub(crate) const EXIT_USAGE: u8 = 64;

/// Exit status of `audit` when its pairs fail the input checks (EX_DATAERR).
pub(crate) const EXIT_UNPAIRED: u8 = 65;

/// Exit status when stdout was closed before a command finished writing it
/// (`releasegate audit ... | head -1`): 128 + SIGPIPE, what a shell reports for a process a
/// closed pipe ends. The command stops quietly, and not with 0: the run did not finish (an
/// `audit --gate` cut short never reads as a pass, `set -o pipefail` sees it). SIGPIPE
/// itself stays ignored, so that `serve` never dies of a closed socket (`stdout`).
pub(crate) const EXIT_CLOSED_STDOUT: u8 = 141;

/// Why a command stopped.
#[derive(Debug)]
pub(crate) enum Error {
    /// Unusable configuration, arguments or input files: exit [`EXIT_USAGE`].
    Usage(String),
    /// The audit's pairs fail its input checks: exit [`EXIT_UNPAIRED`].
    Unpaired(String),
    /// The run itself failed: exit 1.
    Failure(String),
    /// Stdout was closed (a pipe's reader went away): exit [`EXIT_CLOSED_STDOUT`] with no
    /// message.
    ClosedStdout,
}

impl Error {
    /// A usage error with `message`.
    pub(crate) fn usage(message: impl Display) -> Error {
        Error::Usage(message.to_string())
    }

    /// A failure of the run, named with its causes.
    pub(crate) fn failure(error: &dyn std::error::Error) -> Error {
        Error::Failure(chain(error))
    }

    /// A failure reading `path`, named with its causes.
    pub(crate) fn failure_in(path: &Path, error: &dyn std::error::Error) -> Error {
        Error::Failure(format!("{}: {}", path.display(), chain(error)))
    }

    /// Prints the message on stderr and returns the exit code.
    pub(crate) fn exit(self) -> ExitCode {
        let (message, code) = match self {
            Error::ClosedStdout => return ExitCode::from(EXIT_CLOSED_STDOUT),
            Error::Usage(message) => (message, ExitCode::from(EXIT_USAGE)),
            Error::Unpaired(message) => (message, ExitCode::from(EXIT_UNPAIRED)),
            Error::Failure(message) => (message, ExitCode::FAILURE),
        };
        eprintln!("error: {message}");
        code
    }
}

/// `?` for the commands: turns any result's error into an [`Error`].
pub(crate) trait ResultExt<T, E> {
    /// A usage error, by the error's message alone.
    fn or_usage(self) -> Result<T, Error>
    where
        E: Display;

    /// A failure, by the error's message and its causes.
    fn or_failure(self) -> Result<T, Error>
    where
        E: std::error::Error;

    /// A failure reading `path`, by the error's message and its causes.
    fn or_failure_in(self, path: &Path) -> Result<T, Error>
    where
        E: std::error::Error;
}

impl<T, E> ResultExt<T, E> for Result<T, E> {
    fn or_usage(self) -> Result<T, Error>
    where
        E: Display,
    {
        self.map_err(Error::usage)
    }

    fn or_failure(self) -> Result<T, Error>
    where
        E: std::error::Error,
    {
        self.map_err(|error| Error::failure(&error))
    }

    fn or_failure_in(self, path: &Path) -> Result<T, Error>
    where
        E: std::error::Error,
    {
        self.map_err(|error| Error::failure_in(path, &error))
    }
}

/// An error and its causes, on one line.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("outer")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_failure_names_its_causes_on_one_line() {
        let error = Outer(std::io::Error::other("inner"));
        let Error::Failure(message) = Error::failure_in(Path::new("w.jsonl"), &error) else {
            panic!("not a failure");
        };
        assert_eq!(message, "w.jsonl: outer: inner");
    }

    #[test]
    fn a_usage_error_keeps_the_message_alone() {
        let result: Result<(), Outer> = Err(Outer(std::io::Error::other("inner")));
        let Err(Error::Usage(message)) = result.or_usage() else {
            panic!("not a usage error");
        };
        assert_eq!(message, "outer");
    }
}
