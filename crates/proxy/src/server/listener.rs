//! Serving one listener: our own accept loop over hyper's HTTP/1.1
//! connection driver, so that every connection is bounded. On the public
//! listener a connection starts on the plain path ([`plain`]), which serves
//! plain `POST /v1/systemone` requests itself and hands the connection to hyper
//! at the first request that is not plain.
//!
//! - **Connection cap.** Each connection holds a semaphore permit. At the cap,
//!   a new connection is accepted and closed at once (the client sees the
//!   connection end without an answer, and a load balancer can retry
//!   elsewhere) instead of waiting in the kernel's backlog.
//! - **Header timeout.** A request head must be complete within
//!   `header_read_timeout` of its first byte; on a new connection the clock
//!   starts at accept, so a silent connection is also bounded by it.
//! - **Idle timeout.** A keep-alive connection with no request in progress and
//!   no byte of a new one is closed after `idle_timeout`.
//! - While a request is in progress (head parsed, response not yet fully
//!   written) neither clock runs: the body has its own deadline
//!   (`server::body`) and the provider call its own timeout.
//! - **Drain.** On [`Stage::Draining`] the listener stops accepting and every
//!   connection finishes its current request, then closes; on
//!   [`Stage::Closing`] the remaining ones are dropped.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

mod activity;
mod fds;
pub(crate) mod plain;
mod tracked;
mod woken;

use activity::Activity;
pub(super) use fds::{fit_to_fd_limit, upstream_fds};
use tracked::{Tracked, TrackedBody};

use super::limits::Limits;
use super::routes::Routes;
use bytes::Bytes;
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// How long the accept loop backs off after a resource error (EMFILE, ENOMEM):
/// the pending connection stays in the backlog meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Where a listener is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Accepting and serving.
    Serving,
    /// Not accepting; connections finish their current request and close.
    Draining,
    /// The grace is over: remaining connections are dropped.
    Closing,
}

/// Why the proxy closed a connection (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closed {
    OverCapacity,
    HeaderTimeout,
    IdleTimeout,
}

impl Closed {
    const LABELS: [&'static str; 3] = ["over_capacity", "header_timeout", "idle_timeout"];

    fn label(self) -> &'static str {
        match self {
            Closed::OverCapacity => Self::LABELS[0],
            Closed::HeaderTimeout => Self::LABELS[1],
            Closed::IdleTimeout => Self::LABELS[2],
        }
    }
}

/// Connection metrics by listener (`public` or `admin`).
#[derive(Clone, Debug)]
pub(super) struct ConnectionMetrics {
    open: IntGaugeVec,
    closed: IntCounterVec,
}

impl ConnectionMetrics {
    /// Registers the connection metrics and starts every series at zero.
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let open = IntGaugeVec::new(
            Opts::new(
                "releasegate_open_connections",
                "Open client connections by listener",
            ),
            &["listener"],
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "releasegate_connections_closed_total",
                "Client connections the proxy closed, by listener and reason",
            ),
            &["listener", "reason"],
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        for listener in ["public", "admin"] {
            open.with_label_values(&[listener]);
            for reason in Closed::LABELS {
                closed.with_label_values(&[listener, reason]);
            }
        }
        Ok(ConnectionMetrics { open, closed })
    }

    fn count_closed(&self, listener: &str, reason: Closed) {
        self.closed
            .with_label_values(&[listener, reason.label()])
            .inc();
    }
}

/// A bound listener and its limits.
pub(super) struct Listener {
    /// `public` or `admin` (a metric label).
    pub(super) name: &'static str,
    /// The bound socket.
    pub(super) tcp: TcpListener,
    /// Its connection limits.
    pub(super) limits: Limits,
    /// The proxy's own answer in place of hyper's bare one to a request head hyper
    /// refuses (the public listener's JSON body and request ids; see [`Refusal`]).
    pub(super) refusal: Option<Refusal>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.name)
            .field("tcp", &self.tcp)
            .field("limits", &self.limits)
            .field("refusal", &self.refusal.is_some())
            .finish()
    }
}

/// Builds the complete HTTP/1.1 response (head and body) the proxy sends instead of
/// hyper's automatic one to a request head hyper refused, from hyper's status (400 a
/// malformed head, 414 a request target too long, 431 a head too large); `None` keeps
/// hyper's.
pub(super) type Refusal = Arc<dyn Fn(u16) -> Option<Vec<u8>> + Send + Sync>;

/// The connection budget of a listener, shared by its event loops.
pub(super) fn permits(limits: &Limits) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(limits.max_connections))
}

/// Accepts and serves until the stage leaves [`Stage::Serving`]; then stops
/// accepting (this loop's socket is closed) and returns once every connection
/// holding one of `permits` (those of every loop sharing them) has ended.
pub(super) async fn serve(
    listener: Listener,
    permits: Arc<Semaphore>,
    routes: Routes,
    metrics: ConnectionMetrics,
    mut stage: watch::Receiver<Stage>,
    accept: Option<LoopAccept>,
) {
    let Listener {
        name,
        tcp,
        limits,
        refusal,
    } = listener;
    let mut last_warning: Option<Instant> = None;
    let mut last_full: Option<Instant> = None;
    loop {
        if let Some(accept) = &accept {
            accept.wait_until_least_loaded().await;
        }
        let accepted = tokio::select! {
            accepted = tcp.accept() => accepted,
            _ = stage.wait_for(|stage| *stage != Stage::Serving) => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                accept_failed(name, &error, &mut last_warning).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics.count_closed(name, Closed::OverCapacity);
            drop(stream);
            if once_a_second(&mut last_full) {
                tracing::warn!(
                    listener = name,
                    max_connections = limits.max_connections,
                    "connection cap reached; closing new connections"
                );
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            name,
            limits,
            refusal: refusal.clone(),
            metrics: metrics.clone(),
            stage: stage.clone(),
            _permit: permit,
            _counted: accept.as_ref().map(LoopAccept::count_connection),
        };
        tokio::spawn(connection.run(stream, routes.clone()));
    }
    drop(tcp);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

async fn accept_failed(name: &str, error: &io::Error, last_warning: &mut Option<Instant>) {
    // The peer gave up before we accepted: nothing to wait for.
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    ) {
        return;
    }
    // Out of file descriptors or memory: back off instead of spinning; the
    // pending connection waits in the backlog.
    if once_a_second(last_warning) {
        tracing::warn!(listener = name, %error, "accept failed; retrying");
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// True at most once a second (keeps a flood from flooding the log too).
fn once_a_second(last: &mut Option<Instant>) -> bool {
    let due = last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
    if due {
        *last = Some(Instant::now());
    }
    due
}

/// One accepted connection; dropping it returns the permit.
struct Connection {
    name: &'static str,
    limits: Limits,
    refusal: Option<Refusal>,
    metrics: ConnectionMetrics,
    stage: watch::Receiver<Stage>,
    _permit: OwnedSemaphorePermit,
    /// Its place in its event loop's count (several loops share the listener).
    _counted: Option<LoopConnection>,
}

/// The open connections of the event loops sharing one listening socket. Every loop
/// waits on the socket, so whichever wakes first takes a new connection: a burst of
/// connections (a client opening its pool) could land on one loop while another
/// idles, and the connections stay where they landed. So a loop accepts only while
/// it has no more open connections than the least loaded loop; a loop that waits
/// past `LEAST_LOADED_WAIT` accepts anyway (a busy loop must not hold up new connections).
#[derive(Debug)]
pub(super) struct LoopLoads {
    open: Vec<AtomicUsize>,
    changed: Notify,
}

/// How long a loop with more than its share of connections lets the others accept.
const LEAST_LOADED_WAIT: Duration = Duration::from_millis(10);

impl LoopLoads {
    /// The counts of `loops` event loops, all at zero.
    pub(super) fn new(loops: usize) -> Arc<LoopLoads> {
        Arc::new(LoopLoads {
            open: (0..loops).map(|_| AtomicUsize::new(0)).collect(),
            changed: Notify::new(),
        })
    }

    fn is_least(&self, index: usize) -> bool {
        let mine = self
            .open
            .get(index)
            .map_or(0, |n| n.load(Ordering::Relaxed));
        self.open.iter().all(|n| mine <= n.load(Ordering::Relaxed))
    }
}

/// One event loop's gate on its listening socket: it waits its turn to accept (while
/// another loop has fewer open connections) and counts the connections it accepts in
/// the shared [`LoopLoads`].
#[derive(Debug)]
pub(super) struct LoopAccept {
    /// The shared counts.
    pub(super) loads: Arc<LoopLoads>,
    /// This loop's index in them.
    pub(super) index: usize,
}

impl LoopAccept {
    /// Returns once this loop is among the least loaded, or after `LEAST_LOADED_WAIT`.
    async fn wait_until_least_loaded(&self) {
        let deadline = tokio::time::Instant::now() + LEAST_LOADED_WAIT;
        loop {
            let changed = self.loads.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a change in between is not missed.
            changed.as_mut().enable();
            if self.loads.is_least(self.index) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }

    /// Counts a new connection on this loop until the returned [`LoopConnection`] is dropped.
    fn count_connection(&self) -> LoopConnection {
        if let Some(open) = self.loads.open.get(self.index) {
            open.fetch_add(1, Ordering::Relaxed);
        }
        self.loads.changed.notify_waiters();
        LoopConnection {
            loads: self.loads.clone(),
            index: self.index,
        }
    }
}

/// A connection counted in its event loop's open connections; dropping it uncounts it.
#[derive(Debug)]
struct LoopConnection {
    loads: Arc<LoopLoads>,
    index: usize,
}

impl Drop for LoopConnection {
    fn drop(&mut self) {
        if let Some(open) = self.loads.open.get(self.index) {
            open.fetch_sub(1, Ordering::Relaxed);
        }
        self.loads.changed.notify_waiters();
    }
}

impl Connection {
    async fn run(mut self, mut stream: TcpStream, routes: Routes) {
        let open = self.metrics.open.with_label_values(&[self.name]);
        open.inc();
        let activity = Arc::new(Activity::new());
        let outcome = if routes.serves_systemone() {
            let limits = self.limits;
            plain::serve(&mut stream, &activity, &routes, limits, &mut self.stage).await
        } else {
            plain::Outcome::HandOff(Bytes::new())
        };
        match outcome {
            plain::Outcome::HandOff(unread) => {
                self.serve_hyper(stream, unread, activity, routes).await
            }
            plain::Outcome::Expired(reason) => self.metrics.count_closed(self.name, reason),
            plain::Outcome::Finished if matches!(*self.stage.borrow(), Stage::Serving) => {
                linger(stream).await;
            }
            plain::Outcome::Finished | plain::Outcome::Dropped => {}
        }
        open.dec();
    }

    /// Serves the rest of the connection with hyper, `unread` (what the plain path read
    /// and did not serve) first.
    async fn serve_hyper(
        mut self,
        stream: TcpStream,
        unread: Bytes,
        activity: Arc<Activity>,
        routes: Routes,
    ) {
        let io = TokioIo::new(Tracked {
            stream,
            unread,
            activity: activity.clone(),
            refusal: self.refusal.take(),
            replacement: None,
        });
        let service = hyper::service::service_fn({
            let activity = activity.clone();
            move |request: Request<Incoming>| {
                let guard = activity.begin_request();
                let routes = routes.clone();
                // Boxed so the connection is `Unpin` and can hand its socket back at the end
                // (`poll_without_shutdown`, then `linger`).
                Box::pin(async move {
                    let response = routes.serve(request).await;
                    Ok::<_, Infallible>(response.map(|body| TrackedBody {
                        body,
                        _guard: guard,
                    }))
                })
            }
        });
        let mut connection = http1_builder(&self.limits).serve_connection(io, service);
        let mut draining = false;
        let mut finished = false;
        let mut refused = false;
        loop {
            match *self.stage.borrow_and_update() {
                Stage::Serving => {}
                Stage::Draining if draining => {}
                Stage::Draining => {
                    draining = true;
                    Pin::new(&mut connection).graceful_shutdown();
                }
                Stage::Closing => break,
            }
            tokio::select! {
                done = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => {
                    finished = done.is_ok();
                    // A head hyper refused: its answer (the proxy's, see `Refusal`) must
                    // reach a client that may still be sending.
                    refused = done.is_err_and(|error| error.is_parse() || error.is_parse_too_large());
                    break;
                }
                reason = activity.expired(self.limits) => {
                    self.metrics.count_closed(self.name, reason);
                    break;
                }
                changed = self.stage.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        // Not while draining: shutdown waits for connections, and none waits on a client.
        if refused {
            let mut tracked = connection.into_parts().io.into_inner();
            if std::future::poll_fn(|cx| tracked.poll_replacement(cx))
                .await
                .is_ok()
            {
                linger(tracked.stream).await;
            }
        } else if finished && matches!(*self.stage.borrow(), Stage::Serving) {
            linger(connection.into_parts().io.into_inner().stream).await;
        }
    }
}

/// Hyper's HTTP/1.1 connection driver under `limits`.
fn http1_builder(limits: &Limits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true).max_buf_size(limits.max_head_bytes);
    // Hyper's own default keeps its header slots on the stack; only another count is set.
    if limits.max_header_fields != super::limits::HYPER_DEFAULT_HEADER_FIELDS {
        builder.max_headers(limits.max_header_fields);
    }
    builder
}

/// How long a closing connection keeps reading what the client still sends (see [`linger`]).
const LINGER: Duration = Duration::from_secs(2);
/// How much a closing connection reads and discards at most.
const LINGER_BYTES: usize = 1 << 20;

/// Closes a connection the way a client can read the last response: the write side first,
/// then what the client still sends is read and discarded (at most [`LINGER`] and
/// [`LINGER_BYTES`]) before the socket is dropped. A response sent before the request body
/// was read (401, 429, a declared length over the cap) leaves body bytes unread; closing
/// the socket with unread data makes the kernel reset the connection, and a client still
/// writing its body then sees a broken pipe instead of the response (nginx's lingering
/// close does the same).
async fn linger(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut buffer = [0u8; 8192];
    let mut read = 0usize;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
