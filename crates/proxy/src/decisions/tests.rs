use std::sync::{Arc, Condvar, Mutex};

use prometheus::Opts;
use serde_json::Value;

use super::*;
use releasegate_core::contract::View;

fn dropped_counter() -> IntCounterVec {
    IntCounterVec::new(Opts::new("dropped", "test"), &["reason"]).unwrap()
}

fn answer(question: &str, mechanism: Outcome, withheld: bool) -> AnswerRecord {
    AnswerRecord {
        question: question.to_string(),
        view: View::ChoiceConfidence,
        withheld,
        mechanism,
        mapping_seconds: Some(1e-6),
        evaluation: None,
    }
}

fn record(contract: Option<Arc<Contract>>, answers: Vec<AnswerRecord>) -> Record {
    Record {
        time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_445_412_480_123),
        request_id: "rg-0123456789abcdef-1".to_string(),
        route: "systemone",
        recipient: Some("planner".to_string()),
        contract,
        status: 200,
        latency: Duration::from_nanos(1_234_567),
        answers,
        provider: None,
        cache: None,
    }
}

#[test]
fn a_line_names_the_decision_and_nothing_of_the_content() {
    let config = crate::load::embedded_default().unwrap();
    let planner = config.contracts()["planner"].clone();
    let sha = match planner.questions()["coarse_cause"].mechanism() {
        Mechanism::Wcpq(wcpq) => wcpq.codebook_sha256.clone(),
        _ => panic!("planner is a WCPQ contract"),
    };
    let line = record(
        Some(planner),
        vec![
            answer(
                "coarse_cause",
                Outcome::Covered {
                    codeword_index: 7,
                    stage: releasegate_core::wcpq::Stage::Strict,
                },
                false,
            ),
            answer(
                "coarse_cause",
                Outcome::Fallback(releasegate_core::wcpq::Reason::NoCandidate),
                true,
            ),
            // Not a question of the contract: never written.
            answer("undeclared <script>", Outcome::Applied, false),
        ],
    )
    .to_line();
    assert_eq!(line.last(), Some(&b'\n'));
    let value: Value = serde_json::from_slice(&line).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "ts",
            "request_id",
            "route",
            "recipient",
            "contract",
            "provider",
            "status",
            "latency_ms",
            "answers"
        ]
    );
    assert_eq!(value["ts"], "2015-10-21T07:28:00.123Z");
    assert_eq!(value["contract"], "planner");
    assert_eq!(value["provider"], "sim");
    assert_eq!(value["latency_ms"], 1.234);
    let answers = value["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(
        answers[0],
        serde_json::json!({"question": "coarse_cause", "view": "choice_confidence", "mechanism": "wcpq",
                           "outcome": "covered", "withheld": false, "codebook_sha256": sha})
    );
    assert_eq!(answers[1]["outcome"], "fallback");
    assert_eq!(answers[1]["reason"], "no_candidate");
    assert_eq!(answers[1]["withheld"], true);
    assert!(!String::from_utf8_lossy(&line).contains("undeclared"));

    // Without a contract (unknown key): no answers, nulls.
    let mut unknown = record(None, vec![answer("q", Outcome::Applied, false)]);
    unknown.recipient = None;
    unknown.status = 401;
    let value: Value = serde_json::from_slice(&unknown.to_line()).unwrap();
    assert_eq!(value["recipient"], Value::Null);
    assert_eq!(value["contract"], Value::Null);
    assert_eq!(value["answers"], serde_json::json!([]));
}

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("releasegate-{name}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn files_rotate_by_size_and_keep_max_files() {
    let scratch_dir = scratch("rotate");
    let dir = scratch_dir.path();
    let path = dir.join("decisions.jsonl");
    let mut file = Rotating::open(path.clone(), 200, 2).unwrap();
    for index in 0..30 {
        let line = format!("{{\"n\":{index},\"pad\":\"{}\"}}\n", "x".repeat(40));
        file.write_all(line.as_bytes()).unwrap();
    }
    // A line longer than max_bytes gets a file of its own.
    file.write_all(format!("{}\n", "y".repeat(300)).as_bytes())
        .unwrap();
    file.flush().unwrap();
    assert!(Rotating::rotated(&path, 1).exists());
    assert!(Rotating::rotated(&path, 2).exists());
    assert!(!Rotating::rotated(&path, 3).exists());
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&path).len(), 301);
    let newest = read(&Rotating::rotated(&path, 1));
    let older = read(&Rotating::rotated(&path, 2));
    for text in [&newest, &older] {
        assert!(text.len() <= 200, "{}", text.len());
        assert!(text.ends_with('\n'));
    }
    // The kept lines are the most recent ones, in order, oldest file first.
    let numbers: Vec<u32> = format!("{older}{newest}")
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["n"]
                .as_u64()
                .unwrap() as u32
        })
        .collect();
    assert_eq!(numbers.last(), Some(&29));
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    // Reopening appends and counts what is there.
    drop(file);
    let mut again = Rotating::open(path.clone(), 200, 2).unwrap();
    again.write_all(b"{\"n\":999}\n").unwrap();
    again.flush().unwrap();
    assert!(read(&Rotating::rotated(&path, 1)).starts_with("yyy"));
}

/// A sink that blocks its first write until the test opens the gate.
#[derive(Clone)]
struct Gated {
    open: Arc<(Mutex<bool>, Condvar)>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl Write for Gated {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (lock, opened) = &*self.open;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
        self.written.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let sink = Gated {
        open: Arc::new((Mutex::new(false), Condvar::new())),
        written: Arc::new(Mutex::new(Vec::new())),
    };
    let dropped = dropped_counter();
    let log = DecisionLog::with_sink(Box::new(sink.clone()), 2, dropped.clone()).unwrap();
    // The writer holds at most one record while blocked; the queue holds two.
    for _ in 0..10 {
        log.record(record(None, Vec::new()));
    }
    let full = dropped.with_label_values(&["queue_full"]).get();
    assert!(full >= 7, "dropped {full}");
    {
        let (lock, opened) = &*sink.open;
        *lock.lock().unwrap() = true;
        opened.notify_all();
    }
    assert!(log.flush(Duration::from_secs(10)));
    let written = sink.written.lock().unwrap().clone();
    let lines = written
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64;
    assert_eq!(lines + full, 10);
    assert_eq!(dropped.with_label_values(&["write_error"]).get(), 0);
}
