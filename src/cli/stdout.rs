//! The commands' stdout. Every command writes it through [`outln!`](crate::outln) and
//! [`out!`](crate::out), which return an error instead of panicking as `println!` does when
//! stdout is closed (`releasegate audit ... | head -1`): the command then stops quietly with
//! [`EXIT_CLOSED_STDOUT`](super::error::EXIT_CLOSED_STDOUT).
//!
//! SIGPIPE stays ignored (the Rust runtime's default): `serve` must never die of a closed
//! socket, and the offline commands learn of a closed stdout from the write that failed.

use std::fmt;
use std::io::{ErrorKind, Write};

use super::error::Error;

/// Writes `text` on stdout, prints it now (a line buffer would only fail at exit) and tells
/// a closed stdout ([`Error::ClosedStdout`]) from any other write error.
pub(crate) fn write(text: fmt::Arguments<'_>) -> Result<(), Error> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// [`write`](fn@write) to any writer.
fn write_to(out: &mut impl Write, text: fmt::Arguments<'_>) -> Result<(), Error> {
    out.write_fmt(text)
        .and_then(|()| out.flush())
        .map_err(|error| match error.kind() {
            ErrorKind::BrokenPipe => Error::ClosedStdout,
            _ => Error::Failure(format!("cannot write to stdout: {error}")),
        })
}

/// `println!` that returns `Result<(), cli::error::Error>` ([`write`](fn@write)).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns `Result<(), cli::error::Error>` ([`write`](fn@write)).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that went away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_stdout_is_its_own_error_and_others_are_failures() {
        let closed = write_to(&mut Closed, format_args!("summary\n"));
        assert!(matches!(closed, Err(Error::ClosedStdout)), "{closed:?}");
        let full = write_to(&mut [0u8; 2].as_mut_slice(), format_args!("summary"));
        assert!(
            matches!(&full, Err(Error::Failure(m)) if m.starts_with("cannot write to stdout")),
            "{full:?}"
        );
        let mut written = Vec::new();
        write_to(&mut written, format_args!("{}\n", 7)).unwrap();
        assert_eq!(written, b"7\n");
    }
}
