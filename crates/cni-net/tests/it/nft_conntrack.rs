//! Stale UDP conntrack entries for a host port are removed, others stay.
//! Root only; own namespace, loopback only.

use std::net::{Ipv4Addr, UdpSocket};

use crate::nft_support::*;
use cni_net::nft::conntrack::ConntrackClient;
use cni_net::nft::*;

#[test]
fn delete_matching_removes_only_udp_entries_to_that_port() {
    in_fresh_netns(|| {
        loopback_up();
        // Conntrack only runs in a namespace once something needs it: a ct rule does.
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, "cnf-ct"));
        b.add_chain(&Chain::base(
            Family::Inet,
            "cnf-ct",
            "out",
            ChainType::Filter,
            Hook::Output,
            priority::FILTER,
        ));
        b.add_rule(
            &RuleBuilder::new(Family::Inet, "cnf-ct", "out")
                .ct_state(ct_state::NEW)
                .counter()
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();

        let target = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let other = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (target_port, other_port) =
            (target.local_addr().unwrap().port(), other.local_addr().unwrap().port());
        let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        client.send_to(b"x", (Ipv4Addr::LOCALHOST, target_port)).unwrap();
        client.send_to(b"x", (Ipv4Addr::LOCALHOST, other_port)).unwrap();

        let mut ct = ConntrackClient::new().unwrap();
        let udp_ports = |ct: &mut ConntrackClient| -> Vec<u16> {
            let mut ports: Vec<u16> = ct
                .list(Family::Ipv4)
                .unwrap()
                .into_iter()
                .filter(|e| e.protocol == proto::UDP)
                .map(|e| e.dst_port)
                .collect();
            ports.sort();
            ports
        };
        let mut both = vec![target_port, other_port];
        both.sort();
        assert_eq!(udp_ports(&mut ct), both);
        let entry = ct.list(Family::Ipv4).unwrap().into_iter().find(|e| e.dst_port == target_port).unwrap();
        assert_eq!(entry.src, Ipv4Addr::LOCALHOST);
        assert_eq!(entry.src_port, client.local_addr().unwrap().port());

        assert_eq!(ct.delete_matching(Family::Ipv4, proto::UDP, target_port).unwrap(), 1);
        assert_eq!(udp_ports(&mut ct), vec![other_port]);
        // Nothing left to delete is not an error; TCP to that port is not touched.
        assert_eq!(ct.delete_matching(Family::Inet, proto::UDP, target_port).unwrap(), 0);
        assert_eq!(ct.delete_matching(Family::Inet, proto::TCP, other_port).unwrap(), 0);
        assert_eq!(udp_ports(&mut ct), vec![other_port]);
    });
}
