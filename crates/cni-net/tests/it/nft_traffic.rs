//! Real packets through rules programmed over netlink: counters count, a drop rule blocks
//! a TCP connect, a DNAT rule redirects one. Root only; own namespace, loopback only.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::nft_support::*;
use cni_net::nft::*;

const T: &str = "cnf-traffic";

fn connects(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

fn counter_packets(nft: &mut NftClient, chain: &str, tag: &str) -> u64 {
    let rules = nft.list_rules(Family::Inet, T, chain).unwrap();
    let rule = rules.iter().find(|r| r.rule.comment.as_deref() == Some(tag)).unwrap();
    rule.rule
        .exprs
        .iter()
        .find_map(|e| match e {
            Expr::Counter { packets, .. } => Some(*packets),
            _ => None,
        })
        .expect("rule has a counter")
}

#[test]
fn counter_counts_drop_blocks_and_deleting_the_rule_unblocks() {
    in_fresh_netns(|| {
        loopback_up();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        b.add_chain(&Chain::base(Family::Inet, T, "input", ChainType::Filter, Hook::Input, priority::FILTER));
        b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "input")
                .saddr("127.0.0.1/32".parse().unwrap())
                .dport(proto::TCP, port)
                .counter()
                .comment("count")
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();
        assert!(connects(port));
        let counted = counter_packets(&mut nft, "input", "count");
        assert!(counted >= 2, "SYN and ACK at least, got {counted}");

        let mut b = Batch::with_rule_handles();
        let op = b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "input")
                .dport(proto::TCP, port)
                .counter()
                .drop()
                .comment("block")
                .build()
                .unwrap(),
        );
        let handle = nft.commit(&b).unwrap().rule_handle(op).unwrap();
        assert!(!connects(port), "drop rule must block the connect");
        assert!(counter_packets(&mut nft, "input", "block") >= 1);

        let mut b = Batch::new();
        b.delete_rule(Family::Inet, T, "input", handle);
        nft.commit(&b).unwrap();
        assert!(connects(port), "connect works again once the drop rule is gone");
        drop(listener);
    });
}

#[test]
fn dnat_redirects_a_local_connection() {
    in_fresh_netns(|| {
        loopback_up();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let real_port = listener.local_addr().unwrap().port();
        let front_port = if real_port == 8080 { 8081 } else { 8080 };
        assert!(!connects(front_port), "nothing listens on {front_port} yet");

        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        add_nat_chain(&mut b, T, "output", Hook::Output);
        b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "output")
                .daddr("127.0.0.1/32".parse().unwrap())
                .dport(proto::TCP, front_port)
                .dnat(Ipv4Addr::LOCALHOST.into(), Some(real_port))
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();
        assert!(connects(front_port), "DNAT must send {front_port} to {real_port}");
        let (_conn, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), Ipv4Addr::LOCALHOST);
    });
}

#[test]
fn dnat_through_a_port_map_redirects_with_one_element_per_mapping() {
    in_fresh_netns(|| {
        loopback_up();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let real_port = listener.local_addr().unwrap().port();
        let front_port = if real_port == 9090 { 9091 } else { 9090 };

        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        add_nat_chain(&mut b, T, "output", Hook::Output);
        let ports = b.add_set(
            &Set::named(Family::Inet, T, "ports", &[KeyType::InetProto, KeyType::InetService])
                .map_to(MapData::Value(vec![KeyType::Ipv4Addr, KeyType::InetService])),
        );
        b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "output")
                .daddr("127.0.0.1/32".parse().unwrap())
                .load_key(&[Field::L4Proto, Field::DstPort])
                .dnat_map(&ports, false)
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();
        assert!(nft_text().contains("dnat ip to meta l4proto . th dport map @ports"), "{}", nft_text());
        assert!(!connects(front_port), "no mapping yet");

        let mapping = SetElement::new(&[KeyValue::Proto(proto::TCP), KeyValue::Port(front_port)])
            .with_value(&[KeyValue::Ipv4(Ipv4Addr::LOCALHOST), KeyValue::Port(real_port)]);
        let ports = SetRef::named(Family::Inet, T, "ports");
        let mut b = Batch::new();
        b.add_elements(&ports, std::slice::from_ref(&mapping));
        nft.commit(&b).unwrap();
        assert!(connects(front_port), "map element must send {front_port} to {real_port}\n{}", nft_text());
        listener.accept().unwrap();

        let mut b = Batch::new();
        b.delete_elements(&ports, &[mapping]);
        nft.commit(&b).unwrap();
        assert!(!connects(front_port), "mapping removed");
    });
}
