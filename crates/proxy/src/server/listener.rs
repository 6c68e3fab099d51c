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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Duration;

pub(crate) mod plain;

use super::routes::Routes;
use bytes::Bytes;
use hyper::Request;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// File descriptors kept free for the process itself (logs, the runtime, a
/// connection accepted only to be closed at the cap, name resolution).
const FD_SLACK: usize = 64;

/// Idle connections a remote provider's pool may keep (see `upstream`).
const UPSTREAM_IDLE_POOL: usize = 64;

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

/// Connection limits of one listener.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Most connections open at once.
    pub(super) max_connections: usize,
    /// Deadline of a request head (from its first byte; from accept on a new connection).
    pub(super) header_read_timeout: Duration,
    /// Deadline of a keep-alive connection waiting for its next request.
    pub(super) idle_timeout: Duration,
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

/// Most bytes of a request head hyper reads (its `max_buf_size`, which also bounds the
/// connection's read and write buffers). Heads beyond it, or with more than
/// [`MAX_HEADER_FIELDS`] fields, are refused by hyper before any routing; the proxy
/// answers them itself (`Refusal`).
pub const MAX_HEAD_BUFFER_BYTES: usize = 64 * 1024;

/// Most header fields hyper parses in a request head (its default).
pub const MAX_HEADER_FIELDS: usize = 100;

/// Builds the complete HTTP/1.1 response (head and body) the proxy sends instead of
/// hyper's automatic one to a request head hyper refused, from hyper's status (400 a
/// malformed head, 414 a request target too long, 431 a head too large); `None` keeps
/// hyper's.
pub(super) type Refusal = Arc<dyn Fn(u16) -> Option<Vec<u8>> + Send + Sync>;

/// The public connection cap that leaves enough file descriptors under the
/// process's open-file limit for the admin listener (`admin_connections`),
/// `upstream_connections` and the process itself, so that a full public
/// listener never starves the admin port. Returns `requested` when it fits
/// or the limit is unknown.
pub(super) fn fit_to_fd_limit(
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
pub(super) fn upstream_fds(max_concurrency: usize, event_loops: usize) -> usize {
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
    turn: Option<Turn>,
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
        if let Some(turn) = &turn {
            turn.wait().await;
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
            _seat: turn.as_ref().map(Turn::seat),
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
    _seat: Option<Seat>,
}

/// The open connections of the event loops sharing one listening socket. Every loop
/// waits on the socket, so whichever wakes first takes a new connection: a burst of
/// connections (a client opening its pool) could land on one loop while another
/// idles, and the connections stay where they landed. So a loop accepts only while
/// it has no more open connections than the least loaded loop; a loop that waits
/// past `TURN_WAIT` accepts anyway (a busy loop must not hold up new connections).
#[derive(Debug)]
pub(super) struct Balance {
    open: Vec<AtomicUsize>,
    changed: Notify,
}

/// How long a loop with more than its share of connections lets the others accept.
const TURN_WAIT: Duration = Duration::from_millis(10);

impl Balance {
    /// A balance for `loops` event loops.
    pub(super) fn new(loops: usize) -> Arc<Balance> {
        Arc::new(Balance {
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

/// One event loop's place in a [`Balance`].
#[derive(Debug)]
pub(super) struct Turn {
    /// The shared counts.
    pub(super) balance: Arc<Balance>,
    /// This loop's index in them.
    pub(super) index: usize,
}

impl Turn {
    /// Returns once this loop is among the least loaded, or after `TURN_WAIT`.
    async fn wait(&self) {
        let deadline = tokio::time::Instant::now() + TURN_WAIT;
        loop {
            let changed = self.balance.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a change in between is not missed.
            changed.as_mut().enable();
            if self.balance.is_least(self.index) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }

    /// Counts a new connection on this loop until the seat is dropped.
    fn seat(&self) -> Seat {
        if let Some(open) = self.balance.open.get(self.index) {
            open.fetch_add(1, Ordering::Relaxed);
        }
        self.balance.changed.notify_waiters();
        Seat {
            balance: self.balance.clone(),
            index: self.index,
        }
    }
}

/// A connection's place in its loop's count.
#[derive(Debug)]
struct Seat {
    balance: Arc<Balance>,
    index: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(open) = self.balance.open.get(self.index) {
            open.fetch_sub(1, Ordering::Relaxed);
        }
        self.balance.changed.notify_waiters();
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
        let mut connection = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .max_buf_size(MAX_HEAD_BUFFER_BYTES)
            .serve_connection(io, service);
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

/// What a connection is doing, for its header and idle deadlines.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for the first byte of a request head (`fresh`: no request yet).
    Waiting { since: Instant, fresh: bool },
    /// A request head has started arriving.
    Head { since: Instant },
    /// Requests in progress: head parsed, response not yet fully written.
    Busy { requests: usize },
}

/// A connection's phase, shared by its socket, its service and its watchdog.
///
/// Phase changes (three per request) only update the phase: they neither wake
/// the watchdog nor touch a timer. The watchdog sleeps until the earliest
/// instant at which the connection could possibly expire ([`Activity::next_check`])
/// and looks again then, so a busy connection costs one timer per
/// `min(header_read_timeout, idle_timeout)`, not several per request.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                fresh: true,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, mut phase: MutexGuard<'_, Phase>, next: Phase) {
        *phase = next;
    }

    /// Bytes arrived on the socket.
    fn received(&self) {
        let phase = self.lock();
        if let Phase::Waiting { since, fresh } = *phase {
            // A new connection's head deadline counts from accept.
            let since = if fresh { since } else { Instant::now() };
            self.set(phase, Phase::Head { since });
        }
    }

    /// A request head was parsed; the guard ends the request when dropped.
    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let phase = self.lock();
        let requests = match *phase {
            Phase::Busy { requests } => requests.saturating_add(1),
            _ => 1,
        };
        self.set(phase, Phase::Busy { requests });
        RequestGuard(self.clone())
    }

    fn end_request(&self) {
        let phase = self.lock();
        let next = match *phase {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Waiting {
                since: Instant::now(),
                fresh: false,
            },
        };
        self.set(phase, next);
    }

    fn deadline(&self, limits: Limits) -> Option<(Instant, Closed)> {
        match *self.lock() {
            Phase::Waiting { since, fresh: true } | Phase::Head { since } => {
                Some((since + limits.header_read_timeout, Closed::HeaderTimeout))
            }
            Phase::Waiting {
                since,
                fresh: false,
            } => Some((since + limits.idle_timeout, Closed::IdleTimeout)),
            Phase::Busy { .. } => None,
        }
    }

    /// The phase's deadline if it has passed at `now`, else the earliest
    /// instant at which the connection could expire, whatever happens meanwhile:
    ///
    /// - a new connection or a head in progress: its header deadline, or
    ///   `now + idle_timeout` if sooner (the request may start and end at once,
    ///   leaving the connection idle);
    /// - kept alive and waiting: its idle deadline, or `now + header_read_timeout`
    ///   if sooner (a request head may start at once);
    /// - busy: `now` plus the shorter timeout (the request may end at any moment).
    fn next_check(&self, limits: Limits, now: Instant) -> Result<Instant, Closed> {
        let shortest = limits.header_read_timeout.min(limits.idle_timeout);
        match self.deadline(limits) {
            Some((at, reason)) if now >= at => Err(reason),
            Some((at, Closed::IdleTimeout)) => Ok(at.min(now + limits.header_read_timeout)),
            Some((at, _)) => Ok(at.min(now + limits.idle_timeout)),
            None => Ok(now + shortest),
        }
    }

    /// Resolves once the current phase outlives its deadline.
    async fn expired(&self, limits: Limits) -> Closed {
        let sleep = tokio::time::sleep(Duration::ZERO);
        let mut sleep = std::pin::pin!(sleep);
        loop {
            match self.next_check(limits, Instant::now()) {
                Err(reason) => return reason,
                Ok(at) => {
                    sleep.as_mut().reset(at);
                    sleep.as_mut().await;
                }
            }
        }
    }
}

/// Ends its request when dropped (the response body is written or abandoned).
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.end_request();
    }
}

/// A response body that keeps its request in progress until hyper drops it.
struct TrackedBody {
    body: axum::body::Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, reporting received bytes to the connection's activity, and writing the
/// proxy's own answer instead of hyper's automatic response to a refused head.
struct Tracked {
    stream: TcpStream,
    /// Bytes the plain path read and left to hyper, read before the socket.
    unread: Bytes,
    activity: Arc<Activity>,
    refusal: Option<Refusal>,
    /// The proxy's answer being written in place of hyper's (bytes, bytes written);
    /// once set, everything hyper writes is dropped (hyper closes the connection after
    /// its automatic response).
    replacement: Option<(Vec<u8>, usize)>,
}

/// The status of hyper's automatic response starting at `bytes`: a response head that
/// starts the write, has one of the statuses hyper answers parse errors with, and lacks
/// the request id every response of the public router carries (so it never reached the
/// router). `None` for anything else.
fn automatic_status(bytes: &[u8]) -> Option<u16> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 ")?;
    let status = match rest.get(..4)? {
        b"400 " => 400,
        b"414 " => 414,
        b"431 " => 431,
        _ => return None,
    };
    let end = bytes.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = bytes[..end].to_ascii_lowercase();
    let marker = format!("\r\n{}:", super::REQUEST_ID_HEADER);
    let stamped = head
        .windows(marker.len())
        .any(|window| window == marker.as_bytes());
    (!stamped).then_some(status)
}

impl Tracked {
    /// Takes over the connection's output when `bytes` start hyper's automatic response.
    fn check_automatic(&mut self, bytes: &[u8]) {
        if self.replacement.is_some() {
            return;
        }
        if let (Some(refusal), Some(status)) = (&self.refusal, automatic_status(bytes)) {
            self.replacement = refusal(status).map(|answer| (answer, 0));
        }
    }

    /// Writes what is left of the replacement (ready at once without one).
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((bytes, written)) = &mut self.replacement else {
            return Poll::Ready(Ok(()));
        };
        while *written < bytes.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.received();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_automatic(buf);
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(first) = bufs.iter().find(|buf| !buf.is_empty()) {
            this.check_automatic(first);
        }
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|buf| buf.len()).sum()));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_own_error_responses_are_replaced() {
        let auto =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(automatic_status(auto), Some(431));
        assert_eq!(
            automatic_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"),
            Some(400)
        );
        // A routed response carries the request id: never replaced.
        let routed = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nx-request-id: rg-1\r\n\r\n{}";
        assert_eq!(automatic_status(routed), None);
        let routed = b"HTTP/1.1 400 Bad Request\r\nX-Request-Id: rg-1\r\n\r\n";
        assert_eq!(automatic_status(routed), None);
        // Other statuses, a head cut short, a body.
        assert_eq!(automatic_status(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(automatic_status(b"HTTP/1.1 431 Request"), None);
        assert_eq!(automatic_status(b"{\"detail\": 1}"), None);
    }

    #[tokio::test]
    async fn a_loop_with_more_connections_lets_the_others_accept_first() {
        let balance = Balance::new(2);
        let first = Turn {
            balance: balance.clone(),
            index: 0,
        };
        let second = Turn {
            balance: balance.clone(),
            index: 1,
        };
        // Equal: both may accept.
        first.wait().await;
        second.wait().await;
        let seat = first.seat();
        assert!(!balance.is_least(0) && balance.is_least(1));
        // The busier loop waits until the other takes a connection...
        let waiting = tokio::spawn(async move {
            first.wait().await;
            first
        });
        tokio::task::yield_now().await;
        let other = second.seat();
        let first = waiting.await.unwrap();
        assert!(balance.is_least(0) && balance.is_least(1));
        // ...or, if none comes, accepts anyway once `TURN_WAIT` has passed (returns).
        drop(other);
        assert!(!balance.is_least(0));
        first.wait().await;
        drop(seat);
        assert_eq!(balance.open[0].load(Ordering::Relaxed), 0);
    }

    fn limits(header: u64, idle: u64) -> Limits {
        Limits {
            max_connections: 1,
            header_read_timeout: Duration::from_millis(header),
            idle_timeout: Duration::from_millis(idle),
        }
    }

    #[tokio::test]
    async fn phases_pick_their_deadlines() {
        let limits = limits(10_000, 60_000);
        let accepted = Instant::now();
        let activity = Arc::new(Activity::new());
        // A new connection: the head deadline counts from accept, also after the first byte.
        let (first, reason) = activity.deadline(limits).unwrap();
        assert_eq!(reason, Closed::HeaderTimeout);
        assert!(first >= accepted + limits.header_read_timeout);
        activity.received();
        assert_eq!(
            activity.deadline(limits),
            Some((first, Closed::HeaderTimeout))
        );
        // In progress: no deadline.
        let guard = activity.begin_request();
        assert_eq!(activity.deadline(limits), None);
        activity.received();
        assert_eq!(activity.deadline(limits), None);
        // Kept alive: the idle clock, until the next request's first byte.
        let ended = Instant::now();
        drop(guard);
        let (idle, reason) = activity.deadline(limits).unwrap();
        assert_eq!(reason, Closed::IdleTimeout);
        assert!(idle >= ended + limits.idle_timeout);
        let first_byte = Instant::now();
        activity.received();
        let (head, reason) = activity.deadline(limits).unwrap();
        assert_eq!(reason, Closed::HeaderTimeout);
        assert!(head >= first_byte + limits.header_read_timeout && head < idle);
    }

    #[tokio::test]
    async fn the_watchdog_looks_again_no_later_than_any_deadline() {
        let limits = limits(10_000, 60_000);
        let activity = Arc::new(Activity::new());
        let now = Instant::now();
        // New connection: exactly its header deadline.
        let (head, _) = activity.deadline(limits).unwrap();
        assert_eq!(activity.next_check(limits, now), Ok(head));
        // Busy: the request may end now; the shorter timeout is the earliest expiry.
        let guard = activity.begin_request();
        assert_eq!(
            activity.next_check(limits, now),
            Ok(now + limits.header_read_timeout)
        );
        // Kept alive: a head may start at once, so the header timeout bounds the wait,
        // not the (longer) idle deadline.
        drop(guard);
        let (idle, _) = activity.deadline(limits).unwrap();
        let later = Instant::now();
        assert_eq!(
            activity.next_check(limits, later),
            Ok((later + limits.header_read_timeout).min(idle))
        );
        // Past the idle deadline: expired.
        assert_eq!(activity.next_check(limits, idle), Err(Closed::IdleTimeout));
        // A head in progress: its own deadline, expired once passed.
        activity.received();
        let (head, _) = activity.deadline(limits).unwrap();
        assert_eq!(activity.next_check(limits, later), Ok(head));
        assert_eq!(
            activity.next_check(limits, head),
            Err(Closed::HeaderTimeout)
        );
        // A short idle timeout: a new connection's first request may end at once and
        // leave it idle long before its header deadline.
        let short_idle = self::limits(10_000, 300);
        let fresh = Activity::new();
        let now = Instant::now();
        assert_eq!(
            fresh.next_check(short_idle, now),
            Ok(now + short_idle.idle_timeout)
        );
    }

    #[tokio::test]
    async fn expiry_waits_while_busy() {
        let limits = limits(20, 20);
        let activity = Arc::new(Activity::new());
        let guard = activity.begin_request();
        let watchdog = {
            let activity = activity.clone();
            tokio::spawn(async move { activity.expired(limits).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !watchdog.is_finished(),
            "expired while a request was in progress"
        );
        drop(guard);
        let reason = tokio::time::timeout(Duration::from_secs(10), watchdog)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reason, Closed::IdleTimeout);
    }
}
