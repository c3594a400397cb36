//! Per-operation cost of the nftables backend with 10, 1,000 and 20,000 other attachments
//! in the table (DESIGN decision 6). The other attachments are written with `nft -f` in
//! the test's host namespace, shaped exactly like the plugin's own.

mod common;
mod firewall_support;

use firewall_support::{firewall_conf, ok, Lab};
use serde_json::json;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

/// Adds attachments `from..to` (fake chains + map elements) to `inet cni_firewall`.
fn add_fake_attachments(lab: &Lab, from: u32, to: u32) {
    let mut script = String::new();
    for n in from..to {
        let ip = std::net::Ipv4Addr::from(0x0a80_0000 + n); // 10.128.0.0/9
        let chain = format!("cni-fake{n:08}");
        script.push_str(&format!(
            "add chain inet cni_firewall {chain}\n\
             add rule inet cni_firewall {chain} ip daddr {ip} ct state established,related accept\n\
             add rule inet cni_firewall {chain} ip saddr {ip} accept comment \"ip={ip}\"\n\
             add element inet cni_firewall ctr4 {{ {ip} : jump {chain} }}\n"
        ));
    }
    let mut child = lab.env.host.command("nft").args(["-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "nft -f failed");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn add_and_del_cost_does_not_grow_with_the_number_of_containers() {
    let lab = Lab::new(1);
    let prev = lab.bridge_add(0, "1.0.0", "scale", "cnwsc", "10.240.0.2/24");
    let conf = firewall_conf("1.0.0", "scale", json!({}), Some(&prev));
    ok(&lab.firewall("ADD", Some(0), &conf)); // bootstraps the table
    ok(&lab.firewall("DEL", Some(0), &conf));

    let mut measured = Vec::new();
    let mut have = 0;
    for others in [10u32, 1_000, 20_000] {
        add_fake_attachments(&lab, have, others);
        have = others;
        let (mut adds, mut checks, mut dels) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            let add = lab.firewall("ADD", Some(0), &conf);
            ok(&add);
            let check = lab.firewall("CHECK", Some(0), &conf);
            ok(&check);
            let del = lab.firewall("DEL", Some(0), &conf);
            ok(&del);
            adds.push(add.elapsed);
            checks.push(check.elapsed);
            dels.push(del.elapsed);
        }
        let row = (others, median(adds), median(checks), median(dels));
        eprintln!("timing: {} other attachments: ADD {:?} CHECK {:?} DEL {:?}", row.0, row.1, row.2, row.3);
        measured.push(row);
    }
    let (_, add10, _, del10) = measured[0];
    let (_, add20k, _, del20k) = measured[2];
    // Process start-up dominates; allow noise, but not a cost proportional to the table.
    let bound = |small: Duration| small * 4 + Duration::from_millis(40);
    assert!(add20k < bound(add10), "ADD grew from {add10:?} to {add20k:?}");
    assert!(del20k < bound(del10), "DEL grew from {del10:?} to {del20k:?}");
}
