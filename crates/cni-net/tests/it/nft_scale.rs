//! The two per-container nftables patterns (a cost per container that must not grow with
//! the number of containers on the host), with 200 containers: what each
//! container adds is exactly its own, and deleting them leaves the shared part only.
//! Pattern 1: each "container" gets its own chain of 5 rules plus one verdict-map element
//! that sends its traffic there; DEL removes the element and the chain without listing
//! anything. Pattern 2: shared rules look containers up in sets/maps, so a container is
//! only elements. Whether their cost stays flat in the number of containers is measured
//! by cni-bench (the `nft` workload). Root only; own namespace.

use std::net::Ipv4Addr;

use crate::nft_support::*;
use cni_net::nft::*;

const T: &str = "cnf-scale";
const CONTAINERS: usize = 200;

fn container_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 88, (i / 250) as u8, (i % 250 + 2) as u8)
}

fn chain_name(i: usize) -> String {
    format!("CNI-{i:06}")
}

fn add_container(nft: &mut NftClient, i: usize) {
    let chain = chain_name(i);
    let tag = format!("ctr-{i}");
    let rule = || RuleBuilder::new(Family::Inet, T, chain.as_str()).comment(tag.as_str());
    let mut b = Batch::new();
    b.add_chain(&Chain::regular(Family::Inet, T, chain.as_str()));
    for r in [
        rule().daddr("10.88.0.0/16".parse().unwrap()).accept(),
        rule().daddr("224.0.0.0/4".parse().unwrap()).accept(),
        rule().oifname("cnfbr0").accept(),
        rule().ct_state(ct_state::INVALID).drop(),
        rule().counter().masquerade(),
    ] {
        b.add_rule(&r.build().unwrap());
    }
    let jumps = SetRef::named(Family::Inet, T, "jumps");
    b.add_elements(
        &jumps,
        &[SetElement::new(&[KeyValue::Ipv4(container_ip(i))]).with_verdict(Verdict::Goto(chain.clone()))],
    );
    nft.commit(&b).unwrap();
}

fn delete_container(nft: &mut NftClient, i: usize) {
    let chain = chain_name(i);
    let mut b = Batch::new();
    let jumps = SetRef::named(Family::Inet, T, "jumps");
    b.delete_elements(&jumps, &[SetElement::new(&[KeyValue::Ipv4(container_ip(i))])]);
    b.flush_chain(Family::Inet, T, &chain);
    b.delete_chain(Family::Inet, T, &chain);
    nft.commit(&b).unwrap();
}

#[test]
fn per_container_chains_and_elements_come_and_go_exactly() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        add_nat_chain(&mut b, T, "postrouting", Hook::Postrouting);
        let jumps =
            b.add_set(&Set::named(Family::Inet, T, "jumps", &[KeyType::Ipv4Addr]).map_to(MapData::Verdict));
        b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "postrouting")
                .load_key(&[Field::IpSaddr])
                .vmap(&jumps)
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();

        for i in 0..CONTAINERS {
            add_container(&mut nft, i);
        }
        let ruleset = nft_ruleset();
        assert_eq!(objects(&ruleset, "chain").len(), CONTAINERS + 1);
        assert_eq!(objects(&ruleset, "rule").len(), CONTAINERS * 5 + 1);
        assert_eq!(nft.list_rules(Family::Inet, T, &chain_name(7)).unwrap().len(), 5);

        for i in 0..CONTAINERS {
            delete_container(&mut nft, i);
        }
        let ruleset = nft_ruleset();
        assert_eq!(objects(&ruleset, "chain").len(), 1, "{}", nft_text());
        assert_eq!(objects(&ruleset, "rule").len(), 1);
        assert!(objects(&ruleset, "map")[0].get("elem").is_none(), "{}", nft_text());
    });
}

#[test]
fn per_container_map_elements_come_and_go_exactly() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        add_nat_chain(&mut b, T, "post", Hook::Postrouting);
        add_nat_chain(&mut b, T, "pre", Hook::Prerouting);
        let sources = b.add_set(&Set::named(Family::Inet, T, "masq", &[KeyType::Ipv4Addr]));
        let ports = b.add_set(
            &Set::named(Family::Inet, T, "ports", &[KeyType::InetProto, KeyType::InetService])
                .map_to(MapData::Value(vec![KeyType::Ipv4Addr, KeyType::InetService])),
        );
        let post = RuleBuilder::new(Family::Inet, T, "post")
            .load_key(&[Field::IpSaddr])
            .in_set(&sources)
            .daddr_not("10.88.0.0/16".parse().unwrap())
            .masquerade();
        let pre = RuleBuilder::new(Family::Inet, T, "pre")
            .fib_daddr_local()
            .load_key(&[Field::L4Proto, Field::DstPort])
            .dnat_map(&ports, false);
        b.add_rule(&post.build().unwrap());
        b.add_rule(&pre.build().unwrap());
        nft.commit(&b).unwrap();

        let sources = SetRef::named(Family::Inet, T, "masq");
        let ports = SetRef::named(Family::Inet, T, "ports");
        let elements = |i: usize| {
            let masq = SetElement::new(&[KeyValue::Ipv4(container_ip(i))]);
            let port = SetElement::new(&[KeyValue::Proto(proto::TCP), KeyValue::Port(20000 + i as u16)])
                .with_value(&[KeyValue::Ipv4(container_ip(i)), KeyValue::Port(80)]);
            (masq, port)
        };
        for i in 0..CONTAINERS {
            let (masq, port) = elements(i);
            let mut b = Batch::new();
            b.add_elements(&sources, &[masq]);
            b.add_elements(&ports, &[port]);
            nft.commit(&b).unwrap();
        }
        let ruleset = nft_ruleset();
        let maps = objects(&ruleset, "map");
        assert_eq!(maps[0]["elem"].as_array().unwrap().len(), CONTAINERS);
        let sets = objects(&ruleset, "set");
        assert_eq!(sets[0]["elem"].as_array().unwrap().len(), CONTAINERS);
        // Shared rules only: a container is elements, never rules.
        assert_eq!(objects(&ruleset, "rule").len(), 2);
        for i in 0..CONTAINERS {
            let (masq, port) = elements(i);
            let mut b = Batch::new();
            b.delete_elements(&sources, &[masq]);
            b.delete_elements(&ports, &[port]);
            nft.commit(&b).unwrap();
        }
        let ruleset = nft_ruleset();
        assert!(objects(&ruleset, "map")[0].get("elem").is_none(), "{}", nft_text());
        assert!(objects(&ruleset, "set")[0].get("elem").is_none(), "{}", nft_text());
    });
}

#[test]
fn a_batch_of_20000_rules_is_fully_acknowledged() {
    in_fresh_netns(|| {
        const RULES: usize = 20_000;
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::with_rule_handles();
        b.add_table(&Table::new(Family::Inet, T));
        b.add_chain(&Chain::regular(Family::Inet, T, "big"));
        let ops: Vec<usize> = (0..RULES)
            .map(|i| {
                let rule = RuleBuilder::new(Family::Inet, T, "big").dport(proto::TCP, i as u16).accept();
                b.add_rule(&rule.build().unwrap())
            })
            .collect();
        let outcome = nft.commit(&b).unwrap();
        assert!(ops.iter().all(|op| outcome.rule_handle(*op).is_some()));
        assert_eq!(nft.list_rules(Family::Inet, T, "big").unwrap().len(), RULES);
    });
}
