//! Latency samples and their summary (median, p90, p99, throughput).

use serde_json::{json, Value};
use std::time::Duration;

/// The timings of one operation (e.g. "ADD") of one plugin set, pooled over rounds.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Latency of each call.
    pub samples: Vec<Duration>,
    /// Wall-clock time of the phases the calls ran in (with parallel workers this is less
    /// than the sum of the samples); throughput = calls / wall.
    pub wall: Duration,
}

impl Timings {
    pub fn add_phase(&mut self, samples: impl IntoIterator<Item = Duration>, wall: Duration) {
        self.samples.extend(samples);
        self.wall += wall;
    }

    pub fn summary(&self) -> Option<Summary> {
        Summary::of(&self.samples, self.wall)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "summary": self.summary().map(|s| s.to_json()),
            "wall_ms": millis(self.wall),
            "samples_us": self.samples.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
        })
    }
}

/// Order statistics of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub min: Duration,
    pub max: Duration,
    pub mean: Duration,
    /// Calls per second of wall time.
    pub throughput: f64,
}

impl Summary {
    pub fn of(samples: &[Duration], wall: Duration) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort();
        let total: Duration = sorted.iter().sum();
        let wall = if wall.is_zero() { total } else { wall };
        Some(Summary {
            count: sorted.len(),
            median: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            mean: total / sorted.len() as u32,
            throughput: sorted.len() as f64 / wall.as_secs_f64().max(f64::MIN_POSITIVE),
        })
    }

    pub fn to_json(self) -> Value {
        json!({
            "count": self.count,
            "median_ms": millis(self.median),
            "p90_ms": millis(self.p90),
            "p99_ms": millis(self.p99),
            "min_ms": millis(self.min),
            "max_ms": millis(self.max),
            "mean_ms": millis(self.mean),
            "throughput_per_s": self.throughput,
        })
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], pct: f64) -> Duration {
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of some samples (used for sub-ranges such as "the first 20 ADDs").
pub fn median(samples: &[Duration]) -> Option<Duration> {
    Summary::of(samples, Duration::ZERO).map(|s| s.median)
}

/// A duration for a table cell: µs below 1 ms, ms below 10 s.
pub fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.1} s", us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples = ms(&(1..=100).collect::<Vec<_>>());
        let s = Summary::of(&samples, Duration::from_secs(2)).unwrap();
        assert_eq!(s.median, Duration::from_millis(50));
        assert_eq!(s.p90, Duration::from_millis(90));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert!((s.throughput - 50.0).abs() < 1e-9);
    }

    #[test]
    fn unsorted_input_and_single_sample() {
        let s = Summary::of(&ms(&[30, 10, 20]), Duration::ZERO).unwrap();
        assert_eq!((s.min, s.median, s.max), (ms(&[10])[0], ms(&[20])[0], ms(&[30])[0]));
        // Without a wall time, throughput is over the sum of the samples.
        assert!((s.throughput - 50.0).abs() < 1e-9);
        assert_eq!(Summary::of(&ms(&[7]), Duration::ZERO).unwrap().p99, Duration::from_millis(7));
        assert!(Summary::of(&[], Duration::ZERO).is_none());
    }

    #[test]
    fn human_units() {
        assert_eq!(human(Duration::from_micros(950)), "950 µs");
        assert_eq!(human(Duration::from_micros(2500)), "2.50 ms");
        assert_eq!(human(Duration::from_secs(12)), "12.0 s");
    }
}
