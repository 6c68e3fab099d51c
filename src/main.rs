//! The `releasegate` binary: all logic lives in the library.

fn main() -> std::process::ExitCode {
    releasegate::cli::main()
}
