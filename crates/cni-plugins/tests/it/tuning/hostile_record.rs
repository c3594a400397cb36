//! tuning's restore record against whoever can write its `dataDir`:
//! a record asking DEL to "restore" a sysctl outside `net.` is refused by the same rule ADD
//! applies to the configuration (and the rest of the record still applies); DEL restores
//! nothing from a `dataDir` another user can write into; a planted key is not carried into
//! the next ADD's record; the record's temporary file is created exclusively, never
//! through a link. The plugin runs in a UTS namespace of its own, so
//! even a plugin that wrote `kernel.domainname` could not change the host's. Needs root.

use crate::common;

use cni_net::sysctl;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{PluginCall, PluginOutput};
use cni_testkit::unprivileged::as_nobody;
use common::ok;
use serde_json::{json, Value};
use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

const IFNAME: &str = "ps0";
const CONTAINER: &str = "ps-ctr";
const SOMAXCONN: &str = "net.core.somaxconn";

/// A "host" and a "container" namespace joined by a veth pair (container end `ps0`), and
/// a data directory for tuning's records.
struct Setup {
    host: TestNetns,
    ctr: TestNetns,
    data_dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let (host, ctr) = super::veth_namespaces("ps", IFNAME);
        Setup { host, ctr, data_dir: tempfile::tempdir().unwrap() }
    }

    fn conf(&self, extra: Value) -> Value {
        let mac = self.ctr.netlink().unwrap().require_link(IFNAME).unwrap().mac.unwrap().to_string();
        let mut conf = json!({"cniVersion": "1.1.0", "name": "ps-tuning", "type": "tuning",
            "dataDir": self.data_dir.path(),
            "prevResult": {"cniVersion": "1.1.0",
                "interfaces": [{"name": "psh0"}, {"name": IFNAME, "mac": mac, "sandbox": self.ctr.path()}],
                "ips": [{"address": "10.182.0.2/24", "interface": 1}]}});
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        conf
    }

    /// tuning for `verb`, in its own UTS namespace.
    fn call(&self, verb: &str, conf: &Value) -> PluginCall {
        PluginCall::new(common::plugin("tuning"), verb)
            .container_id(CONTAINER)
            .ifname(IFNAME)
            .netns(self.ctr.path())
            .config(conf)
            .in_namespace(self.host.path())
            .own_uts_namespace()
    }

    fn record(&self) -> PathBuf {
        self.data_dir.path().join(format!("{CONTAINER}_{IFNAME}.json"))
    }
}

/// The domain name of the UTS namespace `ns` (a `/proc/<pid>/ns/uts` file), first set to
/// `set` if given, from a thread that enters that namespace and then ends.
fn domainname_in(ns: &File, set: Option<&str>) -> String {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // Moves only this thread, which ends right after.
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(ns),
                    Some(rustix::thread::LinkNameSpaceType::HostNameAndNISDomainName),
                )
                .unwrap();
                if let Some(name) = set {
                    fs::write("/proc/sys/kernel/domainname", name).unwrap();
                }
                fs::read_to_string("/proc/sys/kernel/domainname").unwrap().trim_end().to_string()
            })
            .join()
            .unwrap()
    })
}

/// Runs `call` and returns its output with the domain name its UTS namespace had at the
/// end (it was `ps-before` when the plugin started).
fn run_watching_domainname(call: &PluginCall) -> (PluginOutput, String) {
    let mut uts = None;
    let out = call.run_paused(|pid| {
        let ns = File::open(format!("/proc/{pid}/ns/uts")).unwrap();
        assert_eq!(domainname_in(&ns, Some("ps-before")), "ps-before");
        uts = Some(ns);
    });
    let after = domainname_in(uts.as_ref().unwrap(), None);
    (out, after)
}

fn host_domainname() -> String {
    fs::read_to_string("/proc/sys/kernel/domainname").unwrap()
}

#[test]
fn a_planted_record_cannot_make_del_write_a_sysctl_outside_net() {
    let s = Setup::new();
    let host_before = host_domainname();
    sysctl::write_in(s.ctr.netns(), SOMAXCONN, "1000").unwrap();
    // A record in tuning's own directory asks for more than ADD ever records.
    let planted = json!({"sysctl": {"kernel.domainname": "ps-planted", SOMAXCONN: "1234"}});
    fs::write(s.record(), planted.to_string()).unwrap();

    let (out, domainname) = run_watching_domainname(&s.call("DEL", &s.conf(json!({}))));
    assert_eq!(domainname, "ps-before", "kernel.domainname was written");
    assert!(out.stderr.contains("not restoring sysctl \"kernel.domainname\""), "{}", out.stderr);
    ok(out);
    // The rest of the record applied; the record is gone.
    assert_eq!(sysctl::read_in(s.ctr.netns(), SOMAXCONN).unwrap(), "1234");
    assert!(!s.record().exists());
    // Idempotent.
    ok(s.call("DEL", &s.conf(json!({}))).run());
    assert_eq!(host_domainname(), host_before);
}

#[test]
fn del_restores_nothing_from_a_data_dir_another_user_can_write() {
    let s = Setup::new();
    sysctl::write_in(s.ctr.netns(), SOMAXCONN, "1000").unwrap();
    // dataDir opened to everyone after ADD made it private: nobody plants a record that
    // passes the sysctl rule.
    fs::set_permissions(s.data_dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let planted = json!({"sysctl": {SOMAXCONN: "1234"}});
    let made = as_nobody(&format!("printf '%s' '{planted}' > '{}'", s.record().display()));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));

    let out = s.call("DEL", &s.conf(json!({}))).run();
    assert!(out.stderr.contains("not restoring anything from"), "{}", out.stderr);
    assert!(out.stderr.contains("writable by group or others (mode 0777)"), "{}", out.stderr);
    ok(out);
    assert_eq!(sysctl::read_in(s.ctr.netns(), SOMAXCONN).unwrap(), "1000");
    assert!(s.record().exists(), "nothing in the directory is touched");
}

#[test]
fn add_does_not_carry_a_planted_sysctl_into_its_record() {
    let s = Setup::new();
    let original = sysctl::read_in(s.ctr.netns(), SOMAXCONN).unwrap();
    let planted = json!({"sysctl": {"kernel.domainname": "ps-planted", "kernel.core_pattern": "|/ps-pwn"}});
    fs::write(s.record(), planted.to_string()).unwrap();
    let conf = s.conf(json!({"sysctl": {SOMAXCONN: "700"}}));

    let (out, domainname) = run_watching_domainname(&s.call("ADD", &conf));
    ok(out);
    assert_eq!(domainname, "ps-before");
    let record: Value = serde_json::from_slice(&fs::read(s.record()).unwrap()).unwrap();
    assert_eq!(record["sysctl"], json!({SOMAXCONN: original}), "{record}");

    let (out, domainname) = run_watching_domainname(&s.call("DEL", &conf));
    ok(out);
    assert_eq!(domainname, "ps-before");
    assert_eq!(sysctl::read_in(s.ctr.netns(), SOMAXCONN).unwrap(), original);
}

#[test]
fn a_link_planted_at_the_records_temporary_name_is_not_written_through() {
    let s = Setup::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    let conf = s.conf(json!({"sysctl": {SOMAXCONN: "800"}}));

    // Links under the names the record's temporary file can have (this scheme's and the
    // one before it), made once the plugin's pid is known and before it acts.
    let plant = |pid: u32| {
        let dir = s.data_dir.path();
        for name in
            [format!(".{CONTAINER}_{IFNAME}.json.tmp.{pid}"), format!("{CONTAINER}_{IFNAME}.tmp.{pid}")]
        {
            std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
        }
    };
    ok(s.call("ADD", &conf).run_paused(plant));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let meta = fs::symlink_metadata(s.record()).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let record: Value = serde_json::from_slice(&fs::read(s.record()).unwrap()).unwrap();
    assert!(record["sysctl"][SOMAXCONN].is_string(), "{record}");
    ok(s.call("DEL", &conf).run());
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    assert_ne!(sysctl::read_in(s.ctr.netns(), SOMAXCONN).unwrap(), "800");
}
