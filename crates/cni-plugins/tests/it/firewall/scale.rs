//! The nftables backend with 20,000 other attachments in its table: ADD, CHECK and DEL of
//! one more still work, touch only that attachment, and leave the others as they were.
//! The other attachments are written with `nft -f` in the test's host namespace, shaped
//! exactly like the plugin's own. Whether the cost per operation stays flat in the size
//! of the table is measured by cni-bench (W6).

use super::support;

use serde_json::json;
use std::io::Write;
use std::process::Stdio;
use support::{firewall_conf, ok, Lab};

const OTHERS: u32 = 20_000;

/// Adds attachments `0..count` (fake chains + map elements) to `inet cni_firewall`.
fn add_fake_attachments(lab: &Lab, count: u32) {
    let mut script = String::new();
    for n in 0..count {
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

/// `nft -j <args>` in the lab's host namespace: its list of objects.
fn nft_objects(lab: &Lab, args: &[&str]) -> Vec<serde_json::Value> {
    let out = lab.env.host.command("nft").arg("-j").args(args).output().unwrap();
    assert!(out.status.success(), "nft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    listing["nftables"].as_array().unwrap().clone()
}

/// (fake attachment chains, attachment chains that are not fake, `ctr4` elements). Lists
/// chains without their rules and the one map: listing 40,000 rules would take minutes.
fn table_parts(lab: &Lab) -> (usize, usize, usize) {
    let chains = nft_objects(lab, &["list", "chains", "inet"]);
    let names: Vec<&str> = chains.iter().filter_map(|o| o["chain"]["name"].as_str()).collect();
    let fake = names.iter().filter(|n| n.starts_with("cni-fake")).count();
    let own = names.iter().filter(|n| n.starts_with("cni-") && !n.starts_with("cni-fake")).count();
    let map = nft_objects(lab, &["list", "map", "inet", "cni_firewall", "ctr4"]);
    let elements = map.iter().filter_map(|o| o["map"]["elem"].as_array()).map(Vec::len).sum();
    (fake, own, elements)
}

#[test]
fn add_check_and_del_work_among_twenty_thousand_other_attachments() {
    let lab = Lab::new(1);
    let prev = lab.bridge_add(0, "1.0.0", "scale", "cnwsc", "10.240.0.2/24");
    let conf = firewall_conf("1.0.0", "scale", json!({}), Some(&prev));
    ok(&lab.firewall("ADD", Some(0), &conf)); // bootstraps the table
    ok(&lab.firewall("DEL", Some(0), &conf));
    let others = OTHERS as usize;
    add_fake_attachments(&lab, OTHERS);
    assert_eq!(table_parts(&lab), (others, 0, others));

    ok(&lab.firewall("ADD", Some(0), &conf));
    assert_eq!(table_parts(&lab), (others, 1, others + 1), "after ADD");
    ok(&lab.firewall("CHECK", Some(0), &conf));
    ok(&lab.firewall("DEL", Some(0), &conf));
    assert_eq!(table_parts(&lab), (others, 0, others), "after DEL");
}
