//! `portmap` at scale: the cost of ADD and DEL does not grow with the number of
//! containers, and after DEL nothing of theirs is left. The plugin only needs container
//! addresses, so it gets a made-up prevResult instead of real interfaces. (Alone in its
//! test binary so that no sibling test competes for the CPU while it measures.)

mod common;
mod portmap_support;

use cni_testkit::ns::TestNetns;
use common::{call, ok};
use portmap_support::{conf, per_container_parts, prev_result, ruleset};
use serde_json::json;
use std::time::{Duration, Instant};

const PREFIX: &str = "cnm";

/// The lower quartile: what an operation costs when the machine is not busy with other
/// work (the tests of other suites run in parallel), so one load spike cannot fail the
/// comparison, while a real growth moves every sample and still does.
fn lower_quartile(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 4]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Timings {
    adds: Vec<Duration>,
    dels: Vec<Duration>,
}

impl Timings {
    /// (ADD first 20, ADD last 20, DEL first 20, DEL last 20).
    fn windows(&self) -> [Duration; 4] {
        let n = self.adds.len();
        [
            lower_quartile(&self.adds[..20]),
            lower_quartile(&self.adds[n - 20..]),
            lower_quartile(&self.dels[..20]),
            lower_quartile(&self.dels[n - 20..]),
        ]
    }

    fn flat(&self) -> bool {
        let [add_first, add_last, del_first, del_last] = self.windows();
        add_last.as_secs_f64() <= 1.5 * add_first.as_secs_f64()
            && del_last.as_secs_f64() <= 1.5 * del_first.as_secs_f64()
    }
}

/// ADDs then DELs `n` containers, each with one mapping, checking what is left after each
/// phase.
fn add_and_delete(host: &TestNetns, ctr: &TestNetns, n: usize) -> Timings {
    let run = |command: &str, i: usize| {
        let address = format!("10.201.{}.{}/16", i / 200, i % 200 + 2);
        let c = conf("1.0.0", 20000 + i as u16, Some(prev_result(ctr, &address)));
        let started = Instant::now();
        ok(call("portmap", command, host, Some(ctr), &c).container_id(&format!("ctr-{i}")).run());
        started.elapsed()
    };
    let adds: Vec<Duration> = (0..n).map(|i| run("ADD", i)).collect();
    assert_eq!(per_container_parts(host), (n, n));
    let dels: Vec<Duration> = (0..n).map(|i| run("DEL", i)).collect();
    assert_eq!(per_container_parts(host), (0, 0), "per-container rules or elements remain");
    Timings { adds, dels }
}

#[test]
fn two_hundred_containers_cost_the_same_and_leave_nothing_behind() {
    const N: usize = 200;
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    let before = ruleset(&host);

    // A second round only if the first one looked slow: a busy machine can make a window
    // slow once; a cost that grows with the number of containers does so every time.
    let mut timings = add_and_delete(&host, &ctr, N);
    if !timings.flat() {
        timings = add_and_delete(&host, &ctr, N);
    }
    let [add_first, add_last, del_first, del_last] = timings.windows();
    eprintln!(
        "portmap timing (lower quartile, process run included): ADD first20 {:.2} ms, last20 {:.2} ms; \
         DEL first20 {:.2} ms, last20 {:.2} ms",
        ms(add_first),
        ms(add_last),
        ms(del_first),
        ms(del_last)
    );
    assert!(
        add_last.as_secs_f64() <= 1.5 * add_first.as_secs_f64(),
        "ADD slows down: {add_first:?} -> {add_last:?}"
    );
    assert!(
        del_last.as_secs_f64() <= 1.5 * del_first.as_secs_f64(),
        "DEL slows down: {del_first:?} -> {del_last:?}"
    );

    let gc =
        json!({"cniVersion": "1.1.0", "name": "pmscale", "type": "portmap", "cni.dev/valid-attachments": []});
    ok(call("portmap", "GC", &host, None, &gc).run());
    assert_eq!(ruleset(&host), before);
}
