//! The clocks of the deadlines counted in seconds (a connection's header and idle
//! deadlines, a pooled connection's idle time, a circuit's windows, a body's read
//! deadline) and of the `date` line: the kernel's coarse clocks, which read the time of
//! its last tick (a few milliseconds behind) without reading the processor's
//! counter. A request reads such a clock about ten times; the precise clock
//! (`Instant::now`) cost about 25 ns a read on the machines of `docs/benchmarks.md`, a
//! coarse one about 6 ns.
//!
//! What a request's latency, its upstream wait and a mapping's duration measure stays
//! on a precise clock (the first and the last on `releasegate_core::timing`'s, the
//! processor's time-stamp counter): only deadlines of seconds read these.

use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

/// The instant at which the kernel's monotonic clock read zero, and how far from it
/// this value may be: the clock read between two readings of `Instant::now` (the same
/// clock), the closest of a few such pairs kept. A coarse reading is then an `Instant`
/// by its distance from zero.
#[cfg(target_os = "linux")]
static ZERO: LazyLock<Option<(Instant, Duration)>> = LazyLock::new(|| {
    let mut best: Option<(Instant, Duration)> = None;
    for _ in 0..8 {
        let before = Instant::now();
        let reading = monotonic(rustix::time::ClockId::Monotonic);
        let gap = before.elapsed();
        if let Some(zero) = before.checked_sub(reading)
            && best.is_none_or(|(_, error)| gap < error)
        {
            best = Some((zero, gap));
        }
        if best.is_some_and(|(_, error)| error < Duration::from_micros(50)) {
            break;
        }
    }
    best
});

/// Now, on the coarse clock: behind `Instant::now()` by about a tick of the kernel's
/// clock (its resolution; more when the tick itself is late) plus [`ZERO`]'s error, never
/// ahead of it, and never earlier than an earlier reading.
#[cfg(target_os = "linux")]
pub(crate) fn coarse() -> Instant {
    match *ZERO {
        Some((zero, _)) => zero + monotonic(rustix::time::ClockId::MonotonicCoarse),
        None => Instant::now(),
    }
}

/// [`coarse`] elsewhere: the precise clock.
#[cfg(not(target_os = "linux"))]
pub(crate) fn coarse() -> Instant {
    Instant::now()
}

/// [`coarse`] as tokio's instant (for its timers' deadlines).
pub(crate) fn coarse_tokio() -> tokio::time::Instant {
    tokio::time::Instant::from_std(coarse())
}

/// The wall clock as of the kernel's last tick (for the `date` line, in whole seconds).
#[cfg(target_os = "linux")]
pub(crate) fn coarse_system() -> SystemTime {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    match (u64::try_from(now.tv_sec), u32::try_from(now.tv_nsec)) {
        (Ok(seconds), Ok(nanos)) => SystemTime::UNIX_EPOCH + Duration::new(seconds, nanos),
        _ => SystemTime::now(),
    }
}

/// [`coarse_system`] elsewhere: the precise wall clock.
#[cfg(not(target_os = "linux"))]
pub(crate) fn coarse_system() -> SystemTime {
    SystemTime::now()
}

/// A monotonic clock's reading as the time since its zero.
#[cfg(target_os = "linux")]
fn monotonic(clock: rustix::time::ClockId) -> Duration {
    let now = rustix::time::clock_gettime(clock);
    match (u64::try_from(now.tv_sec), u32::try_from(now.tv_nsec)) {
        (Ok(seconds), Ok(nanos)) => Duration::new(seconds, nanos),
        _ => Duration::ZERO,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The coarse clock's resolution (the kernel's tick).
    fn tick() -> Duration {
        let res = rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse);
        Duration::new(
            u64::try_from(res.tv_sec).unwrap_or(0),
            u32::try_from(res.tv_nsec).unwrap_or(0),
        )
    }

    /// Far more than any tick is late.
    const LATE: Duration = Duration::from_secs(1);

    #[test]
    fn a_coarse_reading_lies_between_the_precise_ones_around_it_less_a_tick() {
        let (_, error) = ZERO.expect("the monotonic clock's zero");
        // Bracketing readings, not durations: however long the thread waits between
        // them, the coarse reading falls between `before` less a tick and `after`.
        let slack = error + Duration::from_micros(1);
        let mut last = coarse();
        for _ in 0..2_000 {
            let before = Instant::now();
            let now = coarse();
            let after = Instant::now();
            assert!(now >= last, "the coarse clock went back");
            assert!(now <= after + slack, "{now:?} after {after:?}");
            // Behind by about a tick (more when the kernel's tick is late, as in a busy
            // virtual machine): a second would be a fault of this clock, not lateness.
            assert!(now + tick() + LATE >= before, "{now:?} before {before:?}");
            last = now;
        }
    }

    #[test]
    fn the_coarse_wall_clock_is_within_a_tick_of_the_precise_one() {
        let before = SystemTime::now();
        let now = coarse_system();
        let after = SystemTime::now();
        assert!(
            now <= after && now + tick() + LATE >= before,
            "{now:?} not in {before:?}..{after:?}"
        );
    }
}
