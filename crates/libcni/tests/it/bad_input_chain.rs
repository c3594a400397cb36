//! The libcni chain under hostile input and damaged state (a clear error and nothing changed; DEL and GC get past damage), with the real plugins
//! (the multi-call binary installed into a bin directory) in throwaway "host" and
//! "container" namespaces: bridge + host-local, portmap, firewall, tuning, bandwidth.
//!
//! - Bad input: a conflist with one broken plugin (traversal in `type` or `ipam.type`, a
//!   sysctl key escaping `/proc/sys/net`, a bad range, a bad rate or backend) is refused
//!   with an error naming the field, and leaves nothing of the attachment's: no link but
//!   the shared bridge, no reservation, tuning record, cache entry or per-attachment
//!   nftables chain (libcni undoes the plugins that ran before the broken one).
//! - Damaged result cache: the attachment's cache file emptied, cut short, garbage, or a
//!   directory in its place: DEL still removes everything (the chain runs without a
//!   prevResult), GC leaves nothing, and the next ADD and DEL work.

use cni_testkit::binaries::workspace_binary;
use cni_testkit::damage::Damage;
use cni_testkit::ns::TestNetns;
use cni_testkit::poll::{poll, EVENTUALLY};
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};

const PREFIX: &str = "bi";
const NETWORK: &str = "bichain";

/// The plugins, one link per name, as an operator installs them.
fn plugin_dir(root: &Path) -> PathBuf {
    let dir = root.join("bin");
    let binary = workspace_binary("cni-plugins", "cni-plugins");
    let out = std::process::Command::new(binary).arg("install").arg(&dir).output().unwrap();
    assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

struct Rig {
    host: TestNetns,
    ctr: TestNetns,
    dir: tempfile::TempDir,
    cni: CniConfig,
}

impl Rig {
    fn new() -> Rig {
        let host = TestNetns::with_prefix(PREFIX).unwrap();
        let ctr = TestNetns::with_prefix(PREFIX).unwrap();
        let dir = tempfile::Builder::new().prefix("bi-chain").tempdir().unwrap();
        let cni = CniConfig::new([plugin_dir(dir.path())]).with_cache_dir(dir.path().join("cache"));
        Rig { host, ctr, dir, cni }
    }

    /// bridge + host-local, portmap, firewall, tuning, bandwidth.
    fn conflist(&self) -> Value {
        let data = self.dir.path().display().to_string();
        json!({"cniVersion": "1.1.0", "name": NETWORK, "plugins": [
            {"type": "bridge", "bridge": "bibr1", "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.94.0.0/24"}]], "dataDir": format!("{data}/ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": "nftables"},
            {"type": "tuning", "dataDir": format!("{data}/tuning"), "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}},
            {"type": "bandwidth", "ingressRate": 800000, "ingressBurst": 80000}
        ]})
    }

    fn runtime(&self) -> RuntimeConf {
        RuntimeConf::new("bi-ctr", self.ctr.path().display().to_string(), "eth0").with_capability(
            "portMappings",
            json!([{"hostPort": 18090, "containerPort": 80, "protocol": "tcp"}]),
        )
    }

    fn cache_file(&self) -> PathBuf {
        self.dir.path().join("cache/results").join(format!("{NETWORK}-bi-ctr-eth0"))
    }

    fn add(&self, list: &NetworkConfigList) -> libcni::Result<libcni::NetworkResult> {
        let rt = self.runtime();
        self.host.run(|| self.cni.add_network_list(list, &rt)).unwrap()
    }

    fn del(&self, list: &NetworkConfigList) -> libcni::Result<()> {
        let rt = self.runtime();
        self.host.run(|| self.cni.del_network_list(list, &rt)).unwrap()
    }

    fn gc(&self, list: &NetworkConfigList) -> libcni::Result<()> {
        self.host.run(|| self.cni.gc_network_list(list, &[])).unwrap()
    }
}

fn list_of(value: &Value) -> NetworkConfigList {
    NetworkConfigList::from_bytes(&serde_json::to_vec(value).unwrap()).unwrap()
}

/// Sets `value` at JSON pointer `pointer` of `root` (the parent must exist).
fn set(root: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    root.pointer_mut(parent).unwrap().as_object_mut().unwrap().insert(key.to_string(), value);
}

/// (case, JSON pointer in the conflist, value, a word the error must contain)
const BAD: &[(&str, &str, &str, &str)] = &[
    ("type traversal", "/plugins/1/type", r#""../portmap""#, "type"),
    ("type absolute", "/plugins/2/type", r#""/bin/sh""#, "type"),
    ("type with NUL", "/plugins/4/type", "\"bandwidth\\u0000\"", "type"),
    ("ipam.type traversal", "/plugins/0/ipam/type", r#""../host-local""#, "type"),
    ("bad subnet", "/plugins/0/ipam/ranges", r#"[[{"subnet": "10.94.0.0/33"}]]"#, "subnet"),
    ("sysctl key traversal", "/plugins/3/sysctl", r#"{"net/../../kernel/hostname": "x"}"#, "sysctl"),
    ("sysctl key outside net", "/plugins/3/sysctl", r#"{"kernel.hostname": "x"}"#, "kernel.hostname"),
    ("bandwidth rate a string", "/plugins/4/ingressRate", r#""fast""#, "ingressRate"),
    ("firewall backend unknown", "/plugins/2/backend", r#""bogus""#, "backend"),
    ("bridge name too long", "/plugins/0/bridge", r#""bibr0123456789abc""#, "bridge"),
];

#[test]
fn a_broken_plugin_in_the_chain_is_refused_and_leaves_nothing_of_its_own() {
    let rig = Rig::new();
    // The unbroken chain works (and leaves what every attachment shares: the bridge, the
    // nftables tables and base chains, host-local's directory).
    let list = list_of(&rig.conflist());
    rig.add(&list).unwrap();
    rig.del(&list).unwrap();
    let mut failures = Vec::new();
    for (name, pointer, value, word) in BAD {
        let mut conflist = rig.conflist();
        set(&mut conflist, pointer, serde_json::from_str(value).unwrap());
        // Some cases are refused when the list is read, the others when the chain runs
        // (and libcni then undoes what the plugins before the broken one did).
        let outcome = NetworkConfigList::from_bytes(&serde_json::to_vec(&conflist).unwrap())
            .and_then(|list| rig.add(&list).map(drop));
        let mut problems = Vec::new();
        match outcome {
            Ok(()) => problems.push("ADD succeeded".to_string()),
            Err(e) if !e.to_string().to_lowercase().contains(&word.to_lowercase()) => {
                problems.push(format!("error does not name {word:?}: {e}"))
            }
            Err(_) => {}
        }
        // bridge hands a veth's deletion to a background process: waited for.
        let own = |l: &String| !l.contains("link bibr1");
        if poll(EVENTUALLY, || leftovers(&rig).into_iter().find(own).is_none().then_some(())).is_none() {
            problems.push(format!(
                "left behind: {:?}",
                leftovers(&rig).into_iter().filter(own).collect::<Vec<_>>()
            ));
        }
        println!("chain {:4} {name}", if problems.is_empty() { "ok" } else { "FAIL" });
        if !problems.is_empty() {
            failures.push(format!("{name}: {}", problems.join("; ")));
        }
    }
    println!("chain: {} cases, {} passed", BAD.len(), BAD.len() - failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        BAD.len(),
        failures.join("\n")
    );
}

fn damage(path: &Path, kind: Damage) {
    kind.apply(path)
}

/// What the chain leaves on the host and in the container that is its own: links it made
/// (the bridge, veths, bandwidth's IFB), host-local reservations, tuning records, cache
/// entries, and nftables tables.
fn leftovers(rig: &Rig) -> Vec<String> {
    let mut left = Vec::new();
    for (label, ns) in [("host", &rig.host), ("ctr", &rig.ctr)] {
        for link in ns.netlink().unwrap().links().unwrap() {
            if link.name != "lo" {
                left.push(format!("{label} link {} ({:?})", link.name, link.kind));
            }
        }
    }
    let net_dir = rig.dir.path().join("ipam").join(NETWORK);
    for entry in fs::read_dir(&net_dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_ok() {
            left.push(format!("reservation {name}"));
        }
    }
    for sub in ["tuning", "cache/results"] {
        for entry in fs::read_dir(rig.dir.path().join(sub)).into_iter().flatten().flatten() {
            left.push(format!("{sub}/{}", entry.file_name().to_string_lossy()));
        }
    }
    // The tables and base chains stay (shared by every attachment); each attachment has
    // chains of its own, named cni-<hash>.
    for item in rig.host.nft_json() {
        if let Some(name) = item["chain"]["name"].as_str().filter(|n| n.starts_with("cni-")) {
            left.push(format!("nftables chain {} {name}", item["chain"]["table"]));
        }
    }
    left
}

#[test]
fn a_damaged_result_cache_does_not_block_del_or_gc() {
    let rig = Rig::new();
    let list = list_of(&rig.conflist());
    let mut cases = 0;
    for kind in Damage::ALL {
        rig.add(&list).unwrap();
        damage(&rig.cache_file(), kind);
        let del = rig.del(&list);
        let directory = matches!(kind, Damage::Directory);
        if let (false, Err(e)) = (directory, &del) {
            panic!("{kind:?}: DEL failed: {e}");
        }
        // Whatever the cache, the plugins ran DEL: the links and the address are gone.
        let own = |l: &String| !l.starts_with("cache/results") && !l.contains("link bibr1");
        let settled = poll(EVENTUALLY, || leftovers(&rig).into_iter().find(own).is_none().then_some(()));
        let left: Vec<String> = leftovers(&rig).into_iter().filter(own).collect();
        assert!(settled.is_some(), "{kind:?}: after DEL ({del:?}): {left:?}");
        rig.gc(&list).unwrap_or_else(|e| panic!("{kind:?}: GC failed: {e}"));
        if directory {
            // A directory is not libcni's to remove: a clear error names it, and once the
            // operator removed it, DEL succeeds.
            let e = del.unwrap_err().to_string();
            assert!(e.contains(&rig.cache_file().display().to_string()), "{kind:?}: {e}");
            // An ADD meanwhile cannot cache its result: it fails naming the path, and
            // leaves nothing (libcni undoes the chain).
            let e = rig.add(&list).unwrap_err().to_string();
            assert!(e.contains(&rig.cache_file().display().to_string()), "{kind:?}: ADD: {e}");
            let own = |l: &String| !l.starts_with("cache/results") && !l.contains("link bibr1");
            let settled = poll(EVENTUALLY, || leftovers(&rig).into_iter().find(own).is_none().then_some(()));
            assert!(settled.is_some(), "{kind:?}: after the refused ADD: {:?}", leftovers(&rig));
            fs::remove_dir(rig.cache_file()).unwrap();
            rig.del(&list).unwrap();
        }
        let left: Vec<String> = leftovers(&rig).into_iter().filter(|l| !l.contains("link bibr1")).collect();
        assert!(left.is_empty(), "{kind:?}: after GC: {left:?}");
        // And the next attachment works.
        rig.add(&list).unwrap();
        rig.del(&list).unwrap();
        cases += 1;
    }
    assert_eq!(cases, 4);
}
