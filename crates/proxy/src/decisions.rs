//! The release decision log: one JSON line per System One or models request, saying what
//! was decided for whom (recipient, contract, provider, status, latency) and, per released
//! answer, how (question id, view, mechanism, outcome, withheld, codebook hash).
//!
//! It never carries request or answer content: no `state`, no probabilities, confidences,
//! choices or model text. Its strings are configuration keys (recipient, contract,
//! provider and question names, the codebook hash), the proxy's own request id and fixed
//! enum labels; a question id is written only if the contract declares it.
//!
//! Handlers hand a [`Record`] to [`DecisionLog::record`], which never blocks: a bounded
//! channel feeds one writer thread, and a record that finds the channel full is dropped and
//! counted (`releasegate_decision_log_dropped_total{reason="queue_full"}`). The writer
//! formats, writes in batches and flushes whenever the channel is empty; files rotate by
//! size (`PATH` → `PATH.1` → ... → `PATH.N`, the oldest deleted).

pub mod summary;

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use prometheus::IntCounterVec;
use serde::Serialize;

use releasegate_core::config::{DecisionLog as Settings, DecisionSink};
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{Mechanism, Outcome};
use releasegate_core::release::AnswerRecord;

/// What one request decided (built by the handler, formatted by the writer).
#[derive(Debug)]
pub struct Record {
    /// When the response was ready.
    pub time: SystemTime,
    /// The proxy's request id.
    pub request_id: String,
    /// `systemone` or `models`.
    pub route: &'static str,
    /// The authenticated recipient, if the key was known.
    pub recipient: Option<String>,
    /// The selected contract, if one was.
    pub contract: Option<Arc<Contract>>,
    /// The response status.
    pub status: u16,
    /// Time from arrival to response.
    pub latency: Duration,
    /// One record per released answer.
    pub answers: Vec<AnswerRecord>,
    /// The provider that answered or gave the error (after any failover; none: the
    /// contract's first).
    pub provider: Option<String>,
    /// The answer cache's part: `hit`, `miss` or `bypass` (none: no cache).
    pub cache: Option<&'static str>,
}

/// One line of the log, in key order.
#[derive(Debug, Serialize)]
struct Line<'a> {
    ts: String,
    request_id: &'a str,
    route: &'a str,
    recipient: Option<&'a str>,
    contract: Option<&'a str>,
    provider: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<&'static str>,
    status: u16,
    latency_ms: f64,
    answers: Vec<Answer<'a>>,
}

#[derive(Debug, Serialize)]
struct Answer<'a> {
    question: &'a str,
    view: &'static str,
    mechanism: &'static str,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    withheld: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    codebook_sha256: Option<&'a str>,
}

// === impl Record ===

impl Record {
    /// The JSON line (with its newline).
    pub fn to_line(&self) -> Vec<u8> {
        let contract = self.contract.as_deref();
        let answers = contract
            .map(|contract| {
                self.answers
                    .iter()
                    .filter_map(|answer| {
                        // Only ids the contract declares: bounded, from configuration.
                        let (question, rule) =
                            contract.questions().get_key_value(&answer.question)?;
                        let (outcome, reason) = match answer.mechanism {
                            Outcome::Applied => ("applied", None),
                            Outcome::Covered { .. } => ("covered", None),
                            Outcome::Fallback(reason) => ("fallback", Some(reason.label())),
                        };
                        let codebook_sha256 = match &rule.mechanism() {
                            Mechanism::Wcpq(wcpq) => Some(wcpq.codebook_sha256.as_str()),
                            _ => None,
                        };
                        Some(Answer {
                            question: question.as_str(),
                            view: answer.view.as_str(),
                            mechanism: rule.mechanism().kind(),
                            outcome,
                            reason,
                            withheld: answer.withheld,
                            codebook_sha256,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let line = Line {
            ts: crate::telemetry::Rfc3339::millis(self.time).to_string(),
            request_id: &self.request_id,
            route: self.route,
            recipient: self.recipient.as_deref(),
            contract: contract.map(|c| c.name()),
            provider: self.provider.as_deref().or(contract.map(|c| c.provider())),
            cache: self.cache,
            status: self.status,
            // Whole microseconds: a fixed, short rendering.
            latency_ms: (self.latency.as_micros() as f64) / 1000.0,
            answers,
        };
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

pub(crate) enum Message<T> {
    /// One item to write.
    Item(Box<T>),
    /// Write and flush everything before this, then answer.
    Flush(mpsc::Sender<()>),
}

impl<T> Message<T> {
    /// Queues a flush and waits (blocking, at most `timeout`) until the writer confirms that
    /// everything queued before it is written and flushed. False when it did not in time.
    pub(crate) fn flush(sender: &SyncSender<Message<T>>, timeout: Duration) -> bool {
        let (done, confirmed) = mpsc::channel();
        let deadline = Instant::now() + timeout;
        let mut message = Message::Flush(done);
        // Waits for room in the queue, never past the deadline.
        loop {
            match sender.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    message = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        confirmed
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

/// The handlers' side of the decision log.
#[derive(Debug)]
pub struct DecisionLog {
    sender: SyncSender<Message<Record>>,
    dropped: IntCounterVec,
}

impl<T> std::fmt::Debug for Message<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Item(_) => "Item",
            Message::Flush(_) => "Flush",
        })
    }
}

// === impl DecisionLog ===

impl DecisionLog {
    /// Opens the sink (a file is created or appended to) and starts the writer thread.
    pub fn start(settings: &Settings, dropped: IntCounterVec) -> io::Result<DecisionLog> {
        let sink: Box<dyn Write + Send> = match &settings.sink() {
            DecisionSink::Stdout => Box::new(io::stdout()),
            DecisionSink::File(path) => Box::new(Rotating::open(
                path.clone(),
                settings.max_bytes(),
                settings.max_files(),
            )?),
        };
        DecisionLog::with_sink(sink, settings.queue_capacity(), dropped)
    }

    /// Starts the writer thread on any sink (tests use a sink that blocks).
    pub fn with_sink(
        sink: Box<dyn Write + Send>,
        capacity: usize,
        dropped: IntCounterVec,
    ) -> io::Result<DecisionLog> {
        let (sender, receiver) = mpsc::sync_channel(capacity.max(1));
        let write_errors = dropped.with_label_values(&["write_error"]);
        std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || write_all(receiver, sink, &write_errors))?;
        dropped.with_label_values(&["queue_full"]);
        Ok(DecisionLog { sender, dropped })
    }

    /// Queues a record without ever waiting: when the queue is full the record is dropped
    /// and counted.
    pub fn record(&self, record: Record) {
        match self.sender.try_send(Message::Item(Box::new(record))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.with_label_values(&["queue_full"]).inc();
            }
            Err(TrySendError::Disconnected(_)) => {
                self.dropped.with_label_values(&["write_error"]).inc();
            }
        }
    }

    /// Waits (blocking, at most `timeout`) until everything queued so far is written and
    /// flushed. False when the writer did not confirm in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        Message::flush(&self.sender, timeout)
    }
}

/// The writer thread: batches what is queued, flushes when the queue is empty, ends when
/// every sender is gone.
fn write_all(
    receiver: Receiver<Message<Record>>,
    mut sink: Box<dyn Write + Send>,
    write_errors: &prometheus::IntCounter,
) {
    let mut last_warning: Option<Instant> = None;
    let mut fail = |error: &io::Error| {
        write_errors.inc();
        if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
            last_warning = Some(Instant::now());
            tracing::warn!(%error, "cannot write the decision log; lines are dropped");
        }
    };
    while let Ok(first) = receiver.recv() {
        let mut waiting = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Item(record) => {
                    if let Err(error) = sink.write_all(&record.to_line()) {
                        fail(&error);
                    }
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = receiver.try_recv().ok();
        }
        if let Err(error) = sink.flush() {
            fail(&error);
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
    let _ = sink.flush();
}

/// A file rotated by size: before a line would take it past `max_bytes`, `PATH.N-1` becomes
/// `PATH.N` (the oldest is replaced), ..., `PATH` becomes `PATH.1`, and a new `PATH` starts.
/// A single line longer than `max_bytes` gets a file of its own.
#[derive(Debug)]
pub struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    max_files: usize,
    file: BufWriter<File>,
    written: u64,
    /// Files are created (and an existing one is set to) mode 0600: owner only.
    private: bool,
}

impl Rotating {
    /// Opens `path` for appending (its size counts towards the first rotation).
    pub fn open(path: PathBuf, max_bytes: u64, max_files: usize) -> io::Result<Rotating> {
        Rotating::open_with(path, max_bytes, max_files, false)
    }

    /// Like [`Rotating::open`], for files only their owner may read: every file is created
    /// with mode 0600, and an existing one is set to it (on Unix).
    pub fn open_private(path: PathBuf, max_bytes: u64, max_files: usize) -> io::Result<Rotating> {
        Rotating::open_with(path, max_bytes, max_files, true)
    }

    fn open_with(
        path: PathBuf,
        max_bytes: u64,
        max_files: usize,
        private: bool,
    ) -> io::Result<Rotating> {
        let file = append(&path, private)?;
        let written = file.metadata()?.len();
        Ok(Rotating {
            path,
            max_bytes,
            max_files: max_files.max(1),
            file: BufWriter::new(file),
            written,
            private,
        })
    }

    /// The `index`-th rotated file (`PATH.index`).
    pub fn rotated(path: &Path, index: usize) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{index}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        for index in (1..self.max_files).rev() {
            let from = Rotating::rotated(&self.path, index);
            match std::fs::rename(&from, Rotating::rotated(&self.path, index + 1)) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        std::fs::rename(&self.path, Rotating::rotated(&self.path, 1))?;
        self.file = BufWriter::new(append(&self.path, self.private)?);
        self.written = 0;
        Ok(())
    }
}

fn append(path: &Path, private: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(path)?;
        // A file that existed before keeps its mode through `open`: narrow it.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        return Ok(file);
    }
    #[cfg(not(unix))]
    let _ = private;
    options.open(path)
}

impl Write for Rotating {
    /// Takes one whole line per call (the writer writes each line with one `write_all`).
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let len = line.len() as u64;
        if self.written > 0 && self.written.saturating_add(len) > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.written = self.written.saturating_add(len);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests;
