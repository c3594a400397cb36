//! `firewall` with the iptables backend: inside the test's host namespace the iptables
//! FORWARD policy is DROP (as another tool would set it), so only the plugin's accepts let
//! container traffic through. `iptables-save` inside the namespace is the oracle; the Go
//! reference plugin (Debian's containernetworking-plugins) checks interoperability.

use super::support;

use cni_testkit::runner::PluginCall;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use support::{assert_blocked, assert_reaches, filter_lines, firewall_conf, ok, Lab, WORLD_IP, WORLD_IP6};

const GO_FIREWALL: &str = "/usr/lib/cni/firewall";

fn ipt_conf(network: &str, policy: &str, prev: Option<&Value>) -> Value {
    firewall_conf("1.0.0", network, json!({"backend": "iptables", "ingressPolicy": policy}), prev)
}

fn world(port: u16) -> String {
    format!("{WORLD_IP}:{port}")
}

#[test]
fn forward_drop_policy_is_opened_for_the_container_and_closed_again_by_del() {
    let lab = Lab::new(2);
    let (a, b) = (lab.container(0), lab.container(1));
    lab.host_cmd("iptables", &["-P", "FORWARD", "DROP"]);
    let pa = lab.bridge_add(0, "1.0.0", "ipt", "cnwipt", "10.246.0.2/24");
    let pb = lab.bridge_add(1, "1.0.0", "ipt", "cnwipt", "10.246.0.3/24");
    assert_blocked(a, lab.world(), &world(7401)); // the policy bites before ADD
    let before = filter_lines(&lab);

    let conf_a = ipt_conf("ipt", "open", Some(&pa));
    let out = lab.firewall("ADD", Some(0), &conf_a);
    ok(&out);
    assert_eq!(out.json(), pa);
    eprintln!("timing: iptables ADD (first, creates the chains) {:?}", out.elapsed);
    let out = lab.firewall("ADD", Some(1), &ipt_conf("ipt", "open", Some(&pb)));
    ok(&out);
    eprintln!("timing: iptables ADD (second) {:?}", out.elapsed);

    assert_reaches(a, lab.world(), &world(7402));
    assert_reaches(b, lab.world(), &world(7403));
    // The reference lets in only replies: new connections from outside stay dropped.
    assert_blocked(lab.world(), a, "10.246.0.2:7404");

    let saved = filter_lines(&lab);
    for line in [
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN",
        "-A CNI-FORWARD -d 10.246.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A CNI-FORWARD -s 10.246.0.2/32 -j ACCEPT",
        "-A CNI-FORWARD -s 10.246.0.3/32 -j ACCEPT",
    ] {
        assert!(saved.contains(line), "missing {line:?} in {saved:#?}");
    }
    let out = lab.firewall("CHECK", Some(0), &conf_a);
    ok(&out);
    eprintln!("timing: iptables CHECK {:?}", out.elapsed);

    let out = lab.firewall("DEL", Some(0), &conf_a);
    ok(&out);
    eprintln!("timing: iptables DEL {:?}", out.elapsed);
    assert_blocked(a, lab.world(), &world(7405));
    assert_reaches(b, lab.world(), &world(7406)); // b's rules untouched
    assert!(!lab.firewall("CHECK", Some(0), &conf_a).success());
    ok(&lab.firewall("DEL", Some(0), &conf_a)); // idempotent
    ok(&lab.firewall("DEL", Some(1), &ipt_conf("ipt", "open", Some(&pb))));

    // After DEL exactly the reference's shared scaffolding remains: the two chains and
    // the two jumps, which other containers share and which the reference keeps too.
    let after = filter_lines(&lab);
    let added: BTreeSet<_> = after.difference(&before).cloned().collect();
    let removed: BTreeSet<_> = before.difference(&after).cloned().collect();
    assert!(removed.is_empty(), "{removed:#?}");
    let expected: BTreeSet<String> = [
        ":CNI-ADMIN -",
        ":CNI-FORWARD -",
        "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(added, expected);

    // STATUS: ready (iptables-restore is installed); GC: nothing it could attribute.
    let v11 = firewall_conf("1.1.0", "ipt", json!({"backend": "iptables"}), None);
    ok(&lab.firewall("STATUS", None, &v11));
    ok(&lab.firewall("GC", None, &v11));
    assert_eq!(filter_lines(&lab), after);
}

#[test]
fn same_bridge_isolation_and_custom_admin_chain() {
    let lab = Lab::new(3);
    let (a, b, c) = (lab.container(0), lab.container(1), lab.container(2));
    let pa = lab.bridge_add(0, "1.0.0", "ired", "cnwired", "10.245.0.2/24");
    let pb = lab.bridge_add(1, "1.0.0", "ired", "cnwired", "10.245.0.3/24");
    let pc = lab.bridge_add(2, "1.0.0", "iblue", "cnwiblue", "10.244.0.2/24");
    assert_reaches(c, a, "10.245.0.2:7501");

    let mut conf_a = ipt_conf("ired", "same-bridge", Some(&pa));
    conf_a["iptablesAdminChainName"] = json!("CNW-ADMIN");
    ok(&lab.firewall("ADD", Some(0), &conf_a));
    ok(&lab.firewall("ADD", Some(1), &ipt_conf("ired", "same-bridge", Some(&pb))));
    ok(&lab.firewall("ADD", Some(2), &ipt_conf("iblue", "same-bridge", Some(&pc))));

    assert_reaches(b, a, "10.245.0.2:7502");
    assert_blocked(c, a, "10.245.0.2:7503");
    assert_blocked(a, c, "10.244.0.2:7504");
    assert_reaches(a, lab.world(), &world(7505));
    ok(&lab.firewall("CHECK", Some(0), &conf_a));

    let saved = filter_lines(&lab);
    assert!(saved.contains(":CNW-ADMIN -"), "{saved:#?}");
    let stage1 =
        saved.iter().filter(|l| l.starts_with("-A CNI-ISOLATION-STAGE-1 -i cnwired ! -o cnwired")).count();
    assert_eq!(stage1, 1, "the bridge's rule is added once: {saved:#?}");
    // The isolation jump comes before the accepts in FORWARD.
    let order = lab.host_cmd("iptables", &["-S", "FORWARD"]);
    let iso = order.find("CNI-ISOLATION-STAGE-1").unwrap();
    let fwd = order.find("-j CNI-FORWARD").unwrap();
    assert!(iso < fwd, "{order}");
}

#[test]
fn dual_stack_uses_one_restore_per_family_and_opens_both() {
    let lab = Lab::new(1).with_ipv6();
    let a = lab.container(0);
    lab.host_cmd("iptables", &["-P", "FORWARD", "DROP"]);
    lab.host_cmd("ip6tables", &["-P", "FORWARD", "DROP"]);
    let prev = lab.bridge_add_dual(0, "ipt6", "cnwip6", "10.242.0.2/24", "fd51::2/64");
    let v6_world = format!("[{WORLD_IP6}]:7601");
    assert_blocked(a, lab.world(), &v6_world);

    let conf = ipt_conf("ipt6", "open", Some(&prev));
    let out = lab.firewall("ADD", Some(0), &conf);
    ok(&out);
    eprintln!("timing: iptables ADD dual-stack {:?}", out.elapsed);
    assert_reaches(a, lab.world(), &v6_world);
    assert_reaches(a, lab.world(), &world(7602));
    let v6 = lab.host_cmd("ip6tables-save", &["-t", "filter"]);
    assert!(v6.contains("-A CNI-FORWARD -s fd51::2/128 -j ACCEPT"), "{v6}");
    ok(&lab.firewall("CHECK", Some(0), &conf));

    ok(&lab.firewall("DEL", Some(0), &conf));
    assert_blocked(a, lab.world(), &format!("[{WORLD_IP6}]:7603"));
    assert!(!lab.host_cmd("ip6tables-save", &["-t", "filter"]).contains("fd51::2"));
}

fn go_call(lab: &Lab, command: &str, i: usize, conf: &Value) -> cni_testkit::runner::PluginOutput {
    PluginCall::new(GO_FIREWALL, command)
        .in_namespace(lab.env.host.path())
        .cni_path("/usr/lib/cni")
        .netns(lab.container(i).path())
        .container_id(lab.container(i).name())
        .config(conf)
        .run()
}

#[test]
fn rules_interoperate_with_the_go_reference_plugin() {
    assert!(Path::new(GO_FIREWALL).exists(), "install Debian's containernetworking-plugins for this test");
    let lab = Lab::new(2);
    let pa = lab.bridge_add(0, "1.0.0", "interop", "cnwgo", "10.243.0.2/24");
    let pb = lab.bridge_add(1, "1.0.0", "interop", "cnwgo", "10.243.0.3/24");
    let conf_a = ipt_conf("interop", "open", Some(&pa));
    let conf_b = ipt_conf("interop", "open", Some(&pb));

    // Ours adds, the reference checks and deletes.
    ok(&lab.firewall("ADD", Some(0), &conf_a));
    ok(&go_call(&lab, "CHECK", 0, &conf_a));
    ok(&go_call(&lab, "DEL", 0, &conf_a));
    assert!(!filter_lines(&lab).iter().any(|l| l.contains("10.243.0.2")));

    // The reference adds, ours checks and deletes.
    ok(&go_call(&lab, "ADD", 1, &conf_b));
    ok(&lab.firewall("CHECK", Some(1), &conf_b));
    ok(&lab.firewall("DEL", Some(1), &conf_b));
    let left = filter_lines(&lab);
    assert!(!left.iter().any(|l| l.contains("10.243.0.3")), "{left:#?}");
}
