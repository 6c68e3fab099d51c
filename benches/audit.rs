//! Timing of the full leakage audit on a synthetic paper-sized run
//! (1,440 worlds, three domains, seven release views, three workflows).
//! Run with `cargo bench --bench audit`; prints elapsed wall time.
//! `AUDIT_THREADS=n` sets the fitting threads (default: all cores) and
//! `AUDIT_SVG=path` also writes the privacy-utility SVG.

use std::time::Instant;

use releasegate_lab::audit::{self, synthetic};

fn main() {
    let threads: usize = std::env::var("AUDIT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let input = synthetic::paper_sized(7, 0.8);
    let config = audit::Config {
        threads,
        ..audit::Config::default()
    };
    let start = Instant::now();
    let report = match audit::run(&input, &config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("audit failed: {error}");
            std::process::exit(1);
        }
    };
    let elapsed = start.elapsed();
    print!("{}", report.to_text());
    if let Ok(path) = std::env::var("AUDIT_SVG")
        && let Err(error) = std::fs::write(&path, audit::svg::render(&report))
    {
        eprintln!("cannot write {path}: {error}");
    }
    let worlds: usize = input.releases.first().map_or(0, |r| r.examples.len());
    println!(
        "audit of {} releases x {} worlds: {:.2} s (threads setting {})",
        input.releases.len(),
        worlds,
        elapsed.as_secs_f64(),
        threads
    );
}
