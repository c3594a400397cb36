//! GC restores a clean host: random interleavings of ADD, DEL,
//! `kill -9` during ADD or DEL, and container restarts, across two networks —
//! bridge + host-local, portmap, firewall, tuning, bandwidth (`ksnet`) and ptp +
//! host-local, sbr (`ksnet2`) — then GC of every plugin with the valid set = the
//! attachments still alive. After it the lab must hold exactly the baseline plus the
//! alive attachments' state: every line (link, address, route, rule, nftables object or
//! element, sysctl, state file; see `kill9_support::host_state`) an alive attachment's
//! ADD added, none it removed, and nothing else.
//!
//! The model: each container namespace is a slot of one network. ADD runs the whole
//! chain in the slot, with a new container ID. Its effect is recorded as the difference
//! of the lab's state around it (the lines it added and removed). DEL runs the chain in
//! reverse with the result. A killed ADD or DEL kills one plugin of the chain (picked at
//! random) at a random moment of its measured duration, and the runtime then discards the
//! sandbox: the slot's namespace is replaced by a fresh one and what was left on the host
//! is GC's to remove. A restart is a container restart: DEL, then ADD of the same ID.
//! One "anchor" attachment per network stays alive throughout, so the tables shared by
//! all attachments exist from the baseline on (GC drops them with the last attachment).
//!
//! Rounds: `KS_GC_ROUNDS` (default 3) rounds of `KS_GC_OPS` (default 8) operations, each
//! round ended by GC and the check, the state carried over to the next round; a seeded
//! generator (seed printed, `KS_GC_SEED` repeats the draw) picks the operations, and the
//! failing round prints its operations. No shrinking: the printed sequence is the
//! reproduction. By hand, e.g. `KS_GC_ROUNDS=50 KS_GC_OPS=12`. At the end every
//! attachment is DELeted and GC with an empty valid set must bring back the state of
//! the lab before anything was attached.

use crate::kill9::support as kill9_support;

use cni_testkit::kill::{count_from_env, SeededRng};
use kill9_support::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const SEED_VAR: &str = "KS_GC_SEED";
/// Container namespaces per network, the anchor's included.
const SLOTS_A: usize = 3;
const SLOTS_B: usize = 2;

/// One network: its chain, and its plugins' measured ADD and DEL durations.
struct Network {
    chain: Vec<Step>,
    add_took: Vec<Duration>,
    del_took: Vec<Duration>,
}

/// An attachment that is alive: its result and what its ADD changed.
#[derive(Clone)]
struct Alive {
    att: Attachment,
    result: Value,
    added: BTreeSet<String>,
    removed: BTreeSet<String>,
    /// Its ADD's place in time: deltas are applied in this order.
    order: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    KillAdd,
    Del,
    KillDel,
    Restart,
}

struct World {
    lab: Lab,
    networks: Vec<Network>,
    /// Network of each slot (= container namespace index).
    slot_network: Vec<usize>,
    alive: Vec<Option<Alive>>,
    baseline: BTreeSet<String>,
    next_id: usize,
    clock: usize,
}

fn chain_b(lab: &Lab) -> Vec<Step> {
    let mut chain = vec![ptp(lab), sbr()];
    for step in &mut chain {
        step.conf["name"] = json!("ksnet2");
    }
    chain
}

impl World {
    fn new() -> World {
        let lab = Lab::new(SLOTS_A + SLOTS_B);
        let chains =
            vec![vec![bridge(&lab), portmap(18100), firewall(), tuning(&lab), bandwidth()], chain_b(&lab)];
        let slot_network = (0..SLOTS_A).map(|_| 0).chain((0..SLOTS_B).map(|_| 1)).collect();
        let networks = chains
            .into_iter()
            .map(|chain| Network { chain, add_took: Vec::new(), del_took: Vec::new() })
            .collect();
        let mut world = World {
            lab,
            networks,
            slot_network,
            alive: vec![None; SLOTS_A + SLOTS_B],
            baseline: BTreeSet::new(),
            next_id: 0,
            clock: 0,
        };
        world.measure();
        world
    }

    /// Times every plugin's ADD and DEL once per network (in the slot after the anchor).
    fn measure(&mut self) {
        for n in 0..self.networks.len() {
            let slot = self.slots_of(n)[1];
            let att = self.attachment(slot);
            let chain = self.chain_for(&att);
            let mut prev: Option<Value> = None;
            for step in &chain {
                let out = att.call(&self.lab, step, "ADD", prev.as_ref()).run();
                self.networks[n].add_took.push(out.elapsed);
                prev = expect_ok("measuring ADD", &out);
            }
            for step in chain.iter().rev() {
                let out = att.call(&self.lab, step, "DEL", prev.as_ref()).run();
                expect_ok("measuring DEL", &out);
                self.networks[n].del_took.push(out.elapsed);
            }
            self.networks[n].del_took.reverse();
        }
    }

    /// The chain of `att`'s network, its port mapping on a host port of its own: a
    /// killed attachment's mapping holds its port until GC.
    fn chain_for(&self, att: &Attachment) -> Vec<Step> {
        let number: u16 = att.id.rsplit('-').next().and_then(|n| n.parse().ok()).expect("ks-gc-<n>");
        let mut chain = self.networks[self.slot_network[att.container]].chain.clone();
        for step in chain.iter_mut().filter(|s| s.plugin == "portmap") {
            step.conf["runtimeConfig"]["portMappings"][0]["hostPort"] = json!(20000 + number % 40000);
        }
        chain
    }

    fn slots_of(&self, network: usize) -> Vec<usize> {
        (0..self.slot_network.len()).filter(|s| self.slot_network[*s] == network).collect()
    }

    fn attachment(&mut self, slot: usize) -> Attachment {
        self.next_id += 1;
        Attachment { id: format!("ks-gc-{}", self.next_id), container: slot }
    }

    fn quiet_snapshot(&self) -> BTreeSet<String> {
        let mut last = self.lab.snapshot();
        loop {
            let now = self.lab.snapshot();
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// ADD of the whole chain in `slot`, recording what it changed.
    fn add(&mut self, slot: usize, att: Attachment) {
        let chain = self.chain_for(&att);
        let before = self.quiet_snapshot();
        let result = att.add_upto(&self.lab, &chain, chain.len()).expect("a chain prints a result");
        let after = self.quiet_snapshot();
        self.clock += 1;
        self.alive[slot] = Some(Alive {
            att,
            result,
            added: after.difference(&before).cloned().collect(),
            removed: before.difference(&after).cloned().collect(),
            order: self.clock,
        });
    }

    fn del(&mut self, slot: usize) -> Alive {
        let alive = self.alive[slot].take().expect("DEL of a live slot");
        alive.att.del_all(&self.lab, &self.chain_for(&alive.att), Some(&alive.result));
        alive
    }

    /// ADD or DEL of the chain with plugin `k` killed at `fraction` of its duration; then
    /// the runtime discards the sandbox.
    fn killed(&mut self, slot: usize, op: Op, k: usize, fraction: f64) {
        let network = self.slot_network[slot];
        match op {
            Op::KillAdd => {
                let att = self.attachment(slot);
                let chain = self.chain_for(&att);
                let prev = att.add_upto(&self.lab, &chain, k);
                let after = self.networks[network].add_took[k].mul_f64(fraction);
                att.call(&self.lab, &chain[k], "ADD", prev.as_ref()).run_killed_after(after);
            }
            Op::KillDel => {
                let alive = self.alive[slot].take().expect("DEL of a live slot");
                let chain = self.chain_for(&alive.att);
                for step in chain[k + 1..].iter().rev() {
                    let out = alive.att.call(&self.lab, step, "DEL", Some(&alive.result)).run();
                    expect_ok("DEL before the killed one", &out);
                }
                let after = self.networks[network].del_took[k].mul_f64(fraction);
                alive.att.call(&self.lab, &chain[k], "DEL", Some(&alive.result)).run_killed_after(after);
            }
            _ => unreachable!("not a kill"),
        }
        self.lab.replace_container(slot);
    }

    /// One random operation on a random slot other than the anchors; its description.
    fn step(&mut self, rng: &mut SeededRng) -> String {
        let anchors: Vec<usize> = (0..self.networks.len()).map(|n| self.slots_of(n)[0]).collect();
        let slots: Vec<usize> = (0..self.alive.len()).filter(|s| !anchors.contains(s)).collect();
        let slot = slots[rng.below(slots.len())];
        let roll = rng.below(100);
        let op = match (self.alive[slot].is_some(), roll) {
            (false, 0..=59) => Op::Add,
            (false, _) => Op::KillAdd,
            (true, 0..=39) => Op::Del,
            (true, 40..=64) => Op::KillDel,
            (true, _) => Op::Restart,
        };
        let chain_len = self.networks[self.slot_network[slot]].chain.len();
        let (k, fraction) = (rng.below(chain_len), rng.unit());
        match op {
            Op::Add => {
                let att = self.attachment(slot);
                self.add(slot, att);
                format!("ADD slot {slot}")
            }
            Op::Del => {
                self.del(slot);
                format!("DEL slot {slot}")
            }
            Op::Restart => {
                let alive = self.del(slot);
                self.add(slot, alive.att);
                format!("restart slot {slot}")
            }
            Op::KillAdd | Op::KillDel => {
                self.killed(slot, op, k, fraction);
                let plugin = self.networks[self.slot_network[slot]].chain[k].plugin;
                format!("{op:?} slot {slot}: {plugin} at {:.0}% of its duration", fraction * 100.0)
            }
        }
    }

    /// GC of every network with its alive attachments as the valid set.
    fn gc(&self) {
        for (n, network) in self.networks.iter().enumerate() {
            let valid: Vec<Attachment> = self
                .slots_of(n)
                .into_iter()
                .filter_map(|s| self.alive[s].as_ref().map(|a| a.att.clone()))
                .collect();
            gc_all(&self.lab, &network.chain, &valid);
        }
    }

    /// The baseline with every alive attachment's changes applied in the order made.
    fn expected(&self) -> BTreeSet<String> {
        let mut alive: Vec<&Alive> = self.alive.iter().flatten().collect();
        alive.sort_by_key(|a| a.order);
        let mut state = self.baseline.clone();
        for a in alive {
            state.retain(|l| !a.removed.contains(l));
            state.extend(a.added.iter().cloned());
        }
        state
    }
}

#[test]
fn gc_leaves_exactly_the_live_attachments() {
    let (mut rng, seed) = SeededRng::from_env(SEED_VAR);
    let rounds = count_from_env("KS_GC_ROUNDS", 3);
    let ops = count_from_env("KS_GC_OPS", 8);
    let mut world = World::new();
    // The state before anything is attached, after the measuring runs and a GC.
    world.gc();
    let empty = world.quiet_snapshot();
    world.baseline = empty.clone();
    for n in 0..world.networks.len() {
        let anchor = world.slots_of(n)[0];
        let att = world.attachment(anchor);
        world.add(anchor, att);
    }
    let mut counts = [0usize; 5];
    for round in 1..=rounds {
        let mut done = Vec::new();
        for _ in 0..ops {
            let line = world.step(&mut rng);
            for (i, op) in ["ADD", "DEL", "restart", "KillAdd", "KillDel"].iter().enumerate() {
                if line.starts_with(op) {
                    counts[i] += 1;
                }
            }
            done.push(line);
        }
        world.gc();
        let alive = world.alive.iter().flatten().count();
        world.lab.assert_back_to(
            &format!("round {round} ({SEED_VAR}={seed}), {alive} alive after:\n  {}", done.join("\n  ")),
            &world.expected(),
        );
    }
    println!(
        "{rounds} rounds x {ops} ops: ADD {}, DEL {}, restart {}, kill during ADD {}, kill during DEL {}",
        counts[0], counts[1], counts[2], counts[3], counts[4]
    );
    // Everything goes: the lab is as before the first attachment.
    for slot in 0..world.alive.len() {
        if world.alive[slot].is_some() {
            world.del(slot);
        }
    }
    world.gc();
    world.lab.assert_back_to(&format!("after DEL of all and GC ({SEED_VAR}={seed})"), &empty);
}
