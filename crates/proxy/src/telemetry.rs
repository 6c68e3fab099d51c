//! Logging set-up: `RUST_LOG` filter (default `releasegate=info`), text or JSON lines.
//!
//! Log lines carry text the request controls (question ids in error messages, header
//! values, paths). Every event is therefore written through [`Escaped`]: control
//! characters, Unicode line separators and bidirectional overrides anywhere in an event
//! are written as escapes (`\n`, `\r`, `\t`, `\u001b`), in every format, so a request
//! can neither forge log lines nor send terminal escape sequences to an operator's
//! console. The escapes are valid inside JSON strings, so JSON lines stay parseable and
//! decode to the original text. Colours are off for the same reason.
//!
//! Access lines (one per request, target [`ACCESS_TARGET`]) are the bulk of the log.
//! [`init`] collects them in memory and writes them out in batches ([`Batched`]): when
//! [`BATCH_BYTES`] have gathered, at least every [`BATCH_INTERVAL`], before any other
//! event (so lines keep their order) and at exit ([`flush`]). Every other event is
//! written at once.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

mod rfc3339;
pub use rfc3339::Rfc3339;

/// The target of the per-request access lines.
pub const ACCESS_TARGET: &str = "releasegate::access";

/// Access lines are written once this many bytes have gathered...
pub const BATCH_BYTES: usize = 16 * 1024;

/// ...and at the latest this long after they were logged.
pub const BATCH_INTERVAL: Duration = Duration::from_millis(100);

/// The batched stderr of [`init`], for [`flush`].
static STDERR: OnceLock<Batched<io::Stderr>> = OnceLock::new();

/// Set by [`init`] once its subscriber is the global one: whether lines are JSON. [`access`]
/// then writes access lines into [`STDERR`] itself.
static DIRECT: OnceLock<bool> = OnceLock::new();

/// Installs the global subscriber once; later calls are ignored. Logs go to stderr,
/// access lines in batches (see the module docs).
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("releasegate=info,tower_http=warn"));
    let stderr = STDERR.get_or_init(|| {
        let batched = Batched::new(io::stderr());
        let flusher = batched.clone();
        let started = std::thread::Builder::new()
            .name("releasegate-log".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(BATCH_INTERVAL);
                    flusher.flush();
                }
            });
        if started.is_err() {
            // Without the timer a quiet proxy would hold its last lines: write through.
            batched.write_through();
        }
        batched
    });
    if subscriber(json, filter, stderr.clone()).try_init().is_ok() {
        let _ = DIRECT.set(json);
    }
}

/// One access line (target [`ACCESS_TARGET`], message `request`).
#[allow(missing_debug_implementations)]
pub struct Access<'a> {
    /// The request id (`rg-...`).
    pub request_id: &'a str,
    /// The trace id (32 hex digits), when there is one.
    pub trace_id: Option<&'a str>,
    /// The authenticated recipient, when there is one.
    pub recipient: Option<&'a str>,
    /// The route (`systemone`, `models`).
    pub route: &'static str,
    /// The contract, or `none`.
    pub contract: &'a str,
    /// The response's status.
    pub status: u16,
    /// Time from the request head to the response, in milliseconds ([`latency_ms`]).
    pub latency_ms: f64,
}

/// A latency in milliseconds, to the nanosecond: the double nearest to the duration's
/// nanoseconds over 10⁶. Below 10¹⁵ ns (11 days) that decimal has at most 15
/// significant digits, so it is the shortest text that reads back to the double and
/// the access line writes it without a second formatter;
/// `as_secs_f64() * 1e3` rounds twice and is mostly written with 16 or 17 digits.
pub fn latency_ms(latency: Duration) -> f64 {
    latency.as_nanos() as f64 / 1e6
}

/// Logs one access line at INFO when the filter lets it through: written straight into
/// the batch under [`init`] (see the module docs), through tracing otherwise.
pub fn access(line: &Access<'_>) {
    if !tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        return;
    }
    let (Some(&json), Some(stderr)) = (DIRECT.get(), STDERR.get()) else {
        tracing::info!(
            target: ACCESS_TARGET,
            parent: None,
            request_id = %line.request_id,
            trace_id = line.trace_id.map(tracing::field::display),
            recipient = line.recipient,
            route = line.route,
            contract = line.contract,
            status = line.status,
            latency_ms = line.latency_ms,
            "request"
        );
        return;
    };
    let event = format_access(line, json, std::time::SystemTime::now());
    let _ = stderr.write_event(escaped(&event).as_bytes(), true);
}

/// Whether every byte is printable ASCII (`0x20..0x7f`), which no event needs to escape.
/// Folded without an early exit, so that it compiles to vector compares: a byte at a
/// time cost the access line about 1,500 instructions.
fn printable(bytes: &[u8]) -> bool {
    !bytes
        .iter()
        .fold(false, |other, &b| other | (b.wrapping_sub(0x20) >= 0x5f))
}

/// An event as [`EscapedWriter`] writes it.
fn escaped(event: &str) -> std::borrow::Cow<'_, str> {
    let body = event.strip_suffix('\n').unwrap_or(event);
    if printable(body.as_bytes()) {
        std::borrow::Cow::Borrowed(event)
    } else {
        std::borrow::Cow::Owned(escape_event(event.as_bytes()))
    }
}

/// An access line laid out as tracing's text or JSON formatter lays out
/// `info!(target: ACCESS_TARGET, parent: None, request_id = %.., trace_id = ..,
/// recipient = .., route, contract, status, latency_ms, "request")` (fields in that order,
/// an absent one left out), ending in a newline.
fn format_access(line: &Access<'_>, json: bool, now: std::time::SystemTime) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(256);
    let timestamp = Rfc3339::micros(now);
    if json {
        let string = |out: &mut String, value: &str| {
            // A `String` never fails to take JSON.
            out.push_str(&serde_json::to_string(value).unwrap_or_default());
        };
        out.push_str("{\"timestamp\":\"");
        timestamp.push_to(&mut out);
        out.push_str("\",\"level\":\"INFO\",\"fields\":{\"message\":\"request\",\"request_id\":");
        string(&mut out, line.request_id);
        if let Some(trace_id) = line.trace_id {
            out.push_str(",\"trace_id\":");
            string(&mut out, trace_id);
        }
        if let Some(recipient) = line.recipient {
            out.push_str(",\"recipient\":");
            string(&mut out, recipient);
        }
        out.push_str(",\"route\":");
        string(&mut out, line.route);
        out.push_str(",\"contract\":");
        string(&mut out, line.contract);
        let latency = serde_json::Number::from_f64(line.latency_ms)
            .map_or_else(|| String::from("null"), |n| n.to_string());
        let _ = write!(
            out,
            ",\"status\":{},\"latency_ms\":{latency}}},\"target\":\"{ACCESS_TARGET}\"}}",
            line.status
        );
    } else {
        // Pieces pushed as they are where `fmt` would only copy them: this line is written
        // for every request.
        timestamp.push_to(&mut out);
        out.push_str("  INFO ");
        out.push_str(ACCESS_TARGET);
        out.push_str(": request request_id=");
        out.push_str(line.request_id);
        if let Some(trace_id) = line.trace_id {
            out.push_str(" trace_id=");
            out.push_str(trace_id);
        }
        if let Some(recipient) = line.recipient {
            out.push_str(" recipient=");
            push_debug_str(&mut out, recipient);
        }
        out.push_str(" route=");
        push_debug_str(&mut out, line.route);
        out.push_str(" contract=");
        push_debug_str(&mut out, line.contract);
        out.push_str(" status=");
        out.push_str(itoa::Buffer::new().format(line.status));
        out.push_str(" latency_ms=");
        push_debug_f64(&mut out, line.latency_ms);
    }
    out.push('\n');
    out
}

/// `x` as `{:?}` writes it: through `zmij` where the two write the same text, through
/// `fmt` elsewhere. Both write the shortest digits that read back to `x`, without an
/// exponent in this range; of at most 15 significant digits there is only one such
/// decimal (they are further apart than doubles are), while of 16 or 17 there may be two,
/// and the two formatters may pick either. The tests below hold them equal.
fn push_debug_f64(out: &mut String, x: f64) {
    use std::fmt::Write as _;
    if x.is_finite() && (1e-3..1e15).contains(&x.abs()) {
        let mut buffer = zmij::Buffer::new();
        let text = buffer.format_finite(x);
        // Significant digits, counted from the first nonzero one (a trailing `.0` counts).
        let significant = text
            .bytes()
            .filter(u8::is_ascii_digit)
            .skip_while(|&b| b == b'0')
            .count();
        if significant <= 15 {
            out.push_str(text);
            return;
        }
    }
    let _ = write!(out, "{x:?}");
}

/// `text` as `{:?}` writes it. Printable ASCII other than `"` and `\\` is the only text
/// `{:?}` leaves as it is, so such text (every name a configuration gives) is copied
/// between quotes; anything else goes through `fmt`.
fn push_debug_str(out: &mut String, text: &str) {
    use std::fmt::Write as _;
    if text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        let _ = write!(out, "{text:?}");
    }
}

/// Writes out the access lines gathered so far (call before the process exits).
pub fn flush() {
    if let Some(stderr) = STDERR.get() {
        stderr.flush();
    }
}

/// The subscriber `init` installs, writing one escaped line per event to `writer`
/// (tests capture logs with it).
pub fn subscriber<W>(json: bool, filter: EnvFilter, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(Escaped(writer));
    if json {
        Box::new(builder.json().finish())
    } else {
        Box::new(builder.finish())
    }
}

/// A writer factory whose writers escape every event (see the module docs).
#[derive(Debug, Clone)]
pub struct Escaped<M>(pub M);

/// The writer of [`Escaped`].
#[derive(Debug)]
pub struct EscapedWriter<W>(W);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Escaped<M> {
    type Writer = EscapedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapedWriter(self.0.make_writer())
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        EscapedWriter(self.0.make_writer_for(meta))
    }
}

impl<W: Write> Write for EscapedWriter<W> {
    /// The formatter hands over one whole event per call; its final newline is the only
    /// one written raw.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        if printable(body) {
            // Printable ASCII only (the usual line): nothing to escape, no copy.
            self.0.write_all(buf)?;
        } else {
            self.0.write_all(escape_event(buf).as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A writer factory that gathers access lines (target [`ACCESS_TARGET`]) and writes
/// them to `W` in batches: at [`BATCH_BYTES`], before any other event, and on
/// [`Batched::flush`] (which [`init`] calls every [`BATCH_INTERVAL`] and [`flush`] at
/// exit). Other events are written at once, after the lines gathered before them.
#[derive(Debug)]
pub struct Batched<W> {
    shared: Arc<Shared<W>>,
}

#[derive(Debug)]
struct Shared<W> {
    /// Access lines not yet written, whole events only.
    pending: Mutex<Vec<u8>>,
    /// The output; held while writing so batches go out in order.
    out: Mutex<W>,
    /// Set when no timer flushes: every event is written at once.
    through: std::sync::atomic::AtomicBool,
}

impl<W> Clone for Batched<W> {
    fn clone(&self) -> Self {
        Batched {
            shared: self.shared.clone(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<W: Write> Batched<W> {
    /// Batches access lines written to `out`.
    pub fn new(out: W) -> Batched<W> {
        Batched {
            shared: Arc::new(Shared {
                pending: Mutex::new(Vec::with_capacity(BATCH_BYTES)),
                out: Mutex::new(out),
                through: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Writes every gathered line out now.
    pub fn flush(&self) {
        let mut out = lock(&self.shared.out);
        // The next batch starts with its full room: grown line by line from nothing,
        // it was copied about eight times on its way to `BATCH_BYTES`.
        let batch = std::mem::replace(
            &mut *lock(&self.shared.pending),
            Vec::with_capacity(BATCH_BYTES),
        );
        if !batch.is_empty() {
            // A log that cannot be written has nowhere to report it.
            let _ = out.write_all(&batch);
            let _ = out.flush();
        }
    }

    fn write_through(&self) {
        self.shared
            .through
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn write_event(&self, event: &[u8], access: bool) -> io::Result<()> {
        let mut pending = lock(&self.shared.pending);
        pending.extend_from_slice(event);
        let through = self
            .shared
            .through
            .load(std::sync::atomic::Ordering::Relaxed);
        if access && !through && pending.len() < BATCH_BYTES {
            return Ok(());
        }
        drop(pending);
        self.flush();
        Ok(())
    }
}

/// The writer of one event of [`Batched`].
#[derive(Debug)]
pub struct BatchedWriter<'a, W> {
    batched: &'a Batched<W>,
    access: bool,
}

impl<'a, W: Write + 'a> MakeWriter<'a> for Batched<W> {
    type Writer = BatchedWriter<'a, W>;

    fn make_writer(&'a self) -> Self::Writer {
        BatchedWriter {
            batched: self,
            access: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        BatchedWriter {
            batched: self,
            access: meta.target() == ACCESS_TARGET,
        }
    }
}

impl<W: Write> Write for BatchedWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.batched.write_event(buf, self.access)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One formatted event with everything but a final `\n` escaped.
pub fn escape_event(event: &[u8]) -> String {
    let (body, newline) = match event.strip_suffix(b"\n") {
        Some(body) => (body, true),
        None => (event, false),
    };
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    if newline {
        out.push('\n');
    }
    out
}

/// Control characters (C0, DEL, C1), line and paragraph separators, and the invisible
/// bidirectional marks and overrides that reorder what a terminal shows.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests;
