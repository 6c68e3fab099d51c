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
fn access_lines_are_batched_and_keep_their_order() {
    let out = Buffer::default();
    let batched = Batched::new(out.clone());
    let subscriber = subscriber(false, EnvFilter::new("info"), batched.clone());
    let written = || String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(target: ACCESS_TARGET, n = 1, "request");
        tracing::info!(target: ACCESS_TARGET, n = 2, "request");
        // Gathered, not yet written.
        assert_eq!(written(), "");
        // Any other event goes out at once, after the lines gathered before it.
        tracing::warn!("something else");
        let log = written();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 3, "{log}");
        assert!(lines[0].ends_with("request n=1"), "{log}");
        assert!(lines[1].ends_with("request n=2"), "{log}");
        assert!(lines[2].ends_with("something else"), "{log}");
        // The timer's (and the exit's) flush writes what is left.
        tracing::info!(target: ACCESS_TARGET, n = 3, "request");
        assert_eq!(written().lines().count(), 3);
        batched.flush();
        assert!(written().ends_with("request n=3\n"), "{}", written());
    });
}

#[test]
fn a_full_batch_is_written_without_waiting() {
    let out = Buffer::default();
    let batched = Batched::new(out.clone());
    let subscriber = subscriber(false, EnvFilter::new("info"), batched.clone());
    tracing::subscriber::with_default(subscriber, || {
        let mut n = 0;
        while out.0.lock().unwrap().is_empty() {
            n += 1;
            assert!(n * 40 < 2 * BATCH_BYTES, "no batch after {n} lines");
            tracing::info!(target: ACCESS_TARGET, n, "request");
        }
        let written = out.0.lock().unwrap().len();
        assert!(written >= BATCH_BYTES, "{written}");
        assert!(
            String::from_utf8(out.0.lock().unwrap().clone())
                .unwrap()
                .ends_with('\n')
        );
    });
}

#[test]
fn without_a_timer_every_line_is_written_at_once() {
    let out = Buffer::default();
    let batched = Batched::new(out.clone());
    batched.write_through();
    let subscriber = subscriber(false, EnvFilter::new("info"), batched);
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(target: ACCESS_TARGET, "request");
    });
    assert_eq!(
        out.0
            .lock()
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        1
    );
}

#[test]
fn only_the_final_newline_stays_raw() {
    assert_eq!(escape_event(b"a\nb\n"), "a\\nb\n");
    assert_eq!(escape_event(b"a\n\n"), "a\\n\n");
    assert_eq!(escape_event(b"\x1b"), "\\u001b");
    assert_eq!(escape_event("é ü 日本".as_bytes()), "é ü 日本");
}

/// What tracing's own formatter writes for `line` (through [`access`] without `init`),
/// and what [`format_access`] writes,
/// each with its timestamp (everything before the first ` ` or `","level"`) cut off.
fn both_layouts(line: &Access<'_>, json: bool) -> (String, String) {
    let buffer = Buffer::default();
    let subscriber = subscriber(json, EnvFilter::new("info"), buffer.clone());
    // Without `init`, `access` logs through tracing: the formatter's own layout.
    tracing::subscriber::with_default(subscriber, || access(line));
    let traced = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let ours = escaped(&format_access(line, json, std::time::SystemTime::now())).into_owned();
    let cut = |text: &str| {
        let at = if json {
            text.find("\",\"level\"").unwrap()
        } else {
            text.find(' ').unwrap()
        };
        text[at..].to_string()
    };
    (cut(&traced), cut(&ours))
}

#[test]
fn access_lines_written_directly_are_laid_out_as_tracing_lays_them_out() {
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let lines = [
        Access {
            request_id: "rg-53f7adbbdfe69a64",
            trace_id: Some(trace),
            recipient: Some("load"),
            route: "systemone",
            contract: "load",
            status: 200,
            latency_ms: 0.406221,
        },
        Access {
            request_id: "rg-0000000000000001",
            trace_id: None,
            recipient: None,
            route: "models",
            contract: "none",
            status: 401,
            latency_ms: 12.0,
        },
        Access {
            request_id: "rg-0000000000000002",
            trace_id: Some(trace),
            recipient: Some("équipe \"nord\"\u{202e}\n"),
            route: "systemone",
            contract: "c\\d",
            status: 502,
            latency_ms: 1e-7,
        },
    ];
    for json in [false, true] {
        for line in &lines {
            let (traced, ours) = both_layouts(line, json);
            assert_eq!(ours, traced, "json: {json}");
        }
    }
}

#[test]
fn names_are_written_as_debug_writes_them() {
    for text in [
        "",
        "load",
        "a b~!#$%&'()*+,-./:;<=>?@[]^_`{|}",
        "quote\"",
        "back\\slash",
        "tab\t",
        "\u{7f}",
        "équipe",
        "\u{202e}",
        "日本",
    ] {
        let mut out = String::new();
        super::push_debug_str(&mut out, text);
        assert_eq!(out, format!("{text:?}"));
    }
}

#[test]
fn latencies_at_the_ends_of_the_range_are_written_as_debug_writes_them() {
    let ends = [
        1e-3,
        1e-3 - 1e-19,
        0.0011,
        0.1,
        12.0,
        100.0,
        123_456.789,
        1e15,
        1e15 - 0.125,
    ];
    for x in ends.into_iter().flat_map(|x| [x, -x]) {
        let mut out = String::new();
        super::push_debug_f64(&mut out, x);
        assert_eq!(out, format!("{x:?}"));
    }
}

proptest::proptest! {
    #[test]
    fn latencies_are_written_as_debug_writes_them(
        bits in proptest::prelude::any::<u64>(),
        nanos in 0u64..100_000_000_000_000,
    ) {
        // Any double (most outside the range `zmij` writes: through `fmt`), and
        // latencies as the access line computes them from a duration.
        let latency = super::latency_ms(Duration::from_nanos(nanos));
        let rounded_twice = Duration::from_nanos(nanos).as_secs_f64() * 1e3;
        for x in [f64::from_bits(bits), latency, -latency, latency.round(), 1.0 / latency, rounded_twice] {
            let mut out = String::new();
            super::push_debug_f64(&mut out, x);
            proptest::prop_assert_eq!(out, format!("{x:?}"));
        }
    }

    #[test]
    fn latencies_are_written_to_the_nanosecond(nanos in 1_000u64..1_000_000_000_000_000) {
        // The exact decimal of the nanoseconds in milliseconds, trailing zeros dropped
        // (`.0` when none is left), as `{:?}` writes a double of at most 15 digits.
        let fraction = format!("{:06}", nanos % 1_000_000);
        let fraction = fraction.trim_end_matches('0');
        let exact = format!("{}.{}", nanos / 1_000_000, if fraction.is_empty() { "0" } else { fraction });
        let mut out = String::new();
        super::push_debug_f64(&mut out, super::latency_ms(Duration::from_nanos(nanos)));
        proptest::prop_assert_eq!(out, exact);
    }

    #[test]
    fn any_name_is_written_as_debug_writes_it(text in proptest::prelude::any::<String>()) {
        let mut out = String::new();
        super::push_debug_str(&mut out, &text);
        proptest::prop_assert_eq!(out, format!("{text:?}"));
    }
}

#[test]
fn printable_is_exactly_printable_ascii() {
    for b in 0..=255u8 {
        let expected = (0x20..0x7f).contains(&b);
        assert_eq!(super::printable(&[b]), expected, "{b:#x}");
        // Anywhere in a long line.
        let mut line = vec![b'a'; 300];
        line[b as usize] = b;
        assert_eq!(super::printable(&line), expected, "{b:#x} at {b}");
    }
    assert!(super::printable(b""));
}
