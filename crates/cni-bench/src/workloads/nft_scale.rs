//! `nft`: the per-container nftables cost of the two patterns (which must stay flat in the
//! number of containers), done by our library (cni-net's client) in one process, so that only the kernel's and the
//! client's work is timed, for N containers added one commit each, then deleted:
//!
//! - "chain": each container gets its own chain of 5 rules plus one verdict-map element
//!   that jumps there (what firewall does). The kernel re-validates every chain reachable
//!   through jumps when a jump is added, so some growth in N is the kernel's.
//! - "elements": shared rules look containers up in a set and a map, so a container is
//!   two elements (what portmap and masquerading do): flat.
//!
//! Each pattern runs in its own throwaway namespace; both leave only the shared part.

use super::chain::FLATNESS_WINDOW;
use super::{record_growth, BenchContext, SetOutcome, Workload};
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use cni_net::nft::*;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const TABLE: &str = "cnk-bench";

pub struct NftScale;

impl Workload for NftScale {
    fn id(&self) -> WorkloadId {
        WorkloadId::Nft
    }

    fn title(&self) -> String {
        "nftables per container, our library: own chain + map element vs elements only".into()
    }

    fn needs(&self) -> Vec<&'static str> {
        Vec::new()
    }

    fn library_only(&self) -> bool {
        true
    }

    fn run(&self, ctx: &BenchContext, _set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        for pattern in [Pattern::Chain, Pattern::Elements] {
            let host = BenchHost::create(ctx.state_root())?;
            let (add, del) = host.netns.run(|| pattern.add_then_del(ctx.containers))??;
            let name = pattern.name();
            out.op(&format!("{name} ADD")).add_phase(add.iter().copied(), Duration::ZERO);
            out.op(&format!("{name} DEL")).add_phase(del.iter().copied(), Duration::ZERO);
            record_growth(out, &format!("{name} ADD"), &format!("{name}_add"), &add, FLATNESS_WINDOW);
            record_growth(out, &format!("{name} DEL"), &format!("{name}_del"), &del, FLATNESS_WINDOW);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Pattern {
    Chain,
    Elements,
}

fn nft_error(context: &str) -> impl FnOnce(NftError) -> BenchError + '_ {
    move |e| BenchError::Library(format!("nft {context}: {e}"))
}

fn container_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 88, 0, 2)) + i as u32)
}

fn chain_name(i: usize) -> String {
    format!("cnk-{i:06}")
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Chain => "chain",
            Pattern::Elements => "elements",
        }
    }

    /// Runs on the calling thread, which must be in a fresh namespace: the shared part
    /// (untimed), then one timed commit per container added, then per container deleted.
    fn add_then_del(self, containers: usize) -> Result<(Vec<Duration>, Vec<Duration>)> {
        let mut nft = NftClient::new().map_err(nft_error("open"))?;
        nft.commit(&self.shared()).map_err(nft_error("create the shared part"))?;
        let mut timed = |batch: Batch, context: &str| -> Result<Duration> {
            crate::interrupt::check()?;
            let started = Instant::now();
            nft.commit(&batch).map_err(nft_error(context))?;
            Ok(started.elapsed())
        };
        let add =
            (0..containers).map(|i| timed(self.add(i), "add a container")).collect::<Result<Vec<_>>>()?;
        let del =
            (0..containers).map(|i| timed(self.del(i), "delete a container")).collect::<Result<Vec<_>>>()?;
        // Only the shared rules are left (`nft` as the outside oracle, when installed).
        let shared_rules = match self {
            Pattern::Chain => 1,
            Pattern::Elements => 2,
        };
        match crate::leaks::ruleset_entries() {
            Some(left) if left != shared_rules => Err(BenchError::Check(format!(
                "{left} rules and elements left after deleting every container, {shared_rules} expected"
            ))),
            _ => Ok((add, del)),
        }
    }

    fn shared(self) -> Batch {
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, TABLE));
        let post =
            Chain::base(Family::Inet, TABLE, "post", ChainType::Nat, Hook::Postrouting, priority::SRCNAT);
        b.add_chain(&post);
        match self {
            Pattern::Chain => {
                let jumps = b.add_set(
                    &Set::named(Family::Inet, TABLE, "jumps", &[KeyType::Ipv4Addr]).map_to(MapData::Verdict),
                );
                let rule =
                    RuleBuilder::new(Family::Inet, TABLE, "post").load_key(&[Field::IpSaddr]).vmap(&jumps);
                b.add_rule(&rule.build().expect("a valid rule"));
            }
            Pattern::Elements => {
                let pre = Chain::base(
                    Family::Inet,
                    TABLE,
                    "pre",
                    ChainType::Nat,
                    Hook::Prerouting,
                    priority::DSTNAT,
                );
                b.add_chain(&pre);
                let sources = b.add_set(&Set::named(Family::Inet, TABLE, "masq", &[KeyType::Ipv4Addr]));
                let ports = b.add_set(
                    &Set::named(Family::Inet, TABLE, "ports", &[KeyType::InetProto, KeyType::InetService])
                        .map_to(MapData::Value(vec![KeyType::Ipv4Addr, KeyType::InetService])),
                );
                let masquerade = RuleBuilder::new(Family::Inet, TABLE, "post")
                    .load_key(&[Field::IpSaddr])
                    .in_set(&sources)
                    .daddr_not("10.88.0.0/16".parse().expect("a valid prefix"))
                    .masquerade();
                let dnat = RuleBuilder::new(Family::Inet, TABLE, "pre")
                    .fib_daddr_local()
                    .load_key(&[Field::L4Proto, Field::DstPort])
                    .dnat_map(&ports, false);
                b.add_rule(&masquerade.build().expect("a valid rule"));
                b.add_rule(&dnat.build().expect("a valid rule"));
            }
        }
        b
    }

    fn add(self, i: usize) -> Batch {
        let mut b = Batch::new();
        match self {
            Pattern::Chain => {
                let chain = chain_name(i);
                let tag = format!("ctr-{i}");
                let rule = || RuleBuilder::new(Family::Inet, TABLE, chain.as_str()).comment(tag.as_str());
                b.add_chain(&Chain::regular(Family::Inet, TABLE, chain.as_str()));
                for r in [
                    rule().daddr("10.88.0.0/16".parse().expect("a valid prefix")).accept(),
                    rule().daddr("224.0.0.0/4".parse().expect("a valid prefix")).accept(),
                    rule().oifname("cnk0").accept(),
                    rule().ct_state(ct_state::INVALID).drop(),
                    rule().counter().masquerade(),
                ] {
                    b.add_rule(&r.build().expect("a valid rule"));
                }
                let element =
                    SetElement::new(&[KeyValue::Ipv4(container_ip(i))]).with_verdict(Verdict::Goto(chain));
                b.add_elements(&SetRef::named(Family::Inet, TABLE, "jumps"), &[element]);
            }
            Pattern::Elements => {
                let (masq, port) = elements(i);
                b.add_elements(&SetRef::named(Family::Inet, TABLE, "masq"), &[masq]);
                b.add_elements(&SetRef::named(Family::Inet, TABLE, "ports"), &[port]);
            }
        }
        b
    }

    fn del(self, i: usize) -> Batch {
        let mut b = Batch::new();
        match self {
            Pattern::Chain => {
                let element = SetElement::new(&[KeyValue::Ipv4(container_ip(i))]);
                b.delete_elements(&SetRef::named(Family::Inet, TABLE, "jumps"), &[element]);
                b.flush_chain(Family::Inet, TABLE, &chain_name(i));
                b.delete_chain(Family::Inet, TABLE, &chain_name(i));
            }
            Pattern::Elements => {
                let (masq, port) = elements(i);
                b.delete_elements(&SetRef::named(Family::Inet, TABLE, "masq"), &[masq]);
                b.delete_elements(&SetRef::named(Family::Inet, TABLE, "ports"), &[port]);
            }
        }
        b
    }
}

/// Container `i`'s masquerade element and port mapping (tcp 20000 + i to port 80).
fn elements(i: usize) -> (SetElement, SetElement) {
    let masq = SetElement::new(&[KeyValue::Ipv4(container_ip(i))]);
    let port = SetElement::new(&[KeyValue::Proto(proto::TCP), KeyValue::Port(20000 + i as u16)])
        .with_value(&[KeyValue::Ipv4(container_ip(i)), KeyValue::Port(80)]);
    (masq, port)
}
