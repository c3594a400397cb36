//! `firewall` with the firewalld backend against Debian's real firewalld, run by each test
//! on a private system bus in the test's throwaway host namespace ([`daemon`]). firewalld
//! is asked over the bus (with `dbus-send`, not the plugin's client) and the kernel's
//! ruleset in that namespace is read with `nft`.

mod daemon;
mod hostile;

use crate::common::call;
use cni_testkit::ns::HostAndContainers;
use cni_testkit::runner::PluginOutput;
use daemon::{Bus, Firewalld};
use serde_json::{json, Value};
use std::path::Path;

const PREFIX: &str = "fwd";

fn prev_result(addresses: &[&str]) -> Value {
    let ips: Vec<Value> = addresses.iter().map(|a| json!({"address": a, "interface": 0})).collect();
    json!({"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}], "ips": ips})
}

fn conf(network: &str, extra: Value, prev: Option<&Value>, data_dir: &Path) -> Value {
    let mut conf = json!({"cniVersion": "1.1.0", "name": network, "type": "firewall",
        "dataDir": data_dir.join("state")});
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
    }
    if let Some(prev) = prev {
        conf["prevResult"] = prev.clone();
    }
    conf
}

/// Runs the plugin in the host namespace, for container `id`/eth0, on `bus_address`.
fn run(env: &HostAndContainers, command: &str, id: &str, bus_address: &str, conf: &Value) -> PluginOutput {
    let container = (command != "GC" && command != "STATUS").then(|| &env.containers[0]);
    let mut c =
        call("firewall", command, &env.host, container, conf).env("DBUS_SYSTEM_BUS_ADDRESS", bus_address);
    if container.is_some() {
        c = c.container_id(id);
    }
    c.run()
}

fn ok(out: &PluginOutput) {
    assert!(out.success(), "plugin failed ({}): {}\nstderr: {}", out.status, out.stdout, out.stderr);
}

#[test]
fn add_check_del_gc_and_auto_selection_against_a_real_firewalld() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let bus = Bus::start();
    let _firewalld = Firewalld::start(&bus, &env.host);
    let addr = bus.address();
    let dir = bus.dir.path();

    // ADD, backend firewalld, default zone: both addresses are bound to `trusted` ...
    let prev = prev_result(&["10.77.0.2/24", "fd77::2/64"]);
    let c = conf("fwdnet", json!({"backend": "firewalld"}), Some(&prev), dir);
    let out = run(&env, "ADD", "ctr-a", &addr, &c);
    ok(&out);
    assert_eq!(out.json(), prev, "firewall passes prevResult through");
    assert_eq!(bus.zone_of_source("10.77.0.2/32"), "trusted");
    assert_eq!(bus.zone_of_source("fd77::2/128"), "trusted");
    // ... and firewalld put them into the kernel's ruleset of that namespace.
    let ruleset = env.host.nft_text();
    assert!(ruleset.contains("ip saddr 10.77.0.2"), "{ruleset}");
    assert!(ruleset.contains("ip6 saddr fd77::2"), "{ruleset}");
    // Our own nftables table is not made when firewalld is the backend.
    assert!(!ruleset.contains("cni_firewall"), "{ruleset}");

    ok(&run(&env, "CHECK", "ctr-a", &addr, &c));
    // ADD again (a runtime retrying) changes nothing and keeps the record.
    ok(&run(&env, "ADD", "ctr-a", &addr, &c));

    // A custom zone.
    let prev_b = prev_result(&["10.77.0.3/24"]);
    let c_b =
        conf("fwdnet", json!({"backend": "firewalld", "firewalldZone": "internal"}), Some(&prev_b), dir);
    ok(&run(&env, "ADD", "ctr-b", &addr, &c_b));
    assert_eq!(bus.zone_of_source("10.77.0.3/32"), "internal");
    ok(&run(&env, "CHECK", "ctr-b", &addr, &c_b));
    // CHECK with the wrong zone fails, naming the key.
    let wrong =
        conf("fwdnet", json!({"backend": "firewalld", "firewalldZone": "public"}), Some(&prev_b), dir);
    let out = run(&env, "CHECK", "ctr-b", &addr, &wrong);
    assert!(!out.success() && out.error().msg.contains("firewalldZone"), "{}", out.stdout);

    // DEL removes the sources, from firewalld and from the kernel; DEL again is fine.
    ok(&run(&env, "DEL", "ctr-a", &addr, &c));
    assert_eq!(bus.zone_of_source("10.77.0.2/32"), "");
    assert_eq!(bus.zone_of_source("fd77::2/128"), "");
    let ruleset = env.host.nft_text();
    assert!(!ruleset.contains("10.77.0.2") && !ruleset.contains("fd77::2"), "{ruleset}");
    ok(&run(&env, "DEL", "ctr-a", &addr, &c));
    let out = run(&env, "CHECK", "ctr-a", &addr, &c);
    assert!(!out.success(), "CHECK after DEL must fail");
    // DEL without prevResult (a lost cache) still removes what ADD recorded.
    ok(&run(&env, "DEL", "ctr-b", &addr, &conf("fwdnet", json!({"backend": "firewalld"}), None, dir)));
    assert_eq!(bus.zone_of_source("10.77.0.3/32"), "");

    // No backend key and firewalld running: firewalld is used, as the reference does.
    let prev_c = prev_result(&["10.77.0.4/24"]);
    let auto = conf("fwdnet", json!({}), Some(&prev_c), dir);
    ok(&run(&env, "ADD", "ctr-c", &addr, &auto));
    assert_eq!(bus.zone_of_source("10.77.0.4/32"), "trusted");
    assert!(!env.host.nft_text().contains("cni_firewall"));
    ok(&run(&env, "CHECK", "ctr-c", &addr, &auto));

    // GC: ctr-c is still valid, ctr-d is not; an administrator's own source stays.
    let prev_d = prev_result(&["10.77.0.5/24"]);
    ok(&run(&env, "ADD", "ctr-d", &addr, &conf("fwdnet", json!({}), Some(&prev_d), dir)));
    bus.add_source("trusted", "10.77.9.9/32");
    let mut gc = conf("fwdnet", json!({}), None, dir);
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-c", "ifname": "eth0"}]);
    ok(&run(&env, "GC", "", &addr, &gc));
    assert_eq!(bus.zone_of_source("10.77.0.4/32"), "trusted", "a valid attachment keeps its source");
    assert_eq!(bus.zone_of_source("10.77.0.5/32"), "", "GC removes a stale attachment's source");
    assert_eq!(bus.zone_of_source("10.77.9.9/32"), "trusted", "GC leaves the administrator's source");
    ok(&run(&env, "STATUS", "", &addr, &conf("fwdnet", json!({"backend": "firewalld"}), None, dir)));

    // An ADD whose address the administrator already bound does not make it ours: DEL of
    // that attachment without prevResult leaves it.
    ok(&run(
        &env,
        "ADD",
        "ctr-e",
        &addr,
        &conf("fwdnet", json!({}), Some(&prev_result(&["10.77.9.9/24"])), dir),
    ));
    ok(&run(&env, "DEL", "ctr-e", &addr, &conf("fwdnet", json!({"backend": "firewalld"}), None, dir)));
    assert_eq!(bus.zone_of_source("10.77.9.9/32"), "trusted");

    // GC with an empty valid list takes ctr-c too.
    let mut gc_all = conf("fwdnet", json!({}), None, dir);
    gc_all["cni.dev/valid-attachments"] = json!([]);
    ok(&run(&env, "GC", "", &addr, &gc_all));
    assert_eq!(bus.zone_of_source("10.77.0.4/32"), "");
}

#[test]
fn without_firewalld_an_explicit_backend_fails_and_no_backend_means_nftables() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    // A bus on which nobody owns firewalld's name, and a bus that does not exist.
    let bus = Bus::start();
    let dir = bus.dir.path();
    let prev = prev_result(&["10.78.0.2/24"]);
    let missing = format!("unix:path={}", dir.join("no-such-bus").display());
    for address in [bus.address(), missing] {
        let c = conf("fwdnone", json!({"backend": "firewalld"}), Some(&prev), dir);
        let out = run(&env, "ADD", "ctr-x", &address, &c);
        assert!(!out.success(), "ADD must fail without firewalld");
        let e = out.error();
        assert_eq!(e.code, 11, "{e:?}");
        assert!(e.msg.contains("backend") && e.msg.contains("firewalld"), "{e:?}");
        let status =
            run(&env, "STATUS", "", &address, &conf("fwdnone", json!({"backend": "firewalld"}), None, dir));
        assert_eq!(status.error().code, 50, "{}", status.stdout);
        // DEL with firewalld gone is success (its runtime configuration went with it).
        ok(&run(&env, "DEL", "ctr-x", &address, &c));
    }
    // No backend key and no firewalld: our nftables table, as before.
    let auto = conf("fwdnone", json!({}), Some(&prev), dir);
    ok(&run(&env, "ADD", "ctr-y", &bus.address(), &auto));
    let ruleset = env.host.nft_text();
    assert!(ruleset.contains("table inet cni_firewall") && ruleset.contains("10.78.0.2"), "{ruleset}");
    ok(&run(&env, "CHECK", "ctr-y", &bus.address(), &auto));
    ok(&run(&env, "DEL", "ctr-y", &bus.address(), &auto));
    assert!(!env.host.nft_text().contains("10.78.0.2"));
}
