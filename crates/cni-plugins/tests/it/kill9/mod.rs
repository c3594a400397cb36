//! `kill -9` at points of ADD and of DEL, for every plugin on its own or after bridge
//! (nothing lost, nothing leaked): bridge, ptp, macvlan and tap with host-local;
//! portmap, firewall, tuning, bandwidth and sbr chained after bridge + host-local.
//!
//! Each case runs the operation of the plugin under test ("the victim") in a process
//! group of its own and kills the group (the plugin, its IPAM plugin, its detached
//! helpers) with SIGKILL at a chosen moment. Then it does what a runtime does next: after
//! a killed ADD, DEL of the whole chain in reverse without prevResult (nothing was
//! cached); after a killed DEL, DEL of the whole chain again with the result; then GC of
//! every plugin with an empty valid set. Every DEL and GC must succeed, and the lab must
//! come back to its baseline: links, addresses, routes, rules and the nftables ruleset of
//! the host and the container (by `ip -j`, `nft -j`), the sysctl tuning changes, and
//! every file under the state directory (host-local's reservations, tuning's records).
//!
//! The moments are systematic rather than lucky: the suite first times the victim's
//! operation (the median of three unkilled runs, from exec to exit), then kills at one
//! moment drawn in each of `KS_KILL9_POINTS` (default 6) equal slices of that span, for
//! ADD and for DEL. A seeded generator draws them; the seed is printed and
//! `KS_KILL9_SEED=<seed>` repeats the draw (the timing of the machine still varies, which
//! is why the sweep is stratified: every part of the operation is hit on every run). The
//! operation a point lands beyond completes, and the case is checked all the same.
//! Also host-device (a veth end of the host namespace, which must come back with its
//! name, MTU and up state), bridge with static IPAM, and loopback. Figures: 12 plugins x
//! 2 verbs x 6 points = 144 killed runs in CI; e.g. `KS_KILL9_POINTS=50` by hand for 1,200.

mod chain;
pub(crate) mod support;

use cni_testkit::kill::{count_from_env, sweep, KillOutcome, SeededRng};
use std::collections::BTreeSet;
use std::time::Duration;
use support::*;

const SEED_VAR: &str = "KS_KILL9_SEED";
const POINTS_VAR: &str = "KS_KILL9_POINTS";
const DEFAULT_POINTS: usize = 6;
/// Unkilled runs timed to place the sweep.
const TIMING_RUNS: usize = 3;
/// A moment no operation reaches: the run is not killed.
const NEVER: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Verb {
    Add,
    Del,
}

struct Suite {
    lab: Lab,
    chain: Vec<Step>,
    baseline: BTreeSet<String>,
    next: usize,
}

impl Suite {
    /// The lab with `chain`, after one ADD+DEL+GC made what lives as long as the network
    /// (the bridge, nftables tables and chains, host-local's lock and index).
    fn new(chain: impl FnOnce(&Lab) -> Vec<Step>) -> Suite {
        let lab = Lab::new(1);
        let chain = chain(&lab);
        let mut suite = Suite { lab, chain, baseline: BTreeSet::new(), next: 0 };
        let warm = suite.attachment();
        let result = warm.add_upto(&suite.lab, &suite.chain, suite.chain.len());
        warm.del_all(&suite.lab, &suite.chain, result.as_ref());
        gc_all(&suite.lab, &suite.chain, &[]);
        suite.baseline = suite.lab.settled_snapshot();
        suite
    }

    fn attachment(&mut self) -> Attachment {
        self.next += 1;
        Attachment { id: format!("ks-{}", self.next), container: 0 }
    }

    /// One case: `verb` of the chain's last plugin killed `after` its start, then DEL(s)
    /// and GC as a runtime does, then the lab must come back to the baseline.
    fn case(&mut self, verb: Verb, after: Duration, seed: u64) -> KillOutcome {
        let att = self.attachment();
        let (lab, chain) = (&self.lab, &self.chain);
        let victim = chain.len() - 1;
        let outcome = match verb {
            Verb::Add => {
                let prev = att.add_upto(lab, chain, victim);
                let outcome = att.call(lab, &chain[victim], "ADD", prev.as_ref()).run_killed_after(after);
                check_ending(&outcome);
                // A runtime DELs a failed ADD with nothing cached, a completed one with its result.
                let result = outcome.completed().then(|| serde_json::from_str(&outcome.stdout).unwrap());
                att.del_all(lab, chain, result.as_ref());
                outcome
            }
            Verb::Del => {
                let result = att.add_upto(lab, chain, chain.len());
                let outcome = att.call(lab, &chain[victim], "DEL", result.as_ref()).run_killed_after(after);
                check_ending(&outcome);
                // The runtime's DEL failed: it retries the whole chain with the cached result.
                att.del_all(lab, chain, result.as_ref());
                outcome
            }
        };
        gc_all(lab, chain, &[]);
        let plugin = chain[victim].plugin;
        lab.assert_back_to(
            &format!("{verb:?} of {plugin} killed after {after:?} ({}; {SEED_VAR}={seed})", ending(&outcome)),
            &self.baseline,
        );
        outcome
    }
}

/// A killed run or one that completed: nothing else (a plugin error would be a bug).
fn check_ending(outcome: &KillOutcome) {
    assert!(outcome.killed || outcome.completed(), "the run neither completed nor was killed: {outcome:?}");
}

fn ending(outcome: &KillOutcome) -> &'static str {
    if outcome.killed {
        "killed"
    } else {
        "completed first"
    }
}

/// Times the victim's `verb`, then kills it at a sweep of moments over that span; returns
/// how many runs were killed and how many completed before their moment.
fn sweep_verb(suite: &mut Suite, verb: Verb, rng: &mut SeededRng, seed: u64) -> (usize, usize) {
    let mut timings: Vec<Duration> =
        (0..TIMING_RUNS).map(|_| suite.case(verb, NEVER, seed).elapsed).collect();
    timings.sort();
    let span = timings[TIMING_RUNS / 2];
    let points = count_from_env(POINTS_VAR, DEFAULT_POINTS);
    let (mut killed, mut completed) = (0, 0);
    for after in sweep(rng, span, points) {
        if suite.case(verb, after, seed).killed {
            killed += 1;
        } else {
            completed += 1;
        }
    }
    println!(
        "{verb:?}: took {span:?} unkilled; {points} points: {killed} killed, {completed} completed first"
    );
    (killed, completed)
}

fn kill_suite(chain: impl FnOnce(&Lab) -> Vec<Step>) {
    let (mut rng, seed) = SeededRng::from_env(SEED_VAR);
    let mut suite = Suite::new(chain);
    for verb in [Verb::Add, Verb::Del] {
        let (killed, _) = sweep_verb(&mut suite, verb, &mut rng, seed);
        // Moments drawn over the operation's own span kill most runs; none killed would
        // mean the suite tested nothing.
        assert!(killed > 0, "{verb:?}: no run was killed");
    }
}

#[test]
fn bridge_with_host_local() {
    kill_suite(|lab| vec![bridge(lab)]);
}

#[test]
fn ptp_with_host_local() {
    kill_suite(|lab| vec![ptp(lab)]);
}

#[test]
fn macvlan_with_host_local() {
    kill_suite(|lab| vec![macvlan(lab)]);
}

#[test]
fn tap_with_host_local() {
    kill_suite(|lab| vec![tap(lab)]);
}

#[test]
fn portmap_after_bridge() {
    kill_suite(|lab| vec![bridge(lab), portmap(18080)]);
}

#[test]
fn firewall_after_bridge() {
    kill_suite(|lab| vec![bridge(lab), firewall()]);
}

#[test]
fn tuning_after_bridge() {
    kill_suite(|lab| vec![bridge(lab), tuning(lab)]);
}

#[test]
fn bandwidth_after_bridge() {
    kill_suite(|lab| vec![bridge(lab), bandwidth()]);
}

#[test]
fn sbr_after_bridge() {
    kill_suite(|lab| vec![bridge(lab), sbr()]);
}

#[test]
fn host_device_with_host_local() {
    kill_suite(|lab| vec![host_device(lab)]);
}

#[test]
fn static_with_bridge() {
    kill_suite(|_| vec![bridge_static()]);
}

#[test]
fn loopback_alone() {
    kill_suite(|_| vec![loopback()]);
}
