//! `bandwidth` chained after `bridge` on the real kernel, in throwaway namespaces: what it
//! puts on the host (read back by netlink and `tc -j`), CHECK, DEL, GC, coexistence with
//! other tc users, and bad input. Needs root.

use crate::common;
mod rate;
mod support;
use cni_net::netlink::tc::{QdiscKind, QdiscSpec, RedirectFilter, TcHandle};
use cni_testkit::ns::HostAndContainers;
use common::{call, ok};
use serde_json::json;
use support::*;

const BOTH: fn() -> serde_json::Value = || json!({"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 16_000_000, "egressBurst": 160_000});

#[test]
fn add_shapes_both_ways_check_passes_and_del_cleans_up() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr0", "10.151.0.2/24");
    let bw_conf = conf("1.0.0", BOTH(), Some(&prev));
    let result = common::add("bandwidth", &env.host, c, &bw_conf);

    // prevResult passed on, the IFB appended (host side: no sandbox).
    assert_eq!(result["interfaces"].as_array().unwrap().len(), 4, "{result}");
    assert_eq!(result["ips"], prev["ips"]);
    let last = &result["interfaces"][3];
    assert!(last.get("sandbox").is_none() || last["sandbox"] == "", "{result}");

    let mut nl = env.host.netlink().unwrap();
    let veth = host_veth(&env.host, &prev);
    let ifb = ifb_from_result(&env.host, &result);
    assert!(ifb.up);
    assert_eq!(ifb.mtu, veth.mtu);
    assert_eq!(ifb.alias.as_deref(), Some(format!("cni-bandwidth:{NETWORK}:{}:eth0", c.name()).as_str()));
    assert_eq!(nl.root_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Tbf(tbf(8_000_000, 80_000)));
    assert_eq!(nl.root_qdisc(ifb.index).unwrap().unwrap().kind, QdiscKind::Tbf(tbf(16_000_000, 160_000)));
    assert_eq!(nl.ingress_hook_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Ingress);
    let filters = nl.filters(veth.index, TcHandle::INGRESS_HOOK).unwrap();
    assert!(filters.iter().any(|f| f.redirect_to == Some(ifb.index)), "{filters:?}");

    // The same state as `tc` sees it.
    let shown = tc_qdiscs(&env.host);
    let rate_on = |dev: &str| {
        shown.iter().find(|q| q["dev"] == dev && q["kind"] == "tbf").map(|q| q["options"]["rate"].clone())
    };
    assert_eq!(rate_on(&veth.name), Some(json!(1_000_000)), "{shown:?}");
    assert_eq!(rate_on(&ifb.name), Some(json!(2_000_000)), "{shown:?}");
    assert!(shown.iter().any(|q| q["dev"] == veth.name.as_str() && q["kind"] == "ingress"), "{shown:?}");

    let mut check_conf = bw_conf.clone();
    check_conf["prevResult"] = result.clone();
    ok(call("bandwidth", "CHECK", &env.host, Some(c), &check_conf).run());

    // DEL with the veth still there: IFB gone, the veth as bridge left it.
    ok(del(&env.host, c, &check_conf));
    assert!(nl.link_by_name(&ifb.name).unwrap().is_none());
    let root = nl.root_qdisc(veth.index).unwrap();
    assert!(root.as_ref().is_none_or(|q| q.is_kernel_default()), "{root:?}");
    assert!(nl.ingress_hook_qdisc(veth.index).unwrap().is_none());
    // Idempotent, and fine without a namespace.
    ok(del(&env.host, c, &check_conf));
    ok(call("bandwidth", "DEL", &env.host, Some(c), &check_conf).unset("CNI_NETNS").run());
}

#[test]
fn del_after_the_container_is_gone_removes_the_ifb() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("0.4.0", &env.host, c, "cnhbr1", "10.152.0.2/24");
    let bw_conf = conf("0.4.0", json!({"egressRate": 1_000_000, "egressBurst": 100_000}), Some(&prev));
    let result = common::add("bandwidth", &env.host, c, &bw_conf);
    let ifb = ifb_from_result(&env.host, &result);
    // The runtime tore the container's interface down first.
    c.netlink().unwrap().delete_link(c.netlink().unwrap().require_link("eth0").unwrap().index).unwrap();
    ok(call("bandwidth", "DEL", &env.host, Some(c), &bw_conf).unset("CNI_NETNS").run());
    assert!(env.host.netlink().unwrap().link_by_name(&ifb.name).unwrap().is_none());
}

/// A pod author's `runtimeConfig.bandwidth` (pod annotations in Kubernetes) cannot lift
/// the administrator's limit: the kernel's tbf has the configured rate, and the pod's
/// egress limit is not taken either (the configuration wins as a whole, as in the
/// reference).
#[test]
fn runtime_config_cannot_lift_a_configured_limit() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.1.0", &env.host, c, "cnhbr2", "10.153.0.2/24");
    let mut bw_conf = conf("1.1.0", json!({"ingressRate": 1_000_000, "ingressBurst": 100_000}), Some(&prev));
    bw_conf["runtimeConfig"] = json!({"bandwidth": {
        "ingressRate": 40_000_000_000u64, "ingressBurst": 400_000_000,
        "egressRate": 40_000_000_000u64, "egressBurst": 400_000_000}});
    let out = call("bandwidth", "ADD", &env.host, Some(c), &bw_conf).run();
    let result = out.json();
    assert!(out.stderr.contains("ignoring runtimeConfig.bandwidth"), "{}", out.stderr);
    assert_eq!(result["interfaces"].as_array().unwrap().len(), 3, "no egress limit, no IFB: {result}");
    let veth = host_veth(&env.host, &prev);
    let root = env.host.netlink().unwrap().root_qdisc(veth.index).unwrap().unwrap();
    assert_eq!(root.kind, QdiscKind::Tbf(tbf(1_000_000, 100_000)));
    // As tc reports it: 1 Mbit/s is 125,000 bytes per second.
    let shown = tc_qdiscs(&env.host);
    let tbf_on_veth = shown.iter().find(|q| q["dev"] == veth.name.as_str() && q["kind"] == "tbf");
    assert_eq!(tbf_on_veth.map(|q| q["options"]["rate"].clone()), Some(json!(125_000)), "{shown:?}");
    assert!(ifbs(&mut env.host.netlink().unwrap()).is_empty());
}

/// Go's JSON decoder matches keys without regard to case, and so do we: however the
/// administrator spells a limit key, it is a configured limit, and the pod's runtime value
/// is ignored. (Keys were once looked up exactly to decide this: `"IngressRate"` was
/// applied as a limit, yet let the pod's 40 Gbit/s through.)
#[test]
fn runtime_config_cannot_lift_a_configured_limit_however_its_keys_are_spelt() {
    let spellings = [
        ("ingressRate", "ingressBurst"),
        ("ingressrate", "ingressburst"),
        ("IngressRate", "IngressBurst"),
        ("INGRESSRATE", "INGRESSBURST"),
    ];
    let env = HostAndContainers::with_prefix(PREFIX, spellings.len()).unwrap();
    for (i, ((rate, burst), c)) in spellings.iter().zip(&env.containers).enumerate() {
        let prev = attach("1.1.0", &env.host, c, "cnhbrs", &format!("10.163.0.{}/24", i + 2));
        let mut bw_conf = conf("1.1.0", json!({*rate: 1_000_000, *burst: 100_000}), Some(&prev));
        bw_conf["runtimeConfig"] = json!({"bandwidth": {
            "ingressRate": 40_000_000_000u64, "ingressBurst": 400_000_000}});
        common::add("bandwidth", &env.host, c, &bw_conf);
        let veth = host_veth(&env.host, &prev);
        // The kernel's own account, through tc: 1 Mbit/s is 125,000 bytes per second.
        let shown = tc_qdiscs(&env.host);
        let tbf_on_veth = shown.iter().find(|q| q["dev"] == veth.name.as_str() && q["kind"] == "tbf");
        assert_eq!(
            tbf_on_veth.map(|q| q["options"]["rate"].clone()),
            Some(json!(125_000)),
            "{rate}: {shown:?}"
        );
    }
}

/// Without limit keys in the configuration, the runtime's limits apply.
#[test]
fn runtime_config_limits_apply_when_none_are_configured() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.1.0", &env.host, c, "cnhbrc", "10.162.0.2/24");
    let mut bw_conf = conf("1.1.0", json!({}), Some(&prev));
    bw_conf["runtimeConfig"] = json!({"bandwidth": {"ingressRate": 4_000_000, "ingressBurst": 40_000}});
    let result = common::add("bandwidth", &env.host, c, &bw_conf);
    assert_eq!(result["interfaces"].as_array().unwrap().len(), 3, "no egress limit, no IFB: {result}");
    let veth = host_veth(&env.host, &prev);
    let root = env.host.netlink().unwrap().root_qdisc(veth.index).unwrap().unwrap();
    assert_eq!(root.kind, QdiscKind::Tbf(tbf(4_000_000, 40_000)));
    assert!(ifbs(&mut env.host.netlink().unwrap()).is_empty());
}

#[test]
fn check_reports_changed_rates_and_missing_ifb() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr3", "10.154.0.2/24");
    let mut bw_conf = conf("1.0.0", BOTH(), Some(&prev));
    let result = common::add("bandwidth", &env.host, c, &bw_conf);
    bw_conf["prevResult"] = result.clone();

    let mut nl = env.host.netlink().unwrap();
    let veth = host_veth(&env.host, &prev);
    nl.replace_qdisc(&QdiscSpec::tbf_root(veth.index, TcHandle::new(1, 0), tbf(9_000_000, 80_000))).unwrap();
    let err = call("bandwidth", "CHECK", &env.host, Some(c), &bw_conf).run().error();
    assert!(err.msg.contains("rate 1125000 B/s") && err.msg.contains(&veth.name), "{}", err.msg);
    nl.replace_qdisc(&QdiscSpec::tbf_root(veth.index, TcHandle::new(1, 0), tbf(8_000_000, 80_000))).unwrap();
    ok(call("bandwidth", "CHECK", &env.host, Some(c), &bw_conf).run());

    let ifb = ifb_from_result(&env.host, &result);
    nl.delete_link(ifb.index).unwrap();
    let err = call("bandwidth", "CHECK", &env.host, Some(c), &bw_conf).run().error();
    assert!(err.msg.contains("missing"), "{}", err.msg);
}

#[test]
fn a_foreign_root_qdisc_is_not_replaced_and_a_clsact_is_shared() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr4", "10.155.0.2/24");
    let veth = host_veth(&env.host, &prev);
    let mut nl = env.host.netlink().unwrap();
    // Another tool shapes the veth with its own tbf and uses clsact.
    let foreign = tbf(50_000_000, 500_000);
    nl.add_qdisc(&QdiscSpec::tbf_root(veth.index, TcHandle::new(5, 0), foreign)).unwrap();
    nl.add_qdisc(&QdiscSpec::clsact(veth.index)).unwrap();

    let out = call("bandwidth", "ADD", &env.host, Some(c), &conf("1.0.0", BOTH(), Some(&prev))).run();
    let err = out.error();
    assert!(err.msg.contains("root qdisc tbf 5:"), "{}", err.msg);
    // Nothing was left behind, and the other tool's qdiscs are untouched.
    assert!(ifbs(&mut nl).is_empty());
    assert_eq!(nl.root_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Tbf(foreign));
    assert_eq!(nl.ingress_hook_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Clsact);

    // Egress only: our filter goes under the existing clsact, and DEL leaves the clsact.
    let egress = conf("1.0.0", json!({"egressRate": 2_000_000, "egressBurst": 20_000}), Some(&prev));
    let result = common::add("bandwidth", &env.host, c, &egress);
    let ifb = ifb_from_result(&env.host, &result);
    assert!(nl
        .filters(veth.index, TcHandle::INGRESS_HOOK)
        .unwrap()
        .iter()
        .any(|f| f.redirect_to == Some(ifb.index)));
    ok(del(&env.host, c, &egress));
    assert!(!has_redirect(&mut nl, &veth));
    assert_eq!(nl.ingress_hook_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Clsact);
    assert_eq!(nl.root_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Tbf(foreign));
}

#[test]
fn a_failure_halfway_rolls_back_everything_add_did() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbra", "10.159.0.2/24");
    let veth = host_veth(&env.host, &prev);
    let mut nl = env.host.netlink().unwrap();
    // Another tool's filter sits at the priority bandwidth uses: found only after the
    // ingress tbf, the IFB and its tbf were made.
    let bridge = nl.require_link("cnhbra").unwrap();
    nl.add_qdisc(&QdiscSpec::clsact(veth.index)).unwrap();
    let foreign = RedirectFilter {
        index: veth.index,
        parent: TcHandle::INGRESS_HOOK,
        priority: 0x0bd0,
        target_index: bridge.index,
    };
    nl.add_redirect_filter(&foreign).unwrap();

    let err = call("bandwidth", "ADD", &env.host, Some(c), &conf("1.0.0", BOTH(), Some(&prev))).run().error();
    assert!(err.msg.contains("already has ingress filters at priority"), "{}", err.msg);
    assert!(ifbs(&mut nl).is_empty());
    let root = nl.root_qdisc(veth.index).unwrap();
    assert!(root.as_ref().is_none_or(|q| q.is_kernel_default()), "{root:?}");
    assert_eq!(nl.ingress_hook_qdisc(veth.index).unwrap().unwrap().kind, QdiscKind::Clsact);
    let filters = nl.filters(veth.index, TcHandle::INGRESS_HOOK).unwrap();
    assert!(filters.iter().any(|f| f.redirect_to == Some(bridge.index)), "{filters:?}");
    // DEL does not take the other tool's filter for ours.
    ok(del(&env.host, c, &conf("1.0.0", BOTH(), Some(&prev))));
    let filters = nl.filters(veth.index, TcHandle::INGRESS_HOOK).unwrap();
    assert!(filters.iter().any(|f| f.redirect_to == Some(bridge.index)), "{filters:?}");
}

#[test]
fn gc_removes_ifbs_of_attachments_no_longer_in_use() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let limits = json!({"egressRate": 1_000_000, "egressBurst": 100_000});
    let prev_a = attach("1.1.0", &env.host, a, "cnhbr5", "10.156.0.2/24");
    let prev_b = attach("1.1.0", &env.host, b, "cnhbr5", "10.156.0.3/24");
    let ifb_a = ifb_from_result(
        &env.host,
        &common::add("bandwidth", &env.host, a, &conf("1.1.0", limits.clone(), Some(&prev_a))),
    );
    let ifb_b = ifb_from_result(
        &env.host,
        &common::add("bandwidth", &env.host, b, &conf("1.1.0", limits, Some(&prev_b))),
    );

    let mut gc = conf("1.1.0", json!({}), None);
    gc["cni.dev/valid-attachments"] = json!([{"containerID": a.name(), "ifname": "eth0"}]);
    ok(call("bandwidth", "GC", &env.host, None, &gc).run());
    let mut nl = env.host.netlink().unwrap();
    assert!(nl.link_by_name(&ifb_a.name).unwrap().is_some());
    assert!(nl.link_by_name(&ifb_b.name).unwrap().is_none());

    // Another network's GC leaves ours alone.
    let mut other = gc.clone();
    other["name"] = json!("othernet");
    other["cni.dev/valid-attachments"] = json!([]);
    ok(call("bandwidth", "GC", &env.host, None, &other).run());
    assert!(nl.link_by_name(&ifb_a.name).unwrap().is_some());
    ok(call("bandwidth", "STATUS", &env.host, None, &gc).run());
}

/// A bandwidth ADD killed between creating its IFB and labelling it leaves one GC cannot
/// attribute by alias: the group it is created in marks it. Played here by making such an
/// IFB by hand, next to an unlabelled IFB outside the group (as the reference makes them),
/// which GC must leave alone, and a live one of ours, labelled and back in group 0.
#[test]
fn gc_removes_an_ifb_whose_add_was_killed_before_labelling_it() {
    use cni_net::netlink::LinkSpec;
    // The group the plugin creates an IFB in until its alias is set, pinned here: it is
    // state on the node, so a newer plugin's GC must know an older one's half-made IFBs.
    const UNLABELLED_IFB_GROUP: u32 = 0x6277_6966;
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.1.0", &env.host, c, "cnhbrb", "10.163.0.2/24");
    let limits = json!({"egressRate": 1_000_000, "egressBurst": 100_000});
    let live = ifb_from_result(
        &env.host,
        &common::add("bandwidth", &env.host, c, &conf("1.1.0", limits, Some(&prev))),
    );
    let mut nl = env.host.netlink().unwrap();
    let live = nl.link_by_name(&live.name).unwrap().unwrap();
    assert_eq!(live.group, 0, "a labelled IFB leaves the mark group: {live:?}");
    assert!(live.alias.is_some(), "{live:?}");

    let half_made = "bwp0123456789ab".to_string();
    nl.add_ifb(&LinkSpec::new(half_made.clone()).group(UNLABELLED_IFB_GROUP)).unwrap();
    let foreign = "bwpba9876543210".to_string();
    nl.add_ifb(&LinkSpec::new(foreign.clone())).unwrap();

    let mut gc = conf("1.1.0", json!({}), None);
    gc["cni.dev/valid-attachments"] = json!([{"containerID": c.name(), "ifname": "eth0"}]);
    ok(call("bandwidth", "GC", &env.host, None, &gc).run());
    assert!(nl.link_by_name(&half_made).unwrap().is_none(), "the half-made IFB is gone");
    assert!(nl.link_by_name(&foreign).unwrap().is_some(), "an IFB outside the mark group stays");
    assert!(nl.link_by_name(&live.name).unwrap().is_some(), "the live attachment's IFB stays");
}

#[test]
fn every_version_passes_its_result_on() {
    let env = HostAndContainers::with_prefix(PREFIX, 4).unwrap();
    for (i, version) in ["0.2.0", "0.3.1", "0.4.0", "1.1.0"].iter().enumerate() {
        let c = &env.containers[i];
        let prev = attach(version, &env.host, c, "cnhbr6", &format!("10.157.0.{}/24", i + 2));
        let result = common::add("bandwidth", &env.host, c, &conf(version, BOTH(), Some(&prev)));
        assert_eq!(result["cniVersion"], *version, "{result}");
        if *version == "0.2.0" {
            assert_eq!(result["ip4"], prev["ip4"]);
        } else {
            assert_eq!(result["interfaces"].as_array().unwrap().len(), 4, "{result}");
        }
        // Unlimited: the result passes through untouched.
        let unlimited = common::add("bandwidth", &env.host, c, &conf(version, json!({}), Some(&prev)));
        assert_eq!(unlimited, prev);
    }
}

#[test]
fn bad_input_is_refused_with_code_7_naming_the_key() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr7", "10.158.0.2/24");
    let cases = [
        (json!({"ingressRate": 1000}), "ingressBurst"),
        (json!({"egressBurst": 1000}), "egressRate"),
        (json!({"egressRate": -5, "egressBurst": 1000}), "egressRate"),
        (json!({"ingressRate": "fast", "ingressBurst": 1000}), "ingressRate"),
        (json!({"ingressRate": 1000, "ingressBurst": 40_000_000_000u64}), "ingressBurst"),
    ];
    for (limits, key) in cases {
        let err = call("bandwidth", "ADD", &env.host, Some(c), &conf("1.0.0", limits.clone(), Some(&prev)))
            .run()
            .error();
        assert_eq!(err.code, 7, "{limits}: {}", err.msg);
        assert!(err.msg.contains(key), "{limits}: {}", err.msg);
    }
    let mut runtime = conf("1.0.0", json!({}), Some(&prev));
    runtime["runtimeConfig"] = json!({"bandwidth": {"egressRate": 1000}});
    let err = call("bandwidth", "ADD", &env.host, Some(c), &runtime).run().error();
    assert!(err.code == 7 && err.msg.contains("runtimeConfig.bandwidth.egressBurst"), "{}", err.msg);
    let err = call("bandwidth", "ADD", &env.host, Some(c), &conf("1.0.0", BOTH(), None)).run().error();
    assert!(err.code == 7 && err.msg.contains("chained"), "{}", err.msg);
    assert!(ifbs(&mut env.host.netlink().unwrap()).is_empty());
}
