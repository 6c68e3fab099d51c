//! The file-descriptor budget: the public connection cap fitted under the process's
//! open-file limit, leaving room for the admin listener, the providers' connections and
//! the process itself.

/// Idle connections a remote provider's pool may keep (see `upstream`).
const UPSTREAM_IDLE_POOL: usize = 64;

/// File descriptors kept free for the process itself (logs, the runtime, a
/// connection accepted only to be closed at the cap, name resolution).
const FD_SLACK: usize = 64;

/// The public connection cap that leaves enough file descriptors under the
/// process's open-file limit for the admin listener (`admin_connections`),
/// `upstream_connections` and the process itself, so that a full public
/// listener never starves the admin port. Returns `requested` when it fits
/// or the limit is unknown.
pub(in crate::server) fn fit_to_fd_limit(
    requested: usize,
    admin_connections: usize,
    upstream_connections: usize,
) -> usize {
    let Some(limit) = open_file_limit() else {
        return requested;
    };
    let open_now = std::fs::read_dir("/proc/self/fd")
        .map(|entries| entries.count())
        .unwrap_or(FD_SLACK);
    let reserve = open_now
        .saturating_add(admin_connections)
        .saturating_add(upstream_connections)
        .saturating_add(FD_SLACK);
    let available = limit.saturating_sub(reserve).max(1);
    if requested > available {
        tracing::warn!(
            requested,
            effective = available,
            open_file_limit = limit,
            "server.max_connections lowered to fit the open-file limit (raise `ulimit -n`)"
        );
        available
    } else {
        requested
    }
}

/// File descriptors a remote provider may hold: its in-flight requests and the
/// idle pool of each event loop's client.
pub(in crate::server) fn upstream_fds(max_concurrency: usize, event_loops: usize) -> usize {
    max_concurrency.saturating_add(UPSTREAM_IDLE_POOL.saturating_mul(event_loops))
}

#[cfg(unix)]
fn open_file_limit() -> Option<usize> {
    let (soft, _hard) = rlimit::Resource::NOFILE.get().ok()?;
    if soft == rlimit::INFINITY {
        return None;
    }
    usize::try_from(soft).ok()
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<usize> {
    None
}
