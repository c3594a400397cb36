//! PeerRecord's validation and Peers' bookkeeping, record by record.

use super::*;

fn config(extra: &[&str]) -> Config {
    let args: Vec<String> = ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n1"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    Config::parse(&args).unwrap()
}

fn own() -> Own {
    Own {
        subnet: "10.244.1.0/24".parse().unwrap(),
        subnet6: None,
        underlay: Ipv4Addr::new(192, 0, 2, 1).into(),
        onlink: vec!["192.0.2.0/24".parse().unwrap()],
        wg_public_key: None,
    }
}

fn own6() -> Own {
    Own {
        subnet: "10.244.1.0/24".parse().unwrap(),
        subnet6: Some("fd00:244:0:1::/64".parse().unwrap()),
        underlay: "2001:db8::1".parse().unwrap(),
        onlink: vec!["2001:db8::/64".parse().unwrap()],
        wg_public_key: None,
    }
}

fn record6(node: &str, underlay: &str, subnet6: &str) -> Vec<u8> {
    let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
    format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}","subnet6":"{subnet6}"}}"#)
        .into_bytes()
}

fn record(node: &str, underlay: &str) -> Vec<u8> {
    let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
    format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}"}}"#).into_bytes()
}

fn parse(key: &str, value: &[u8]) -> Result<PeerRecord, Refusal> {
    PeerRecord::parse(&config(&[]), &own(), key.as_bytes(), value, 7)
}

#[test]
fn a_genuine_record_is_accepted() {
    let peer = parse("/cni-rs/overlay/subnets/10.244.2.0-24", &record("n2", "192.0.2.2")).unwrap();
    assert_eq!(peer.subnet(), "10.244.2.0/24".parse::<Ipv4Net>().unwrap());
    assert_eq!((peer.node(), peer.underlay()), ("n2", Ipv4Addr::new(192, 0, 2, 2).into()));
    assert_eq!(peer.vtep_mac().to_string(), "0a:58:c0:00:02:02");
    assert_eq!((peer.path(), peer.subnet6()), (PeerPath::Vxlan, None));
}

#[test]
fn the_backend_picks_each_peers_path() {
    let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
    let path = |backend: &str, underlay: &str| {
        PeerRecord::parse(&config(&["--backend", backend]), &own(), key, &record("n2", underlay), 7)
            .map(|p| p.path())
    };
    assert_eq!(path("vxlan", "192.0.2.2"), Ok(PeerPath::Vxlan));
    assert_eq!(path("direct", "192.0.2.2"), Ok(PeerPath::Direct));
    assert_eq!(path("auto", "192.0.2.2"), Ok(PeerPath::Direct));
    assert_eq!(path("auto", "198.51.100.2"), Ok(PeerPath::Vxlan));
    assert_eq!(path("vxlan", "198.51.100.2"), Ok(PeerPath::Vxlan));
    // Claimed as direct but not on this node's L2: refused, not routed into the void.
    let err = path("direct", "198.51.100.2").unwrap_err().message;
    assert!(err.contains("not on-link on --iface e"), "{err}");
}

#[test]
fn dual_stack_records_are_checked_against_the_paired_subnet() {
    let config = config(&["--network6", "fd00:244::/48", "--backend", "auto"]);
    let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
    let parse = |value: Vec<u8>| PeerRecord::parse(&config, &own6(), key, &value, 7);
    let peer = parse(record6("n2", "2001:db8::2", "fd00:244:0:2::/64")).unwrap();
    assert_eq!(peer.subnet6(), Some("fd00:244:0:2::/64".parse().unwrap()));
    assert_eq!(
        (peer.path(), peer.vtep_mac()),
        (PeerPath::Direct, vtep_mac("2001:db8::2".parse::<IpAddr>().unwrap()))
    );
    let off_link = parse(record6("n2", "2001:db8:1::2", "fd00:244:0:2::/64")).unwrap();
    assert_eq!(off_link.path(), PeerPath::Vxlan);
    // A dual-stack node still accepts an IPv4-only peer.
    assert_eq!(parse(record("n2", "2001:db8::2")).unwrap().subnet6(), None);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Outside --network6, of the wrong length, another node's, this node's own.
        (record6("n2", "2001:db8::2", "fd00:999:0:2::/64"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "fd00:244::/48"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "fd00:244:0:2::/96"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "fd00:244:0:3::/64"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "fd00:244:0:1::/64"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "::/0"), "not fd00:244:0:2::/64"),
        (record6("n2", "2001:db8::2", "nope"), "record:"),
        (record6("n2", "2001:db8::2", "10.244.2.0/24"), "record:"),
        // Underlays an IPv6 node must not send to.
        (record6("n2", "::", "fd00:244:0:2::/64"), "(::)"),
        (record6("n2", "ff02::1", "fd00:244:0:2::/64"), "not unicast"),
        (record6("n2", "fe80::2", "fd00:244:0:2::/64"), "link-local"),
        (record6("n2", "::ffff:192.0.2.2", "fd00:244:0:2::/64"), "IPv4-mapped"),
        (record6("n2", "::1", "fd00:244:0:2::/64"), "loopback"),
        (record6("n2", "2001:db8::1", "fd00:244:0:2::/64"), "this node's own address"),
        (record6("n2", "fd00:244:0:9::1", "fd00:244:0:2::/64"), "inside the pod network"),
        (record6("n2", "192.0.2.2", "fd00:244:0:2::/64"), "not of the family"),
    ];
    for (value, want) in cases {
        let err = parse(value.clone()).unwrap_err().message;
        assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
    }
    let unpaired = parse(record6("n2", "2001:db8::2", "fd00:244:0:3::/64")).unwrap_err();
    assert_eq!(unpaired.rule, Rule::Subnet6, "counted under its own label");
    // An IPv4-only node ignores the key: the record reads as before.
    let v4 =
        PeerRecord::parse(&super::tests::config(&[]), &own(), key, &record6("n2", "192.0.2.2", "x::/64"), 7);
    assert!(v4.is_err(), "an unparsable subnet6 is a malformed record for every node");
    let v4 = PeerRecord::parse(
        &super::tests::config(&[]),
        &own(),
        key,
        &record6("n2", "192.0.2.2", "fd00::/64"),
        7,
    );
    assert_eq!(v4.unwrap().subnet6(), None);
}

#[test]
fn hostile_subnets_are_refused_naming_the_rule() {
    let good = record("n2", "192.0.2.2");
    let cases = [
        ("0.0.0.0-0", "outside --network"),
        ("1.0.0.0-8", "outside --network"),
        ("128.0.0.0-1", "outside --network"),
        ("10.245.0.0-24", "outside --network"),
        ("10.244.0.0-16", "is a /16"),
        ("10.244.2.0-25", "is a /25"),
        ("10.244.2.5-24", "not a subnet's first address"),
        ("10.244.1.0-24", "overlaps this node's own"),
        ("10.244.2.0-24-1", "not a subnet key"),
        ("10.244.2.0-", "not a subnet key"),
        ("10.244.2.0-99", "not a subnet key"),
    ];
    for (key, want) in cases {
        let err = parse(&format!("/cni-rs/overlay/subnets/{key}"), &good).unwrap_err().message;
        assert!(err.contains(want), "{key}: {err}");
    }
    let err = PeerRecord::parse(&config(&[]), &own(), b"/cni-rs/overlay/subnets/10.244.2.0-24", &good, 0)
        .unwrap_err()
        .message;
    assert!(err.contains("lease"), "{err}");
}

#[test]
fn hostile_values_are_refused_naming_the_rule() {
    let key = "/cni-rs/overlay/subnets/10.244.2.0-24";
    let mac_for =
        |mac: &str| format!(r#"{{"node":"n2","underlay":"192.0.2.2","vtepMac":"{mac}"}}"#).into_bytes();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (record("n2", "0.0.0.0"), "0.0.0.0/8"),
        (record("n2", "224.0.0.1"), "not unicast"),
        (record("n2", "239.1.2.3"), "not unicast"),
        (record("n2", "255.255.255.255"), "not unicast"),
        (record("n2", "240.0.0.1"), "reserved"),
        (record("n2", "127.0.0.1"), "loopback"),
        (record("n2", "192.0.2.1"), "this node's own address"),
        (record("n2", "10.244.9.1"), "inside the pod network"),
        (record("n1", "192.0.2.2"), "names this node"),
        (record("", "192.0.2.2"), "node name"),
        (record("n\\u001b[2J", "192.0.2.2"), "node name"),
        (record(&"n".repeat(254), "192.0.2.2"), "node name"),
        (mac_for("01:00:5e:00:00:01"), "not a unicast"),
        (mac_for("00:00:00:00:00:00"), "not a unicast"),
        (mac_for("0a:58:c0:00:02:03"), "derived from underlay"),
        (mac_for("nope"), "not a MAC"),
        (b"{}".to_vec(), "record:"),
        (vec![b' '; MAX_RECORD_BYTES + 1], "over the 1024-byte limit"),
    ];
    for (value, want) in cases {
        let err = parse(key, &value).unwrap_err().message;
        assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
    }
}

fn wg_record(node: &str, underlay: &str, key: &str, port: &str) -> Vec<u8> {
    let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
    format!(
        r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}","wgPublicKey":"{key}","wgPort":{port}}}"#
    )
    .into_bytes()
}

#[test]
fn wireguard_records_carry_an_exact_key_and_a_port() {
    let config = config(&["--backend", "wireguard"]);
    let own = Own { wg_public_key: Some([1; 32]), ..own() };
    let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
    let parse = |value: Vec<u8>| PeerRecord::parse(&config, &own, key, &value, 7);
    let good = wireguard::base64(&[2; 32]);
    let peer = parse(wg_record("n2", "198.51.100.2", &good, "51820")).unwrap();
    assert_eq!(peer.path(), PeerPath::Wireguard, "any underlay: WireGuard needs no shared L2");
    assert_eq!(peer.wireguard(), Some(WgIdentity { public_key: [2; 32], port: 51820 }));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (record("n2", "192.0.2.2"), "wgPublicKey missing"),
        (wg_record("n2", "192.0.2.2", &good, "null"), "wgPort missing"),
        (wg_record("n2", "192.0.2.2", &good, "0"), "wgPort 0"),
        (wg_record("n2", "192.0.2.2", &good, "65536"), "record:"),
        (wg_record("n2", "192.0.2.2", &good, "-1"), "record:"),
        (wg_record("n2", "192.0.2.2", &good, "\"51820\""), "record:"),
        (wg_record("n2", "192.0.2.2", &wireguard::base64(&[1; 32]), "51820"), "this node's own public key"),
        (wg_record("n2", "192.0.2.2", &wireguard::base64(&[0; 32]), "51820"), "all zeros"),
        (wg_record("n2", "192.0.2.2", &good[..43], "51820"), "43 characters"),
        (wg_record("n2", "192.0.2.2", &format!("{good}A"), "51820"), "45 characters"),
        (wg_record("n2", "192.0.2.2", &format!("{}r=", &good[..42]), "51820"), "not base64"),
        (wg_record("n2", "192.0.2.2", &"*".repeat(44), "51820"), "not base64"),
        (wg_record("n2", "192.0.2.2", &"A".repeat(900), "51820"), "900 characters"),
        // The other fields are still checked.
        (wg_record("n2", "224.0.0.1", &good, "51820"), "not unicast"),
    ];
    for (value, want) in cases {
        let err = parse(value.clone()).unwrap_err().message;
        assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
    }
    // A VXLAN node reads a WireGuard node's record as before (the extra keys ignored).
    let vxlan =
        PeerRecord::parse(&super::tests::config(&[]), &own, key, &wg_record("n2", "192.0.2.2", "x", "1"), 7);
    assert_eq!(vxlan.unwrap().wireguard(), None);
}

#[test]
fn a_record_claiming_another_peers_key_is_refused() {
    let config = config(&["--backend", "wireguard"]);
    let own = Own { wg_public_key: Some([1; 32]), ..own() };
    let kv = |subnet: &str, value: Vec<u8>| KeyValue {
        key: format!("/cni-rs/overlay/subnets/{subnet}").into_bytes(),
        value,
        create_revision: 1,
        mod_revision: 2,
        lease: 7,
    };
    let key_b = wireguard::base64(&[2; 32]);
    let b = kv("10.244.2.0-24", wg_record("b", "192.0.2.2", &key_b, "51820"));
    let thief = kv("10.244.3.0-24", wg_record("c", "192.0.2.3", &key_b, "51820"));
    let mut peers = Peers::default();
    assert!(matches!(peers.put(&config, &own, &b), Change::Joined(_)));
    match peers.put(&config, &own, &thief) {
        Change::Refused { reason, .. } => assert!(reason.message.contains("already node b's"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(peers.accepted().len(), 1);
    // b itself rotating to a new key is a change of b, not a clash.
    let rotated = kv("10.244.2.0-24", wg_record("b", "192.0.2.2", &wireguard::base64(&[3; 32]), "51820"));
    assert!(matches!(peers.put(&config, &own, &rotated), Change::Replaced { .. }));
    let now = peers.accepted().values().next().unwrap().wireguard().unwrap();
    assert_eq!(now.public_key, [3; 32]);
}

#[test]
fn loopback_peers_only_for_a_loopback_node() {
    let own = Own { underlay: Ipv4Addr::LOCALHOST.into(), ..own() };
    let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
    assert!(PeerRecord::parse(&config(&[]), &own, key, &record("n2", "127.0.0.2"), 7).is_ok());
}

#[test]
fn peers_log_a_refusal_once_per_change_and_drop_a_peer_gone_bad() {
    let config = config(&[]);
    let own = own();
    let kv = |key: &str, value: Vec<u8>, revision: i64| KeyValue {
        key: format!("/cni-rs/overlay/subnets/{key}").into_bytes(),
        value,
        create_revision: 1,
        mod_revision: revision,
        lease: 7,
    };
    let mut peers = Peers::default();
    let good = kv("10.244.2.0-24", record("n2", "192.0.2.2"), 2);
    let bad = kv("1.0.0.0-8", record("evil", "192.0.2.9"), 3);
    let refused = peers.replace_all(&config, &own, &[good.clone(), bad.clone()]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(peers.accepted().len(), 1);
    // Listed again unchanged: nothing new to log.
    assert!(peers.replace_all(&config, &own, &[good.clone(), bad.clone()]).is_empty());
    assert_eq!(peers.put(&config, &own, &bad), Change::Unchanged);
    // Changed: logged again.
    assert!(matches!(peers.put(&config, &own, &kv("1.0.0.0-8", b"{}".to_vec(), 4)), Change::Refused { .. }));
    // The good peer's record replaced by a bad one: it leaves the set.
    let turned = kv("10.244.2.0-24", record("n2", "224.0.0.1"), 5);
    assert!(matches!(peers.put(&config, &own, &turned), Change::Refused { .. }));
    assert!(peers.accepted().is_empty());
    assert!(matches!(peers.put(&config, &own, &good), Change::Joined(_)));
    assert!(matches!(peers.delete(&config, &good.key), Change::Left(_)));
    // This node's own record is neither a peer nor a refusal.
    let mine = kv("10.244.1.0-24", record("n1", "192.0.2.1"), 6);
    assert_eq!(peers.put(&config, &own, &mine), Change::Unchanged);
}
