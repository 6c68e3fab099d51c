//! The clock of the durations the proxy reports per request and per answer (a request's
//! latency and overhead, a WCPQ mapping's time): the processor's time-stamp counter
//! scaled to nanoseconds (`quanta`), where the processor says it is invariant, else the
//! kernel's monotonic clock. A reading costs about half of `std::time::Instant::now`'s
//! on the machines of `docs/benchmarks.md`, and an eight-question request reads it
//! about twenty times. Timing never changes a release.

use std::sync::LazyLock;

pub use quanta::Instant;

/// The clock, calibrated against the kernel's once (up to about 200 ms): [`warm`] does it
/// before a server takes requests.
static CLOCK: LazyLock<quanta::Clock> = LazyLock::new(quanta::Clock::new);

/// Now.
#[inline]
pub fn now() -> Instant {
    CLOCK.now()
}

/// The time since `earlier` (zero if the clock went backwards).
#[inline]
pub fn since(earlier: Instant) -> std::time::Duration {
    now().saturating_duration_since(earlier)
}

/// Calibrates the clock now rather than at the first reading.
pub fn warm() {
    LazyLock::force(&CLOCK);
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant as Kernel};

    #[test]
    fn a_duration_is_measured_on_the_kernels_scale() {
        super::warm();
        let nap = Duration::from_millis(20);
        // The counter's interval holds the kernel's: it is at least as long, less the
        // calibration's error (a few parts in a thousand; a tenth allowed).
        let started = super::now();
        let kernel = Kernel::now();
        std::thread::sleep(nap);
        let inner = kernel.elapsed();
        let outer = super::since(started);
        assert!(
            outer.as_secs_f64() >= inner.as_secs_f64() * 0.9,
            "{outer:?} < {inner:?}"
        );
        // And the kernel's interval holds the counter's.
        let kernel = Kernel::now();
        let started = super::now();
        std::thread::sleep(nap);
        let inner = super::since(started);
        let outer = kernel.elapsed();
        assert!(inner >= nap.mul_f64(0.9), "{inner:?}");
        assert!(
            inner.as_secs_f64() <= outer.as_secs_f64() * 1.1,
            "{inner:?} > {outer:?}"
        );
    }
}
