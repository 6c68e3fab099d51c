//! Live capture: a contract's `capture = { path, sample_rate, ... }` keeps a sample of its
//! native answers, each with the request that went upstream, as worlds (`docs/worlds.md`),
//! so that a team can build a codebook from its own traffic (`docs/collect.md`).
//!
//! It is the opt-in exception to "the proxy stores no answers" (the decision log holds none):
//! the file holds the native answers a contract releases only in part, and the `state` of
//! the requests. So:
//!
//! - nothing of it reaches a recipient: no header, field or status depends on it. The request
//!   path decides the sample (a generator seeded by the operating system, never the request's
//!   content), keeps two reference-counted buffers it already holds (the body sent upstream and
//!   the provider's answer) and hands them to a bounded channel with `try_send`; a full queue
//!   drops the world and counts it (`releasegate_capture_dropped_total{reason="queue_full"}`).
//!   Parsing, formatting and writing happen on the capture's own writer thread;
//! - only answers that passed validation and were released are captured (an answer the proxy
//!   refused is no training data);
//! - the file and its rotations are created with mode 0600 (an existing file is narrowed to
//!   it), rotated by size like the decision log (`PATH.1` .. `PATH.N`).
//!
//! A captured world has no labels: `split` is `train` (so `build-codebook` uses it as it is),
//! `pair_id` is its own `world_id` (no pair, no midpoint), `domain` is the contract's name.

use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use prometheus::IntCounter;
use serde::Serialize;
use serde_json::Value;

use crate::decisions::Rotating;
use crate::metrics::Metrics;
use crate::telemetry::Rfc3339;
use releasegate_core::config::Capture as Settings;
use releasegate_core::rng::Rng;

/// What the request path keeps of a sampled request until its answer is released.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The body sent upstream (`wire::Asked::upstream`, serialized): never the caller's bytes.
    pub request: Bytes,
    /// The provider's answer body, as received (it parsed and was released).
    pub response: Bytes,
    /// The provider that answered, on a contract with several (the worlds' `provider`).
    pub provider: Option<String>,
}

/// One queued world.
struct Item {
    request_id: String,
    time: SystemTime,
    pending: Pending,
}

type Message = crate::decisions::Message<Item>;

/// One contract's live capture: the sampler and the queue to its writer thread.
#[derive(Debug)]
pub(crate) struct Capture {
    sample_rate: f64,
    rng: Mutex<Rng>,
    sender: SyncSender<Message>,
    queue_full: IntCounter,
    write_errors: IntCounter,
}

/// A captured world, in the worlds format's key order.
#[derive(Serialize)]
struct World<'a> {
    world_id: &'a str,
    pair_id: &'a str,
    split: &'static str,
    domain: &'a str,
    request: Value,
    response: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<&'a str>,
    /// When the answer was released (an unknown key to the worlds readers, kept on rewrite).
    captured_at: String,
}

// === impl Capture ===

impl Capture {
    /// Opens the file (created with mode 0600, or appended to) and starts the writer thread.
    pub(crate) fn start(
        contract: &str,
        settings: &Settings,
        metrics: &Metrics,
    ) -> io::Result<Capture> {
        let sink = Rotating::open_private(
            settings.path().to_path_buf(),
            settings.max_bytes(),
            settings.max_files(),
        )?;
        Capture::with_sink(
            contract,
            settings.sample_rate(),
            settings.queue_capacity(),
            Box::new(sink),
            metrics,
        )
    }

    /// Starts the writer thread on any sink (tests use one that blocks).
    fn with_sink(
        contract: &str,
        sample_rate: f64,
        capacity: usize,
        sink: Box<dyn Write + Send>,
        metrics: &Metrics,
    ) -> io::Result<Capture> {
        let seed = releasegate_core::rng::os_seed().map_err(io::Error::other)?;
        let (sender, receiver) = mpsc::sync_channel(capacity.max(1));
        let written = metrics.captured.with_label_values(&[contract]);
        let write_errors = metrics
            .capture_dropped
            .with_label_values(&[contract, "write_error"]);
        let queue_full = metrics
            .capture_dropped
            .with_label_values(&[contract, "queue_full"]);
        let writer = Writer {
            domain: contract.to_string(),
            sink,
            written,
            write_errors: write_errors.clone(),
            last_warning: None,
        };
        std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || writer.run(receiver))?;
        Ok(Capture {
            sample_rate,
            rng: Mutex::new(Rng::new(seed)),
            sender,
            queue_full,
            write_errors,
        })
    }

    /// Whether this request is in the sample: a draw from a generator seeded by the
    /// operating system (a caller cannot choose to be captured or not).
    pub(crate) fn sample(&self) -> bool {
        if self.sample_rate >= 1.0 {
            return true;
        }
        let draw = self.rng.lock().map(|mut rng| rng.uniform()).unwrap_or(1.0);
        draw < self.sample_rate
    }

    /// Queues a released request's world without ever waiting: a full queue drops it and
    /// counts it.
    pub(crate) fn offer(&self, request_id: String, pending: Pending) {
        let item = Item {
            request_id,
            time: SystemTime::now(),
            pending,
        };
        match self.sender.try_send(Message::Item(Box::new(item))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.queue_full.inc(),
            Err(TrySendError::Disconnected(_)) => self.write_errors.inc(),
        }
    }

    /// Waits (blocking, at most `timeout`) until everything queued so far is written and
    /// flushed. False when the writer did not confirm in time.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        Message::flush(&self.sender, timeout)
    }
}

/// The writer thread's side.
struct Writer {
    domain: String,
    sink: Box<dyn Write + Send>,
    written: IntCounter,
    write_errors: IntCounter,
    last_warning: Option<Instant>,
}

impl Writer {
    /// Writes what is queued, flushes when the queue is empty, ends when every sender is gone.
    fn run(mut self, receiver: Receiver<Message>) {
        while let Ok(first) = receiver.recv() {
            let mut waiting = Vec::new();
            let mut next = Some(first);
            while let Some(message) = next {
                match message {
                    Message::Item(item) => self.write(&item),
                    Message::Flush(done) => waiting.push(done),
                }
                next = receiver.try_recv().ok();
            }
            if let Err(error) = self.sink.flush() {
                self.fail(&error);
            }
            for done in waiting {
                let _ = done.send(());
            }
        }
        let _ = self.sink.flush();
    }

    fn write(&mut self, item: &Item) {
        let Some(line) = world_line(&self.domain, item) else {
            // Both bodies parsed on the request path; this is unreachable in practice.
            self.write_errors.inc();
            return;
        };
        match self.sink.write_all(&line) {
            Ok(()) => self.written.inc(),
            Err(error) => self.fail(&error),
        }
    }

    fn fail(&mut self, error: &io::Error) {
        self.write_errors.inc();
        if self
            .last_warning
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
        {
            self.last_warning = Some(Instant::now());
            tracing::warn!(%error, contract = %self.domain, "cannot write the capture file; worlds are dropped");
        }
    }
}

/// One world line (with its newline): `None` when a body is not JSON.
fn world_line(domain: &str, item: &Item) -> Option<Vec<u8>> {
    let request: Value = serde_json::from_slice(&item.pending.request).ok()?;
    let response: Value = serde_json::from_slice(&item.pending.response).ok()?;
    let world_id = format!("{domain}-{}", item.request_id);
    let world = World {
        world_id: &world_id,
        pair_id: &world_id,
        split: "train",
        domain,
        request,
        response,
        provider: item.pending.provider.as_deref(),
        captured_at: Rfc3339::millis(item.time).to_string(),
    };
    let mut line = serde_json::to_vec(&world).ok()?;
    line.push(b'\n');
    Some(line)
}

#[cfg(test)]
mod tests;
