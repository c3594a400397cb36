//! Concurrent first ADDs: the table bootstrap, the per-bridge isolation chain (nftables)
//! and the shared chains (iptables) are created exactly once, and no container's rules
//! are lost to a race.

use super::support;

use serde_json::{json, Value};
use support::{firewall_conf, ok, Lab};

const N: usize = 6;

fn parallel_adds(lab: &Lab, confs: &[Value]) {
    std::thread::scope(|s| {
        let handles: Vec<_> = confs
            .iter()
            .enumerate()
            .map(|(i, conf)| s.spawn(move || lab.firewall("ADD", Some(i), conf)))
            .collect();
        for h in handles {
            ok(&h.join().unwrap());
        }
    });
}

#[test]
fn nftables_first_adds_race_safely() {
    let lab = Lab::new(N);
    let confs: Vec<Value> = (0..N)
        .map(|i| {
            let prev = lab.bridge_add(i, "1.0.0", "race", "cnwrace", &format!("10.238.0.{}/24", i + 2));
            firewall_conf("1.0.0", "race", json!({"ingressPolicy": "isolated"}), Some(&prev))
        })
        .collect();
    parallel_adds(&lab, &confs);
    let ruleset = lab.nft_ruleset();
    assert_eq!(ruleset.matches("table inet cni_firewall").count(), 1, "{ruleset}");
    assert_eq!(ruleset.matches("chain forward").count(), 2, "inet + bridge base chains: {ruleset}");
    assert_eq!(ruleset.matches("iifname \"cnwrace\" return").count(), 1, "{ruleset}");
    assert_eq!(ruleset.matches("chain cni-").count(), N, "{ruleset}");
    for (i, conf) in confs.iter().enumerate() {
        assert!(ruleset.contains(&format!("10.238.0.{} : jump cni-", i + 2)), "{ruleset}");
        ok(&lab.firewall("CHECK", Some(i), conf));
    }
}

#[test]
fn iptables_adds_race_safely() {
    let lab = Lab::new(N);
    let confs: Vec<Value> = (0..N)
        .map(|i| {
            let prev = lab.bridge_add(i, "1.0.0", "iprace", "cnwiprace", &format!("10.237.0.{}/24", i + 2));
            firewall_conf(
                "1.0.0",
                "iprace",
                json!({"backend": "iptables", "ingressPolicy": "same-bridge"}),
                Some(&prev),
            )
        })
        .collect();
    parallel_adds(&lab, &confs);
    let saved = lab.host_cmd("iptables-save", &["-t", "filter"]);
    assert_eq!(saved.matches("-j CNI-FORWARD").count(), 1, "{saved}");
    assert_eq!(saved.matches("-j CNI-ADMIN").count(), 1, "{saved}");
    assert_eq!(saved.matches("-i cnwiprace ! -o cnwiprace").count(), 1, "{saved}");
    for (i, conf) in confs.iter().enumerate() {
        assert_eq!(saved.matches(&format!("-s 10.237.0.{}/32 -j ACCEPT", i + 2)).count(), 1, "{saved}");
        ok(&lab.firewall("CHECK", Some(i), conf));
    }
}
