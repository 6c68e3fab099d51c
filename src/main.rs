//! The `releasegate` binary: the command line over the workspace crates.

mod cli;

/// mimalloc: the proxy and the offline tools allocate many small JSON nodes
/// from several threads; it is markedly faster there than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
