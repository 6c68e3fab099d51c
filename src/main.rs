//! The `releasegate` binary: all logic lives in the library.

/// mimalloc: the proxy and the offline tools allocate many small JSON nodes
/// from several threads; it is markedly faster there than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    releasegate::cli::main()
}
