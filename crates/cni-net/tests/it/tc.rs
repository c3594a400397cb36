//! Traffic control on the real kernel, in a throwaway namespace, read back by netlink and by
//! `tc -j` (the test oracle). Needs root.

use std::time::Duration;

use cni_net::netlink::tc::{QdiscKind, QdiscSpec, RedirectFilter, TbfParams, TcHandle, ETH_P_ALL};
use cni_net::netlink::{LinkKind, LinkSpec, VethSpec};
use cni_net::Netlink;
use cni_testkit::ns::TestNetns;
use serde_json::Value;

const PREFIX: &str = "cnh";

fn tc_json(ns: &TestNetns, args: &[&str]) -> Value {
    let output = ns.command("tc").arg("-j").args(args).output().expect("run tc");
    assert!(output.status.success(), "tc -j {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    if output.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Array(Vec::new());
    }
    serde_json::from_slice(&output.stdout).expect("tc -j prints JSON")
}

/// A namespace with an up veth pair `cnhv0`/`cnhv1` and an IFB `cnhifb0`.
fn setup() -> (TestNetns, Netlink, u32, u32, u32) {
    let ns = TestNetns::with_prefix(PREFIX).unwrap();
    let mut nl = ns.netlink().unwrap();
    let v0 = nl
        .add_veth(&VethSpec { link: LinkSpec::new("cnhv0"), peer: LinkSpec::new("cnhv1") })
        .unwrap()
        .unwrap();
    let v1 = nl.require_link("cnhv1").unwrap();
    nl.set_link_up(v0.index).unwrap();
    nl.set_link_up(v1.index).unwrap();
    let ifb = nl.add_ifb(&LinkSpec::new("cnhifb0").mtu(1400).txqlen(500)).unwrap().unwrap();
    (ns, nl, v0.index, v1.index, ifb.index)
}

fn qdisc_of<'a>(shown: &'a Value, dev: &str, kind: &str) -> &'a Value {
    shown
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["dev"] == dev && q["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} qdisc on {dev} in {shown}"))
}

#[test]
fn ifb_is_created_up_with_its_attributes() {
    let (ns, mut nl, _, _, ifb_index) = setup();
    let ifb = nl.link_by_index(ifb_index).unwrap().unwrap();
    assert_eq!(ifb.kind, LinkKind::Ifb);
    assert!(ifb.up);
    assert_eq!(ifb.mtu, 1400);
    assert_eq!(ifb.txqlen, Some(500));
    let shown = ns.ip_json(&["-d", "link", "show", "dev", "cnhifb0"]);
    assert_eq!(shown[0]["linkinfo"]["info_kind"], "ifb");
    let again = nl.add_ifb(&LinkSpec::new("cnhifb0")).unwrap_err();
    assert!(again.is_already_exists(), "{again}");
}

#[test]
fn tbf_root_is_added_read_back_replaced_and_deleted() {
    let (ns, mut nl, v0, _, _) = setup();
    let params = TbfParams::shaping(10_000_000, 1_000_000, Duration::from_millis(25)).unwrap();
    let spec = QdiscSpec::tbf_root(v0, TcHandle::new(1, 0), params);
    nl.add_qdisc(&spec).unwrap();

    let root = nl.root_qdisc(v0).unwrap().expect("a root qdisc");
    assert_eq!(root.kind, QdiscKind::Tbf(params));
    assert_eq!(root.handle, TcHandle::new(1, 0));
    assert!(!root.is_kernel_default());

    let shown = tc_json(&ns, &["qdisc", "show"]);
    let tbf = qdisc_of(&shown, "cnhv0", "tbf");
    assert_eq!(tbf["handle"], "1:");
    assert_eq!(tbf["root"], true);
    assert_eq!(tbf["options"]["rate"], 1_250_000);
    assert_eq!(tbf["options"]["burst"], 125_000);

    // Adding again in the same place is refused; replacing changes the rate.
    assert!(nl.add_qdisc(&spec).unwrap_err().is_already_exists());
    let faster = TbfParams::shaping(20_000_000, 1_000_000, Duration::from_millis(25)).unwrap();
    nl.replace_qdisc(&QdiscSpec::tbf_root(v0, TcHandle::new(1, 0), faster)).unwrap();
    assert_eq!(nl.root_qdisc(v0).unwrap().unwrap().kind, QdiscKind::Tbf(faster));
    let shown = tc_json(&ns, &["qdisc", "show"]);
    assert_eq!(qdisc_of(&shown, "cnhv0", "tbf")["options"]["rate"], 2_500_000);

    // Deleting the root gives the device its default back.
    nl.delete_qdisc(v0, TcHandle::ROOT, TcHandle::UNSPEC).unwrap();
    let root = nl.root_qdisc(v0).unwrap();
    assert!(root.as_ref().is_none_or(|q| q.is_kernel_default()), "{root:?}");
    let err = nl.delete_qdisc(v0, TcHandle::ROOT, TcHandle::UNSPEC).unwrap_err();
    assert!(err.errno().is_some(), "{err}");
}

#[test]
fn ingress_redirect_to_ifb_is_listed_and_removed() {
    let (ns, mut nl, v0, _, ifb) = setup();
    assert!(nl.ingress_hook_qdisc(v0).unwrap().is_none());
    assert!(nl.filters(v0, TcHandle::INGRESS_HOOK).unwrap().is_empty());
    nl.add_qdisc(&QdiscSpec::ingress(v0)).unwrap();
    let hook = nl.ingress_hook_qdisc(v0).unwrap().unwrap();
    assert_eq!(hook.kind, QdiscKind::Ingress);
    assert_eq!(hook.handle, TcHandle::INGRESS_QDISC);

    let filter = RedirectFilter { index: v0, parent: TcHandle::INGRESS_HOOK, priority: 7, target_index: ifb };
    nl.add_redirect_filter(&filter).unwrap();
    let filters = nl.filters(v0, TcHandle::INGRESS_HOOK).unwrap();
    let ours: Vec<_> = filters.iter().filter(|f| f.redirect_to == Some(ifb)).collect();
    assert_eq!(ours.len(), 1, "{filters:?}");
    assert_eq!(ours[0].kind, "u32");
    assert_eq!(ours[0].priority, 7);
    assert_eq!(ours[0].protocol, ETH_P_ALL);

    let shown = tc_json(&ns, &["filter", "show", "dev", "cnhv0", "ingress"]);
    let text = shown.to_string();
    assert!(text.contains("\"pref\":7"), "{text}");
    assert!(text.contains("mirred") && text.contains("cnhifb0"), "{text}");

    nl.delete_filters(v0, TcHandle::INGRESS_HOOK, 7).unwrap();
    assert!(nl.filters(v0, TcHandle::INGRESS_HOOK).unwrap().is_empty());
    assert!(nl.delete_filters(v0, TcHandle::INGRESS_HOOK, 7).is_err());
    nl.delete_qdisc(v0, TcHandle::INGRESS, TcHandle::INGRESS_QDISC).unwrap();
    assert!(nl.ingress_hook_qdisc(v0).unwrap().is_none());
}

#[test]
fn redirect_filter_attaches_under_an_existing_clsact() {
    let (ns, mut nl, _, v1, ifb) = setup();
    nl.add_qdisc(&QdiscSpec::clsact(v1)).unwrap();
    // The hook is taken: a second ingress-type qdisc cannot be added.
    assert!(nl.add_qdisc(&QdiscSpec::ingress(v1)).is_err());
    assert_eq!(nl.ingress_hook_qdisc(v1).unwrap().unwrap().kind, QdiscKind::Clsact);
    let filter = RedirectFilter { index: v1, parent: TcHandle::INGRESS_HOOK, priority: 3, target_index: ifb };
    nl.add_redirect_filter(&filter).unwrap();
    assert!(nl.filters(v1, TcHandle::INGRESS_HOOK).unwrap().iter().any(|f| f.redirect_to == Some(ifb)));
    let shown = tc_json(&ns, &["qdisc", "show"]);
    assert_eq!(qdisc_of(&shown, "cnhv1", "clsact")["handle"], "ffff:");
}

#[test]
fn qdiscs_of_all_devices_are_listed() {
    let (_ns, mut nl, v0, _, ifb) = setup();
    let params = TbfParams::shaping(8_000_000, 80_000, Duration::from_millis(25)).unwrap();
    nl.add_qdisc(&QdiscSpec::tbf_root(ifb, TcHandle::new(1, 0), params)).unwrap();
    nl.add_qdisc(&QdiscSpec::ingress(v0)).unwrap();
    let all = nl.qdiscs(None).unwrap();
    assert!(all.iter().any(|q| q.index == ifb && q.kind == QdiscKind::Tbf(params)), "{all:?}");
    assert!(all.iter().any(|q| q.index == v0 && q.kind == QdiscKind::Ingress), "{all:?}");
    let only_ifb = nl.qdiscs(Some(ifb)).unwrap();
    assert!(only_ifb.iter().all(|q| q.index == ifb));
}
