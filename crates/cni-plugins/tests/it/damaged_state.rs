//! Damaged state must not block DEL (nothing lost, nothing leaked): for every
//! file host-local writes (an attachment's reservation, `lock`, `last_reserved_ip.0`, the
//! index's table and stamp) and every kind of damage (emptied, cut short, garbage, a
//! directory where the file should be), bridge or ptp + host-local DEL (without a
//! prevResult: the hardest case, the runtime lost its cache) removes the veth and the
//! reservation (a directory in a file's place is repaired), GC then leaves nothing behind, and a
//! later ADD works: 2 plugins x 5 files x 4 kinds = 40 cases. tuning's record adds 4,
//! host-device's record 4.

use crate::common;

use cni_net::netlink::LinkKind;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use common::{call, eventually, ok};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};

const PREFIX: &str = "cds";
const NETWORK: &str = "dmgnet";

use cni_testkit::damage::Damage;

const DAMAGES: [Damage; 4] = Damage::ALL;

fn damage(path: &Path, kind: Damage) {
    kind.apply(path)
}

/// The two interface plugins that delegate to IPAM.
const PLUGINS: [&str; 2] = ["bridge", "ptp"];

fn conf(plugin: &str, data_dir: &Path) -> Value {
    json!({"cniVersion": "1.1.0", "name": NETWORK, "type": plugin, "bridge": "cds0", "isGateway": true,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.71.0.0/24"}]], "dataDir": data_dir}})
}

fn gc_conf(plugin: &str, data_dir: &Path) -> Value {
    let mut gc = conf(plugin, data_dir);
    gc["cni.dev/valid-attachments"] = json!([]);
    gc
}

/// host-local's reservations of the test network.
fn reservations(data_dir: &Path) -> Vec<String> {
    cni_testkit::host_local::reservations(data_dir, NETWORK)
}

fn veths(host: &TestNetns) -> usize {
    host.netlink().unwrap().links().unwrap().iter().filter(|l| l.kind == LinkKind::Veth).count()
}

/// Which file of the network directory a case damages, given the ADD result.
type Target = fn(&Path, &Value) -> PathBuf;

fn own_reservation(net_dir: &Path, result: &Value) -> PathBuf {
    let address = result["ips"][0]["address"].as_str().unwrap();
    net_dir.join(address.split('/').next().unwrap())
}

/// Which verb clears a directory in the damaged file's place, saying so on stderr.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RepairedBy {
    Del,
    Gc,
    /// Neither: a hint that is worked around, or replaced without a note (the index).
    Neither,
}

/// Runs every damage kind against the file `target` picks: ADD, damage, DEL, GC, ADD and
/// DEL again. host-local owns its network directory, so a directory in the place of one of
/// its files never blocks it. Returns the number of cases run.
fn run_cases(target: Target, repaired_by: RepairedBy) -> usize {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let container = &env.containers[0];
    let mut cases = 0;
    for (plugin, kind) in PLUGINS.iter().flat_map(|p| DAMAGES.map(|d| (*p, d))) {
        let data = tempfile::tempdir().unwrap();
        let conf = conf(plugin, data.path());
        let net_dir = data.path().join(NETWORK);
        let result = call(plugin, "ADD", &env.host, Some(container), &conf).run().json();
        let path = target(&net_dir, &result);
        damage(&path, kind);
        let directory = matches!(kind, Damage::Directory);

        let note = format!("host-local: repaired {}", path.display());
        let del = call(plugin, "DEL", &env.host, Some(container), &conf).run();
        if directory && repaired_by == RepairedBy::Del {
            assert!(del.stderr.contains(&note), "{kind:?}: {}", del.stderr);
            assert!(!path.is_dir(), "{}", path.display());
        }
        ok(del);
        // Whatever happened to the state, the links are gone.
        eventually(&format!("{kind:?} {}: veth left", path.display()), || veths(&env.host) == 0);
        assert!(container.netlink().unwrap().link_by_name("eth0").unwrap().is_none());

        let gc = call(plugin, "GC", &env.host, Some(container), &gc_conf(plugin, data.path())).run();
        if directory && repaired_by == RepairedBy::Gc {
            assert!(gc.stderr.contains(&note), "{kind:?}: {}", gc.stderr);
        }
        ok(gc);
        if directory {
            // Cleared (the lock, the reservation, the index), or only a hint worked around
            // (last_reserved_ip.0 is rewritten, and so repaired, only by an ADD).
            assert!(!path.is_dir() || path.ends_with("last_reserved_ip.0"), "{}", path.display());
        }
        assert!(
            reservations(data.path()).is_empty(),
            "{kind:?} {}: {:?}",
            path.display(),
            reservations(data.path())
        );

        let again = call(plugin, "ADD", &env.host, Some(container), &conf).run().json();
        assert!(again["ips"][0]["address"].is_string(), "{kind:?}: {again}");
        ok(call(plugin, "DEL", &env.host, Some(container), &conf).run());
        // DEL is idempotent, damaged or not.
        ok(call(plugin, "DEL", &env.host, Some(container), &conf).run());
        assert!(reservations(data.path()).is_empty(), "{kind:?}: {:?}", reservations(data.path()));
        eventually("veth left after the second DEL", || veths(&env.host) == 0);
        cases += 1;
    }
    cases
}

#[test]
fn the_attachments_reservation() {
    // A directory named like the address. DEL without a prevResult cannot tell it was this
    // attachment's (making it changed the directory, so the index no longer vouches for
    // the address); GC, which frees what nobody holds, clears it. (With a prevResult DEL
    // frees it itself: host_local/hostile_dir.rs.)
    assert_eq!(run_cases(own_reservation, RepairedBy::Gc), 8);
}

#[test]
fn the_lock() {
    // A directory: DEL clears it, makes the lock again and releases the address.
    assert_eq!(run_cases(|dir, _| dir.join("lock"), RepairedBy::Del), 8);
}

#[test]
fn last_reserved_ip() {
    // Only where the next search starts: damage of any kind costs nothing.
    assert_eq!(run_cases(|dir, _| dir.join("last_reserved_ip.0"), RepairedBy::Neither), 8);
}

#[test]
fn the_index_table() {
    // The index is ours and only a hint: discarded and rebuilt from the address files.
    assert_eq!(run_cases(|dir, _| dir.join(".cni-rs-index/table"), RepairedBy::Neither), 8);
}

#[test]
fn the_index_stamp() {
    assert_eq!(run_cases(|dir, _| dir.join(".cni-rs-index/stamp"), RepairedBy::Neither), 8);
}

/// tuning's record of one attachment, damaged each way: DEL succeeds and removes it (a
/// damaged record cannot be restored from, and must not block the next ADD), a later ADD
/// records again and its DEL restores.
#[test]
fn tunings_record() {
    use cni_net::netlink::{LinkSpec, VethSpec};
    use cni_testkit::runner::PluginCall;
    const IFNAME: &str = "cdt0";
    const ARP_FILTER: &str = "net.ipv4.conf.cdt0.arp_filter";
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    host.netlink()
        .unwrap()
        .add_veth(&VethSpec { link: LinkSpec::new("cdth0"), peer: LinkSpec::new(IFNAME).netns(ctr.netns()) })
        .unwrap();
    let mut cases = 0;
    for kind in DAMAGES {
        let data = tempfile::tempdir().unwrap();
        let conf = json!({"cniVersion": "1.1.0", "name": "cdt-tuning", "type": "tuning",
            "dataDir": data.path(), "sysctl": {ARP_FILTER: "1"},
            "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": IFNAME, "sandbox": ctr.path()}]}});
        let run = |verb: &str| {
            PluginCall::new(common::plugin("tuning"), verb)
                .netns(ctr.path())
                .ifname(IFNAME)
                .config(&conf)
                .in_namespace(host.path())
                .run()
        };
        let arp_filter = || cni_net::sysctl::read_in(ctr.netns(), ARP_FILTER).unwrap().trim().to_string();
        ok(run("ADD"));
        assert_eq!(arp_filter(), "1");
        let records: Vec<PathBuf> = fs::read_dir(data.path()).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(records.len(), 1, "{records:?}");
        damage(&records[0], kind);

        ok(run("DEL"));
        ok(run("DEL"));
        assert!(!records[0].exists(), "{kind:?}: the damaged record stayed");
        // The original value is lost with the record; put it back by hand for the next case.
        cni_net::sysctl::write_in(ctr.netns(), ARP_FILTER, "0").unwrap();

        ok(run("ADD"));
        assert_eq!(arp_filter(), "1");
        ok(run("DEL"));
        assert_eq!(arp_filter(), "0", "{kind:?}: the later ADD's DEL did not restore");
        assert_eq!(fs::read_dir(data.path()).unwrap().count(), 0);
        cases += 1;
    }
    assert_eq!(cases, 4);
}

/// host-device's record of one attachment (`<dataDir>/<network>/<container>-<ifname>`),
/// damaged each way: DEL still moves the device back to the host under its original name
/// (from the link's alias), releases the address and removes the record (a directory in
/// its place too); GC succeeds; a later ADD records again and its DEL restores the
/// device's MTU and up state as well.
#[test]
fn host_devices_record() {
    use cni_net::netlink::{LinkSpec, VethSpec};
    const DEVICE: &str = "cdhd0";
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    let mut nl = host.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new(DEVICE), peer: LinkSpec::new("cdhd1") }).unwrap();
    let device = nl.require_link(DEVICE).unwrap();
    nl.set_link_mtu(device.index, 1450).unwrap();
    nl.set_link_up(device.index).unwrap();
    // (MTU, up) of the device when it is on the host; None when it is not.
    let on_host = || host.netlink().unwrap().link_by_name(DEVICE).unwrap().map(|l| (l.mtu, l.up));
    let mut cases = 0;
    for kind in DAMAGES {
        let data = tempfile::tempdir().unwrap();
        let conf = json!({"cniVersion": "1.1.0", "name": NETWORK, "type": "host-device", "device": DEVICE,
            "dataDir": data.path().join("hd"),
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.73.0.0/24"}]], "dataDir": data.path()}});
        let mut gc = conf.clone();
        gc["cni.dev/valid-attachments"] = json!([]);
        let result = common::add("host-device", &host, &ctr, &conf);
        assert!(result["ips"][0]["address"].is_string(), "{result}");
        assert_eq!(on_host(), None, "the device was not moved in");
        let record = data.path().join("hd").join(NETWORK).join(format!("{}-eth0", ctr.name()));
        assert!(record.is_file(), "no record at {}", record.display());
        damage(&record, kind);

        ok(call("host-device", "DEL", &host, Some(&ctr), &conf).run());
        assert!(on_host().is_some(), "{kind:?}: the device did not come back under its name");
        assert!(ctr.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
        assert!(!record.exists(), "{kind:?}: the damaged record stayed");
        assert!(reservations(data.path()).is_empty(), "{kind:?}: {:?}", reservations(data.path()));
        ok(call("host-device", "DEL", &host, Some(&ctr), &conf).run());
        ok(call("host-device", "GC", &host, None, &gc).run());
        // What only the record knew (the up state) is lost with it: put it back by hand.
        let index = host.netlink().unwrap().require_link(DEVICE).unwrap().index;
        host.netlink().unwrap().set_link_up(index).unwrap();

        common::add("host-device", &host, &ctr, &conf);
        ok(call("host-device", "DEL", &host, Some(&ctr), &conf).run());
        assert_eq!(on_host(), Some((1450, true)), "{kind:?}: the later ADD's DEL did not restore");
        assert_eq!(fs::read_dir(data.path().join("hd").join(NETWORK)).unwrap().count(), 0);
        cases += 1;
    }
    assert_eq!(cases, 4);
}

/// The index's `table.new`, left by a host-local killed between writing a new table and
/// renaming it into place, in each of the four shapes: DEL succeeds, GC (which rebuilds
/// the index under the lock, so no writer is in flight) removes it, and ADD works after.
#[test]
fn the_index_tables_leftover_temporary_file() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let container = &env.containers[0];
    let mut cases = 0;
    for kind in DAMAGES {
        let data = tempfile::tempdir().unwrap();
        let conf = conf("bridge", data.path());
        common::add("bridge", &env.host, container, &conf);
        let index_dir = data.path().join(NETWORK).join(".cni-rs-index");
        let leftover = index_dir.join("table.new");
        fs::copy(index_dir.join("table"), &leftover).unwrap();
        damage(&leftover, kind);
        ok(call("bridge", "DEL", &env.host, Some(container), &conf).run());
        ok(call("bridge", "GC", &env.host, Some(container), &gc_conf("bridge", data.path())).run());
        assert!(!leftover.exists(), "{kind:?}: GC left {}", leftover.display());
        assert!(reservations(data.path()).is_empty(), "{kind:?}: {:?}", reservations(data.path()));
        eventually("veth left", || veths(&env.host) == 0);
        common::add("bridge", &env.host, container, &conf);
        ok(call("bridge", "DEL", &env.host, Some(container), &conf).run());
        cases += 1;
    }
    assert_eq!(cases, 4);
}
