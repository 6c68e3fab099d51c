//! Logging set-up: `RUST_LOG` filter (default `releasegate=info`), text or JSON lines.
//!
//! Log lines carry text the request controls (question ids in error messages, header
//! values, paths). Every event is therefore written through [`Escaped`]: control
//! characters, Unicode line separators and bidirectional overrides anywhere in an event
//! are written as escapes (`\n`, `\r`, `\t`, `\u001b`), in every format, so a request
//! can neither forge log lines nor send terminal escape sequences to an operator's
//! console. The escapes are valid inside JSON strings, so JSON lines stay parseable and
//! decode to the original text. Colours are off for the same reason.

use std::io::{self, Write};

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global subscriber once; later calls are ignored.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("releasegate=info,tower_http=warn"));
    let _ = subscriber(json, filter, io::stderr).try_init();
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
        self.0.write_all(escape_event(buf).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
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
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Captures everything written, like stderr would.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    const HOSTILE: &str = "q\n2026-01-01T00:00:00Z  INFO releasegate: forged\r\x1b[2J\x1b[31mred\t\u{7f}\u{85}\u{202e}txt\u{2028}";

    fn capture(json: bool) -> String {
        let buffer = Buffer::default();
        let subscriber = subscriber(json, EnvFilter::new("info"), buffer.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(question = %HOSTILE, "request failed: {HOSTILE}");
            tracing::info!(path = ?HOSTILE, "second");
        });
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    fn assert_clean(log: &str) {
        let lines: Vec<&str> = log.split_terminator('\n').collect();
        assert_eq!(lines.len(), 2, "{log}");
        for line in lines {
            assert!(!line.chars().any(needs_escape), "{line:?}");
        }
    }

    #[test]
    fn text_logs_escape_what_the_request_controls() {
        let log = capture(false);
        assert_clean(&log);
        assert!(log.contains("q\\n2026-01-01T00:00:00Z"), "{log}");
        assert!(log.contains("\\u001b[2J"), "{log}");
        assert!(log.contains("\\u202etxt"), "{log}");
    }

    #[test]
    fn json_logs_stay_parseable_and_decode_to_the_original_text() {
        let log = capture(true);
        assert_clean(&log);
        let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
        assert_eq!(first["fields"]["question"], HOSTILE);
        assert_eq!(
            first["fields"]["message"],
            format!("request failed: {HOSTILE}")
        );
    }

    #[test]
    fn only_the_final_newline_stays_raw() {
        assert_eq!(escape_event(b"a\nb\n"), "a\\nb\n");
        assert_eq!(escape_event(b"a\n\n"), "a\\n\n");
        assert_eq!(escape_event(b"\x1b"), "\\u001b");
        assert_eq!(escape_event("é ü 日本".as_bytes()), "é ü 日本");
    }
}
