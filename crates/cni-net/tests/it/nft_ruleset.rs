//! nftables client against the real kernel: what we program is exactly what `nft` shows.
//! Root only; each test in its own throwaway network namespace.

use crate::nft_support::*;
use cni_net::nft::*;
use serde_json::{json, Value};

const T: &str = "cni-test";

fn net(s: &str) -> ipnet::IpNet {
    s.parse().unwrap()
}

fn nat_table(b: &mut Batch) {
    b.add_table(&Table::new(Family::Inet, T));
    add_nat_chain(b, T, "postrouting", Hook::Postrouting);
    add_nat_chain(b, T, "prerouting", Hook::Prerouting);
}

fn exprs_of(rule: &Value) -> Value {
    rule["expr"].clone()
}

#[test]
fn masquerade_chain_for_a_container_is_what_nft_shows() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::with_rule_handles();
        nat_table(&mut b);
        b.add_chain(&Chain::regular(Family::Inet, T, "CNI-abc"));
        let masq = RuleBuilder::new(Family::Inet, T, "CNI-abc")
            .saddr(net("10.88.0.0/16"))
            .daddr_not(net("224.0.0.0/4"))
            .masquerade()
            .comment("ctr abc")
            .build()
            .unwrap();
        let jump = RuleBuilder::new(Family::Inet, T, "postrouting")
            .saddr(net("10.88.0.5/32"))
            .counter()
            .jump("CNI-abc")
            .comment("ctr abc")
            .build()
            .unwrap();
        let masq_op = b.add_rule(&masq);
        let jump_op = b.add_rule(&jump);
        let outcome = nft.commit(&b).unwrap();

        let ruleset = nft_ruleset();
        let rules = chain_rules(&ruleset, T, "CNI-abc");
        assert_eq!(rules.len(), 1, "{}", nft_text());
        assert_eq!(rules[0]["comment"], "ctr abc");
        assert_eq!(rules[0]["handle"], json!(outcome.rule_handle(masq_op).unwrap()));
        assert_eq!(
            exprs_of(&rules[0]),
            json!([
                {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                           "right": {"prefix": {"addr": "10.88.0.0", "len": 16}}}},
                {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                           "right": {"prefix": {"addr": "224.0.0.0", "len": 4}}}},
                {"masquerade": null}
            ])
        );
        let rules = chain_rules(&ruleset, T, "postrouting");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0]["handle"], json!(outcome.rule_handle(jump_op).unwrap()));
        assert_eq!(
            exprs_of(&rules[0]),
            json!([
                {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                           "right": "10.88.0.5"}},
                {"counter": {"packets": 0, "bytes": 0}},
                {"jump": {"target": "CNI-abc"}}
            ])
        );
        let chains = objects(&ruleset, "chain");
        let post = chains.iter().find(|c| c["name"] == "postrouting").unwrap();
        assert_eq!(post["type"], "nat");
        assert_eq!(post["hook"], "postrouting");
        assert_eq!(post["prio"], 100);
    });
}

#[test]
fn dnat_and_mac_spoof_rules_are_what_nft_shows() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        nat_table(&mut b);
        b.add_rule(
            &RuleBuilder::new(Family::Inet, T, "prerouting")
                .fib_daddr_local()
                .dport(proto::TCP, 8080)
                .dnat("10.88.0.5".parse().unwrap(), Some(80))
                .build()
                .unwrap(),
        );
        b.add_table(&Table::new(Family::Bridge, T));
        b.add_chain(
            &Chain::base(
                Family::Bridge,
                T,
                "mac",
                ChainType::Filter,
                Hook::Prerouting,
                priority::BRIDGE_FILTER,
            )
            .with_policy(ChainPolicy::Accept),
        );
        b.add_rule(
            &RuleBuilder::new(Family::Bridge, T, "mac")
                .iifname("cnfveth0")
                .ether_saddr_not([0x0a, 0x58, 0x0a, 0x58, 0x00, 0x05])
                .drop()
                .build()
                .unwrap(),
        );
        nft.commit(&b).unwrap();

        let ruleset = nft_ruleset();
        let dnat = chain_rules(&ruleset, T, "prerouting");
        assert_eq!(
            exprs_of(&dnat[0]),
            json!([
                {"match": {"op": "==", "left": {"fib": {"result": "type", "flags": ["daddr"]}},
                           "right": "local"}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                           "right": 8080}},
                {"dnat": {"family": "ip", "addr": "10.88.0.5", "port": 80}}
            ])
        );
        let mac: Vec<_> = objects(&ruleset, "rule").into_iter().filter(|r| r["family"] == "bridge").collect();
        assert_eq!(mac.len(), 1);
        assert_eq!(
            exprs_of(mac[0]),
            json!([
                {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "cnfveth0"}},
                {"match": {"op": "!=", "left": {"payload": {"protocol": "ether", "field": "saddr"}},
                           "right": "0a:58:0a:58:00:05"}},
                {"drop": null}
            ])
        );
    });
}

fn tagged(chain: &str, tag: &str) -> Rule {
    RuleBuilder::new(Family::Inet, T, chain).counter().accept().comment(tag).build().unwrap()
}

fn comments(nft: &mut NftClient, chain: &str) -> Vec<String> {
    nft.list_rules(Family::Inet, T, chain)
        .unwrap()
        .into_iter()
        .map(|r| r.rule.comment.unwrap_or_default())
        .collect()
}

#[test]
fn a_batch_without_rule_handles_adds_the_same_rules_and_reports_no_handle() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let rulesets: Vec<Value> = [Batch::new(), Batch::with_rule_handles()]
            .into_iter()
            .map(|mut b| {
                b.add_table(&Table::new(Family::Inet, T));
                b.add_chain(&Chain::regular(Family::Inet, T, "c"));
                let ops: Vec<usize> = ["a", "b"].iter().map(|t| b.add_rule(&tagged("c", t))).collect();
                let out = nft.commit(&b).unwrap();
                let echoed = ops.iter().filter(|op| out.rule_handle(**op).is_some()).count();
                let rules = chain_rules(&nft_ruleset(), T, "c");
                let mut del = Batch::new();
                del.delete_table(Family::Inet, T);
                nft.commit(&del).unwrap();
                json!({"echoed": echoed, "comments": rules.iter().map(|r| r["comment"].clone()).collect::<Vec<_>>(),
                       "expr": rules.iter().map(exprs_of).collect::<Vec<_>>()})
            })
            .collect();
        assert_eq!(rulesets[0]["echoed"], json!(0), "no echo asked for, no handle reported");
        assert_eq!(rulesets[1]["echoed"], json!(2));
        assert_eq!(rulesets[0]["comments"], json!(["a", "b"]));
        assert_eq!(rulesets[0]["comments"], rulesets[1]["comments"]);
        assert_eq!(rulesets[0]["expr"], rulesets[1]["expr"]);
    });
}

#[test]
fn delete_by_handle_removes_only_that_rule_and_positions_work() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::with_rule_handles();
        b.add_table(&Table::new(Family::Inet, T));
        b.add_chain(&Chain::regular(Family::Inet, T, "c"));
        let ops: Vec<usize> = ["a", "b", "c"].iter().map(|t| b.add_rule(&tagged("c", t))).collect();
        let out = nft.commit(&b).unwrap();
        let handles: Vec<u64> = ops.iter().map(|op| out.rule_handle(*op).unwrap()).collect();
        assert_eq!(comments(&mut nft, "c"), ["a", "b", "c"]);

        // Positions: at the start, before b, after b.
        let mut b = Batch::new();
        b.insert_rule(&tagged("c", "first"));
        b.insert_rule_before(&tagged("c", "before-b"), handles[1]);
        b.add_rule_after(&tagged("c", "after-b"), handles[1]);
        nft.commit(&b).unwrap();
        assert_eq!(comments(&mut nft, "c"), ["first", "a", "before-b", "b", "after-b", "c"]);

        // A plugin finds its own rule by comment in one chain and deletes it by handle.
        let listed = nft.list_rules(Family::Inet, T, "c").unwrap();
        let mine = listed.iter().find(|r| r.rule.comment.as_deref() == Some("b")).unwrap();
        assert_eq!(mine.handle, handles[1]);
        let before: Vec<Value> = chain_rules(&nft_ruleset(), T, "c");
        let mut b = Batch::new();
        b.delete_rule(Family::Inet, T, "c", mine.handle);
        nft.commit(&b).unwrap();
        let after: Vec<Value> = chain_rules(&nft_ruleset(), T, "c");
        let expected: Vec<Value> = before.into_iter().filter(|r| r["handle"] != json!(handles[1])).collect();
        assert_eq!(after, expected);
        assert_eq!(after.len(), 5);

        // Deleting it again names the operation and says ENOENT.
        let mut b = Batch::new();
        b.delete_rule(Family::Inet, T, "c", mine.handle);
        let err = nft.commit(&b).unwrap_err();
        assert!(err.is_not_found(), "{err}");

        // Flush empties the chain; destroy of a missing chain is fine.
        let mut b = Batch::new();
        b.flush_chain(Family::Inet, T, "c");
        b.destroy_chain(Family::Inet, T, "no-such-chain");
        nft.commit(&b).unwrap();
        assert!(nft.list_rules(Family::Inet, T, "c").unwrap().is_empty());
    });
}

#[test]
fn a_failing_batch_applies_nothing_and_names_the_failing_operation() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        b.add_chain(&Chain::regular(Family::Inet, T, "c"));
        b.add_rule(&tagged("c", "x"));
        b.delete_rule(Family::Inet, T, "c", 4242);
        b.add_rule(&tagged("c", "y"));
        let err = nft.commit(&b).unwrap_err();
        match &err {
            NftError::Operation { index, operation, errno, .. } => {
                assert_eq!(*index, 3);
                assert_eq!(*errno, libc::ENOENT);
                assert!(operation.contains("delete rule inet cni-test c handle 4242"), "{operation}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(objects(&nft_ruleset(), "table").is_empty(), "{}", nft_text());
        assert_eq!(nft.get_table(Family::Inet, T).unwrap(), None);

        // EEXIST and ENOENT are told apart.
        let mut b = Batch::new();
        b.create_table(&Table::new(Family::Inet, T).with_comment("owned by cni"));
        nft.commit(&b).unwrap();
        let info = nft.get_table(Family::Inet, T).unwrap().unwrap();
        assert_eq!(info.name, T);
        // nft 1.0.6 leaves table comments out of its JSON; the text shows them.
        assert!(nft_text().contains("comment \"owned by cni\""), "{}", nft_text());
        let err = nft.commit(&b).unwrap_err();
        assert!(err.is_already_exists() && !err.is_not_found(), "{err}");
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T)); // create-if-missing: fine
        b.delete_table(Family::Ipv4, "missing");
        let err = nft.commit(&b).unwrap_err();
        assert!(err.is_not_found() && !err.is_already_exists(), "{err}");
        let mut b = Batch::new();
        b.destroy_table(Family::Inet, T);
        b.destroy_table(Family::Inet, T);
        nft.commit(&b).unwrap();
        assert_eq!(nft.get_table(Family::Inet, T).unwrap(), None);
    });
}

/// A batch with table `T`: a forward chain, a chain `ctr`, named and anonymous sets of
/// every key type the plugins use, a concatenated verdict map, and three rules in `fwd`
/// that match through them.
fn sets_maps_and_their_rules() -> Batch {
    let mut b = Batch::new();
    b.add_table(&Table::new(Family::Inet, T));
    b.add_chain(&Chain::base(Family::Inet, T, "fwd", ChainType::Filter, Hook::Forward, priority::FILTER));
    b.add_chain(&Chain::regular(Family::Inet, T, "ctr"));
    let ip = |s: &str| KeyValue::Ipv4(s.parse().unwrap());
    let addrs = b.add_set(&Set::named(Family::Inet, T, "addrs", &[KeyType::Ipv4Addr]));
    b.add_elements(&addrs, &[SetElement::new(&[ip("10.88.0.2")]), SetElement::new(&[ip("10.88.0.3")])]);
    let ports = b.add_set(&Set::anonymous(Family::Inet, T, &[KeyType::InetService]));
    b.add_elements(
        &ports,
        &[SetElement::new(&[KeyValue::Port(80)]), SetElement::new(&[KeyValue::Port(443)])],
    );
    let jumps = b.add_set(
        &Set::named(Family::Inet, T, "jumps", &[KeyType::Ipv4Addr, KeyType::InetService])
            .map_to(MapData::Verdict),
    );
    b.add_elements(
        &jumps,
        &[SetElement::new(&[ip("10.88.0.2"), KeyValue::Port(8080)])
            .with_verdict(Verdict::Jump("ctr".into()))],
    );
    let macs = b.add_set(&Set::named(Family::Inet, T, "macs", &[KeyType::EtherAddr]));
    b.add_elements(&macs, &[SetElement::new(&[KeyValue::Ether([2, 0, 0, 0, 0, 9])])]);
    let names = b.add_set(&Set::named(Family::Inet, T, "ifnames", &[KeyType::IfName]));
    b.add_elements(&names, &[SetElement::new(&[KeyValue::IfName("cnfbr0".into())])]);
    let v6 = b.add_set(&Set::named(Family::Inet, T, "v6", &[KeyType::Ipv6Addr]));
    b.add_elements(&v6, &[SetElement::new(&[KeyValue::Ipv6("fd00::5".parse().unwrap())])]);
    for rule in [
        RuleBuilder::new(Family::Inet, T, "fwd")
            .load_key(&[Field::IpDaddr])
            .in_set(&addrs)
            .load_key(&[Field::DstPort])
            .in_set(&ports)
            .accept(),
        RuleBuilder::new(Family::Inet, T, "fwd").load_key(&[Field::IpDaddr, Field::DstPort]).vmap(&jumps),
        RuleBuilder::new(Family::Inet, T, "fwd").load_key(&[Field::IifName]).not_in_set(&names).drop(),
    ] {
        b.add_rule(&rule.build().unwrap());
    }
    b
}

/// The rules of `fwd` as nft lists them: set lookups, a concatenated vmap, a negated
/// interface-name set.
fn fwd_rules_match_through_the_sets(ruleset: &Value) {
    let rules = chain_rules(ruleset, T, "fwd");
    assert_eq!(
        exprs_of(&rules[0]),
        json!([
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@addrs"}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "th", "field": "dport"}},
                       "right": {"set": [80, 443]}}},
            {"accept": null}
        ])
    );
    assert_eq!(
        exprs_of(&rules[1]),
        json!([{"vmap": {"key": {"concat": [
            {"payload": {"protocol": "ip", "field": "daddr"}},
            {"payload": {"protocol": "th", "field": "dport"}}]}, "data": "@jumps"}}])
    );
    assert_eq!(
        exprs_of(&rules[2]),
        json!([
            {"match": {"op": "!=", "left": {"meta": {"key": "iifname"}}, "right": "@ifnames"}},
            {"drop": null}
        ])
    );
}

#[test]
fn sets_and_maps_named_anonymous_and_concatenated() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        nft.commit(&sets_maps_and_their_rules()).unwrap();

        // Element updates on a named set in a later batch.
        let ip = |s: &str| KeyValue::Ipv4(s.parse().unwrap());
        let addrs = SetRef::named(Family::Inet, T, "addrs");
        let mut b = Batch::new();
        b.delete_elements(&addrs, &[SetElement::new(&[ip("10.88.0.2")])]);
        b.add_elements(&addrs, &[SetElement::new(&[ip("10.88.0.9")])]);
        nft.commit(&b).unwrap();

        let ruleset = nft_ruleset();
        let sets: Vec<&Value> = objects(&ruleset, "set");
        let elems = |name: &str| {
            let s =
                sets.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("{name}: {}", nft_text()));
            s["elem"].clone()
        };
        let mut got = elems("addrs").as_array().unwrap().clone();
        got.sort_by_key(|v| v.to_string());
        assert_eq!(got, vec![json!("10.88.0.3"), json!("10.88.0.9")]);
        assert_eq!(elems("macs"), json!(["02:00:00:00:00:09"]));
        assert_eq!(elems("ifnames"), json!(["cnfbr0"]));
        assert_eq!(elems("v6"), json!(["fd00::5"]));
        let maps = objects(&ruleset, "map");
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0]["type"], json!(["ipv4_addr", "inet_service"]));
        assert_eq!(maps[0]["map"], "verdict");
        assert_eq!(maps[0]["elem"], json!([[{"concat": ["10.88.0.2", 8080]}, {"jump": {"target": "ctr"}}]]));

        fwd_rules_match_through_the_sets(&ruleset);

        // A set in use cannot go; once its rule is gone it can.
        let mut b = Batch::new();
        b.delete_set(Family::Inet, T, "ifnames");
        assert_eq!(nft.commit(&b).unwrap_err().errno(), Some(libc::EBUSY));
        let handle = nft.list_rules(Family::Inet, T, "fwd").unwrap()[2].handle;
        let mut b = Batch::new();
        b.delete_rule(Family::Inet, T, "fwd", handle);
        b.delete_set(Family::Inet, T, "ifnames");
        b.destroy_set(Family::Inet, T, "ifnames");
        nft.commit(&b).unwrap();
        assert!(objects(&nft_ruleset(), "set").iter().all(|s| s["name"] != "ifnames"));
    });
}

#[test]
fn listed_rules_decode_to_the_expressions_that_were_added() {
    in_fresh_netns(|| {
        let mut nft = NftClient::new().unwrap();
        let mut b = Batch::new();
        nat_table(&mut b);
        b.add_chain(&Chain::base(
            Family::Inet,
            T,
            "filter",
            ChainType::Filter,
            Hook::Forward,
            priority::FILTER,
        ));
        b.add_chain(&Chain::regular(Family::Inet, T, "other").with_comment("jump target"));
        let filter = |f: fn(RuleBuilder) -> RuleBuilder| {
            f(RuleBuilder::new(Family::Inet, T, "filter")).comment("mine").build().unwrap()
        };
        let rules = vec![
            filter(|r| r.ct_state(ct_state::ESTABLISHED | ct_state::RELATED).accept()),
            filter(|r| r.iifname("cnfbr0").oifname_not("cnfbr0").saddr_not(net("10.0.0.0/8")).drop()),
            filter(|r| r.saddr(net("fd00:88::/64")).daddr(net("fd00:1:2::/47")).goto("other")),
            filter(|r| r.ether_saddr([1, 2, 3, 4, 5, 6]).sport(proto::UDP, 53).ret()),
            filter(|r| r.mark_any(0x2000).set_mark(7).or_mark(0x4000).counter().jump("other")),
        ];
        for r in &rules {
            b.add_rule(r);
        }
        let nat = RuleBuilder::new(Family::Inet, T, "postrouting")
            .l4proto(proto::TCP)
            .snat("192.0.2.1".parse().unwrap(), Some(4000))
            .build()
            .unwrap();
        b.add_rule(&nat);
        nft.commit(&b).unwrap();

        let listed = nft.list_rules(Family::Inet, T, "filter").unwrap();
        let decoded: Vec<Rule> = listed.into_iter().map(|l| l.rule).collect();
        assert_eq!(decoded, rules);
        let listed = nft.list_rules(Family::Inet, T, "postrouting").unwrap();
        assert_eq!(listed.len(), 1);
        // The kernel reports the range it derived: max = min, and the range flags.
        let mut want = nat.exprs.clone();
        if let Some(Expr::Nat { flags, addr_max, proto_max, .. }) = want.last_mut() {
            *flags = nat_flags::MAP_IPS | nat_flags::PROTO_SPECIFIED;
            *addr_max = Some(Register::R1);
            *proto_max = Some(Register::R2);
        }
        assert_eq!(listed[0].rule.exprs, want);

        let chains = nft.list_chains(Family::Inet, T).unwrap();
        let names: Vec<&str> = chains.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["postrouting", "prerouting", "filter", "other"]);
        assert_eq!(chains[0].hook, Some((Hook::Postrouting, priority::SRCNAT)));
        assert_eq!(chains[3].hook, None);
        assert_eq!(chains[3].comment.as_deref(), Some("jump target"));
        assert_eq!(chains[0].comment, None);
        // A chain that does not exist simply has no rules (what DEL of a gone container wants).
        assert!(nft.list_rules(Family::Inet, T, "missing").unwrap().is_empty());
    });
}

#[test]
fn a_client_stays_bound_to_the_namespace_it_was_created_in() {
    use std::sync::mpsc;
    require_root();
    let (client_tx, client_rx) = mpsc::channel::<NftClient>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let creator = std::thread::spawn(move || {
        in_fresh_netns(move || {
            client_tx.send(NftClient::new().unwrap()).unwrap();
            done_rx.recv().unwrap();
            objects(&nft_ruleset(), "table").len()
        })
    });
    let user = in_fresh_netns(move || {
        let mut nft = client_rx.recv().unwrap();
        let mut b = Batch::new();
        b.add_table(&Table::new(Family::Inet, T));
        nft.commit(&b).unwrap();
        let here = objects(&nft_ruleset(), "table").len();
        done_tx.send(()).unwrap();
        here
    });
    assert_eq!(user, 0, "the table must not appear in the namespace of the thread using the client");
    assert_eq!(creator.join().unwrap(), 1, "the table lands in the namespace the client was made in");
}
