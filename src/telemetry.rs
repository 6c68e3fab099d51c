//! Logging set-up: `RUST_LOG` filter (default `releasegate=info`), text or JSON lines.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are ignored.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("releasegate=info,tower_http=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
