use std::sync::{Arc, Condvar};

use super::*;

fn pending(request: &Value, response: &Value) -> Pending {
    Pending {
        request: Bytes::from(serde_json::to_vec(request).unwrap()),
        response: Bytes::from(serde_json::to_vec(response).unwrap()),
        provider: None,
    }
}

fn world() -> Pending {
    pending(
        &serde_json::json!({"model": "m", "state": {"case": "a\nb"}, "questions": {"q": {"type": "choice", "criteria": {"A": null, "B": null}}}}),
        &serde_json::json!({"model": "m", "answers": {"q": {"type": "choice", "choice": "A", "probabilities": {"A": 0.7, "B": 0.3}, "confidence": 0.4}}}),
    )
}

fn settings(dir: &std::path::Path, extra: &str) -> Settings {
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n\
         capture = {{ path = \"{}\", sample_rate = 1{extra} }}\n\
         [contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n",
        dir.join("captured.jsonl").display()
    );
    let config = crate::load::from_toml(&text).unwrap();
    config.captures()["c"].clone()
}

#[cfg(feature = "simulated")]
#[test]
fn a_captured_world_is_one_line_the_worlds_reader_reads_without_labels() {
    let item = Item {
        request_id: "rg-0123456789abcdef".into(),
        time: SystemTime::UNIX_EPOCH,
        pending: world(),
    };
    let line = world_line("loans", &item).unwrap();
    assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
    let worlds = releasegate_sim::worlds::read_all(line.as_slice()).unwrap();
    let [world] = worlds.as_slice() else {
        panic!("{worlds:?}")
    };
    assert_eq!(world.world_id, "loans-rg-0123456789abcdef");
    assert_eq!(world.pair_id, world.world_id);
    assert_eq!(world.split, releasegate_sim::worlds::Split::Train);
    assert_eq!(world.domain, "loans");
    assert!(world.labels.is_none());
    assert_eq!(world.request["state"]["case"], "a\nb");
    assert_eq!(world.response["answers"]["q"]["probabilities"]["B"], 0.3);
    assert_eq!(world.extra["captured_at"], "1970-01-01T00:00:00.000Z");
}

#[test]
fn a_body_that_is_not_json_is_never_written() {
    let item = Item {
        request_id: "rg-1".into(),
        time: SystemTime::UNIX_EPOCH,
        pending: Pending {
            request: Bytes::from_static(b"{}"),
            response: Bytes::from_static(b"not json"),
            provider: None,
        },
    };
    assert!(world_line("c", &item).is_none());
}

#[test]
fn the_sample_follows_the_rate() {
    let metrics = Metrics::new().unwrap();
    let capture = Capture::with_sink("c", 0.25, 8, Box::new(io::sink()), &metrics).unwrap();
    let kept = (0..8000).filter(|_| capture.sample()).count();
    // 2000 expected, standard deviation about 39.
    assert!((1700..2300).contains(&kept), "{kept}");
    let every = Capture::with_sink("c", 1.0, 8, Box::new(io::sink()), &metrics).unwrap();
    assert!((0..100).all(|_| every.sample()));
}

/// A sink that blocks every write until released.
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (open, ready) = &*self.0;
        let mut open = open.lock().unwrap();
        while !*open {
            open = ready.wait(open).unwrap();
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    let metrics = Metrics::new().unwrap();
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let capture = Capture::with_sink("c", 1.0, 2, Box::new(Gate(gate.clone())), &metrics).unwrap();
    // The writer takes one world and blocks on it; two more fill the queue; the rest drop.
    for n in 0..10 {
        capture.offer(format!("rg-{n}"), world());
    }
    let dropped = metrics
        .capture_dropped
        .with_label_values(&["c", "queue_full"])
        .get();
    assert!((7..=8).contains(&dropped), "{dropped}");
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert!(capture.flush(Duration::from_secs(10)));
    let written = metrics.captured.with_label_values(&["c"]).get();
    assert_eq!(written + dropped, 10);
}

#[cfg(unix)]
#[test]
fn the_file_is_private_and_rotated_by_size() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("captured.jsonl");
    // A file that existed with a wider mode is narrowed.
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let metrics = Metrics::new().unwrap();
    let capture = Capture::start(
        "c",
        &settings(dir.path(), ", max_bytes = 4096, max_files = 2"),
        &metrics,
    )
    .unwrap();
    for n in 0..40 {
        capture.offer(format!("rg-{n}"), world());
    }
    assert!(capture.flush(Duration::from_secs(10)));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    let rotated = Rotating::rotated(&path, 1);
    assert!(
        rotated.exists(),
        "40 worlds of ~300 bytes exceed 4096 bytes"
    );
    assert_eq!(mode(&rotated), 0o600);
    assert!(std::fs::metadata(&path).unwrap().len() <= 4096);
    let lines: usize = [path.clone(), rotated, Rotating::rotated(&path, 2)]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| text.lines().count())
        .sum();
    assert!(lines > 0 && lines <= 40);
    assert_eq!(metrics.captured.with_label_values(&["c"]).get(), 40);
}

#[test]
fn a_world_names_the_provider_that_answered_when_there_are_several() {
    let mut pending = world();
    pending.provider = Some("backup".into());
    let item = Item {
        request_id: "rg-2".into(),
        time: SystemTime::UNIX_EPOCH,
        pending,
    };
    let line = world_line("c", &item).unwrap();
    let world: releasegate_sim::worlds::World = serde_json::from_slice(&line).unwrap();
    assert_eq!(world.provider.as_deref(), Some("backup"));
}
