//! Metric families counted per thread and gathered as one.
//!
//! A Prometheus counter or histogram is a few atomics that every thread counting in it
//! writes. The event loops count every request and answer in the same series (one per
//! contract and question), so each count moved those atomics' cache line from one core
//! to the other: on eight WCPQ answers a request, about an eighth of the proxy's CPU
//! (`docs/benchmarks.md`), none of it in its instruction count. A [`Sharded`] family keeps
//! [`SHARDS`] unregistered copies of the family; a thread counts in the copy of its
//! shard ([`shard`]: threads take the shards in turn as they first count), and gathering
//! the family adds the copies' samples up, series by series. The exposition is the same
//! family with the same series and values (a histogram's sum added up in another order).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::Error;

/// Copies of each sharded family: more than the event loops of most machines, so that
/// two loops rarely share one.
pub(crate) const SHARDS: usize = 8;

/// This thread's shard, taken in turn the first time it counts.
pub(crate) fn shard() -> usize {
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|shard| {
        let mut at = shard.get();
        if at == usize::MAX {
            at = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            shard.set(at);
        }
        at
    })
}

/// One value per shard, the current thread's at [`PerShard::here`].
#[derive(Debug)]
pub(crate) struct PerShard<T>([T; SHARDS]);

impl<T> PerShard<T> {
    /// `make(shard)` for each shard.
    pub(crate) fn new(make: impl FnMut(usize) -> T) -> PerShard<T> {
        PerShard(std::array::from_fn(make))
    }

    /// The current thread's.
    pub(crate) fn here(&self) -> &T {
        // `shard()` is below `SHARDS`.
        &self.0[shard() % SHARDS]
    }
}

impl<T: Default> Default for PerShard<T> {
    fn default() -> PerShard<T> {
        PerShard::new(|_| T::default())
    }
}

/// A metric family (an `IntCounterVec` or a `HistogramVec`) as one copy per shard.
#[derive(Debug, Clone)]
pub(crate) struct Sharded<V> {
    shards: Arc<PerShard<V>>,
}

impl<V> Sharded<V> {
    /// The family made by `make` for each shard (unregistered: register the result).
    pub(crate) fn new(mut make: impl FnMut() -> Result<V, Error>) -> Result<Sharded<V>, Error> {
        let mut made = Vec::with_capacity(SHARDS);
        for _ in 0..SHARDS {
            made.push(make()?);
        }
        let shards: [V; SHARDS] = made
            .try_into()
            .map_err(|_| Error::Msg("one copy per shard".to_string()))?;
        Ok(Sharded {
            shards: Arc::new(PerShard(shards)),
        })
    }

    /// The current thread's copy, to count in.
    pub(crate) fn here(&self) -> &V {
        self.shards.here()
    }

    /// Every shard's copy, in shard order.
    pub(crate) fn each(&self) -> impl Iterator<Item = &V> {
        self.shards.0.iter()
    }
}

impl<V: Collector> Collector for Sharded<V> {
    fn desc(&self) -> Vec<&Desc> {
        self.shards.0[0].desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families: Vec<MetricFamily> = Vec::new();
        // Per family, its series by label pairs: their index in its metrics.
        let mut series: Vec<HashMap<Vec<(String, String)>, usize>> = Vec::new();
        for family in self.shards.0.iter().flat_map(Collector::collect) {
            let at = match families.iter().position(|f| f.name() == family.name()) {
                Some(at) => at,
                None => {
                    let mut empty = family.clone();
                    empty.take_metric();
                    families.push(empty);
                    series.push(HashMap::new());
                    families.len() - 1
                }
            };
            let kind = family.get_field_type();
            let mut family = family;
            for metric in family.take_metric() {
                let key: Vec<(String, String)> = metric
                    .get_label()
                    .iter()
                    .map(|pair| (pair.name().to_string(), pair.value().to_string()))
                    .collect();
                let into = &mut families[at];
                match series[at].get(&key) {
                    Some(&index) => add(kind, &mut into.mut_metric()[index], &metric),
                    None => {
                        series[at].insert(key, into.get_metric().len());
                        into.mut_metric().push(metric);
                    }
                }
            }
        }
        families
    }
}

/// Adds `from`'s samples to `into`'s (the same series of a family of `kind`).
fn add(kind: MetricType, into: &mut Metric, from: &Metric) {
    match kind {
        MetricType::COUNTER => {
            let mut counter = into.get_counter().clone();
            counter.set_value(counter.get_value() + from.get_counter().get_value());
            into.set_counter(counter);
        }
        MetricType::HISTOGRAM => {
            let mut histogram = into.get_histogram().clone();
            let other = from.get_histogram();
            histogram.set_sample_count(histogram.get_sample_count() + other.get_sample_count());
            histogram.set_sample_sum(histogram.get_sample_sum() + other.get_sample_sum());
            let mut buckets = histogram.get_bucket().to_vec();
            for (bucket, more) in buckets.iter_mut().zip(other.get_bucket()) {
                bucket.set_cumulative_count(bucket.cumulative_count() + more.cumulative_count());
            }
            histogram.set_bucket(buckets);
            into.set_histogram(histogram);
        }
        // Only counters and histograms are sharded.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

    use super::*;

    fn render(registry: &Registry) -> String {
        let mut out = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Counting from several threads (so in several shards) renders as one family
    /// counted in one place: the same series, the counts added up.
    #[test]
    fn a_sharded_family_renders_as_one_family_counted_in_one_place() {
        let sharded = Registry::new();
        let counters =
            Sharded::new(|| IntCounterVec::new(Opts::new("c_total", "c"), &["q"])).unwrap();
        let histograms = Sharded::new(|| {
            HistogramVec::new(
                HistogramOpts::new("h_seconds", "h").buckets(vec![0.5, 1.0]),
                &["q"],
            )
        })
        .unwrap();
        sharded.register(Box::new(counters.clone())).unwrap();
        sharded.register(Box::new(histograms.clone())).unwrap();
        let plain = Registry::new();
        let one = IntCounterVec::new(Opts::new("c_total", "c"), &["q"]).unwrap();
        let other = HistogramVec::new(
            HistogramOpts::new("h_seconds", "h").buckets(vec![0.5, 1.0]),
            &["q"],
        )
        .unwrap();
        plain.register(Box::new(one.clone())).unwrap();
        plain.register(Box::new(other.clone())).unwrap();
        // A series created in one shard only, at zero, still shows.
        counters.each().next().unwrap().with_label_values(&["zero"]);
        one.with_label_values(&["zero"]);
        std::thread::scope(|scope| {
            for t in 0..(SHARDS + 3) {
                let (counters, histograms) = (&counters, &histograms);
                scope.spawn(move || {
                    for i in 0..=t {
                        let q = if i % 2 == 0 { "even" } else { "odd" };
                        counters.here().with_label_values(&[q]).inc();
                        histograms
                            .here()
                            .with_label_values(&[q])
                            .observe(0.25 * i as f64);
                    }
                });
            }
        });
        for t in 0..(SHARDS + 3) {
            for i in 0..=t {
                let q = if i % 2 == 0 { "even" } else { "odd" };
                one.with_label_values(&[q]).inc();
                other.with_label_values(&[q]).observe(0.25 * i as f64);
            }
        }
        assert_eq!(render(&sharded), render(&plain));
        assert!(render(&sharded).contains("c_total{q=\"zero\"} 0"));
    }
}
