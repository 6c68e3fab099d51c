//! The `releasegate` binary: the command line over the workspace crates.

mod cli;

/// mimalloc (`releasegate_alloc`): the proxy and the offline tools allocate many small
/// JSON nodes from several threads; it is markedly faster there than the system allocator.
#[global_allocator]
static GLOBAL: releasegate_alloc::Allocator = releasegate_alloc::Allocator;

fn main() -> std::process::ExitCode {
    cli::main()
}
