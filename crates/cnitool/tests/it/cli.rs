//! cnitool end to end: the way the reference cnitool is used (NETCONFPATH to a directory
//! with a conflist, CNI_PATH, CAP_ARGS, CNI_ARGS), against the test plugin and (as root)
//! the Go reference plugins in a throwaway host namespace.

use crate::support::ok;
use cni_testkit::binaries::test_plugin;
use cni_testkit::ns::TestNetns;
use cni_testkit::test_plugin::read_log;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(conflist: Value) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("net.d")).unwrap();
        std::fs::write(
            dir.path().join("net.d/10-test.conflist"),
            serde_json::to_vec_pretty(&conflist).unwrap(),
        )
        .unwrap();
        Setup { dir }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// cnitool with the reference's environment, run by `command` (maybe in a namespace).
    fn env(&self, mut command: Command, cni_path: &Path) -> Command {
        command
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("CNI_IFNAME")
            .env("NETCONFPATH", self.path("net.d"))
            .env("CNI_PATH", cni_path)
            .env("CNI_CACHE_DIR", self.path("cache"));
        command
    }
}

fn container_id(netns: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("printf %s '{netns}' | sha512sum")).output().unwrap();
    format!("cnitool-{}", &String::from_utf8(out.stdout).unwrap()[..20])
}

#[test]
fn the_conventions_of_every_cni_rs_program() {
    cni_testkit::cli::assert_conventions(Path::new(CNITOOL), &[], "cnitool");
}

#[test]
fn help_usage_errors_and_own_version() {
    let out = Command::new(CNITOOL).arg("--help").output().unwrap();
    let help = ok(out);
    assert!(help.contains("Usage: cnitool [OPTIONS] <COMMAND>") && help.contains("NETCONFPATH"), "{help}");
    let out = Command::new(CNITOOL).args(["del", "--help"]).output().unwrap();
    assert!(ok(out).contains("Usage: cnitool del [OPTIONS] <NETWORK> <NETNS>"));
    let out = Command::new(CNITOOL).arg("add").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("required arguments were not provided") && stderr.contains("<NETNS>"),
        "{stderr}"
    );
    let version: Value =
        serde_json::from_str(&ok(Command::new(CNITOOL).arg("version").output().unwrap())).unwrap();
    assert_eq!(version["cniVersion"], "1.1.0");
    assert_eq!(version["supportedVersions"].as_array().unwrap().len(), 7);
}

#[test]
fn add_check_del_list_with_the_test_plugin() {
    let setup = Setup::new(json!({"cniVersion": "1.1.0", "name": "tnet", "plugins": [
        {"type": "cni-test-plugin", "capabilities": {"portMappings": true}, "logFile": "LOG"}]}));
    let log = setup.path("log");
    let text = std::fs::read_to_string(setup.path("net.d/10-test.conflist"))
        .unwrap()
        .replace("LOG", &log.display().to_string());
    std::fs::write(setup.path("net.d/10-test.conflist"), text).unwrap();
    let bin = test_plugin().parent().unwrap().to_path_buf();
    let cnitool = |args: &[&str]| {
        let mut cmd = setup.env(Command::new(CNITOOL), &bin);
        cmd.args(args)
            .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web")
            .env("CAP_ARGS", r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#)
            .output()
            .unwrap()
    };
    let netns = "/run/netns/cnl-does-not-matter";
    let added: Value =
        serde_json::from_str(&ok(cnitool(&["add", "tnet", netns, "--ifname", "net1"]))).unwrap();
    assert_eq!(added["interfaces"][0], json!({"name": "net1", "sandbox": netns}));
    ok(cnitool(&["check", "tnet", netns, "-i", "net1"]));
    ok(cnitool(&["status", "tnet"]));
    let listed: Value = serde_json::from_str(&ok(cnitool(&["list"]))).unwrap();
    assert_eq!(listed[0]["containerId"], container_id(netns));
    assert_eq!(listed[0]["ifName"], "net1");
    assert_eq!(listed[0]["cniArgs"], json!([["IgnoreUnknown", "1"], ["K8S_POD_NAME", "web"]]));
    // The test plugin is not ours: validate checks only that it is there and speaks 1.1.0.
    let validated: Value = serde_json::from_str(&ok(cnitool(&["validate", "tnet", "--json"]))).unwrap();
    assert_eq!(validated, json!([]));
    let version: Value = serde_json::from_str(&ok(cnitool(&["version", "cni-test-plugin"]))).unwrap();
    assert_eq!(version["cniVersion"], "1.1.0");
    ok(cnitool(&["del", "tnet", netns, "-i", "net1"]));
    assert_eq!(ok(cnitool(&["list", "tnet"])).trim(), "[]");

    let calls: Vec<String> = read_log(&log).iter().map(|i| i.command.clone()).collect();
    assert_eq!(calls, ["ADD", "CHECK", "STATUS", "DEL"]);
    let add = &read_log(&log)[0];
    assert_eq!(add.var("CNI_CONTAINERID"), container_id(netns));
    assert_eq!(add.var("CNI_ARGS"), "IgnoreUnknown=1;K8S_POD_NAME=web");
    assert_eq!(add.stdin["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);

    // Failures: readable, on stderr, exit 1.
    let out = cnitool(&["add", "absent", netns]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no network configuration named \"absent\""));
    let mut cmd = setup.env(Command::new(CNITOOL), &bin);
    let out = cmd.args(["add", "tnet", netns]).env("CNI_ARGS", "IgnoreUnknown").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid CNI_ARGS pair"));
}

/// Root: the Go reference plugins through cnitool, in a throwaway host namespace.
#[test]
fn add_check_list_gc_del_with_the_go_plugins() {
    let host = TestNetns::with_prefix("cnl").unwrap();
    let ctr = TestNetns::with_prefix("cnl").unwrap();
    let setup = Setup::new(json!({"cniVersion": "1.0.0", "name": "cnl-tool", "plugins": [
        {"type": "bridge", "bridge": "cnltoolbr0", "isGateway": true, "ipMasq": true,
         "ipam": {"type": "host-local", "dataDir": "DATADIR", "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": "10.232.0.0/24", "gateway": "10.232.0.1"}]]}},
        {"type": "firewall"},
        {"type": "tuning", "capabilities": {"mac": true}}]}));
    let conf = setup.path("net.d/10-test.conflist");
    let text =
        std::fs::read_to_string(&conf).unwrap().replace("DATADIR", &setup.path("ipam").display().to_string());
    std::fs::write(&conf, text).unwrap();
    let netns = ctr.path().display().to_string();
    let cnitool = |args: &[&str]| {
        let mut cmd = setup.env(host.command(CNITOOL), Path::new("/usr/lib/cni"));
        cmd.args(args)
            .env("CNI_ARGS", "IgnoreUnknown=1;IP=10.232.0.77")
            .env("CAP_ARGS", r#"{"mac":"c2:11:22:33:44:55"}"#)
            .output()
            .unwrap()
    };

    let added: Value = serde_json::from_str(&ok(cnitool(&["add", "cnl-tool", &netns]))).unwrap();
    assert_eq!(added["cniVersion"], "1.0.0");
    assert_eq!(added["ips"][0]["address"], "10.232.0.77/24", "CNI_ARGS IP= reached host-local");
    let eth0 = ctr.ip_json(&["link", "show", "eth0"]);
    assert_eq!(eth0[0]["address"], "c2:11:22:33:44:55", "CAP_ARGS mac reached tuning");
    let server = tcp_echo_server(host.netns(), "10.232.0.1:0".parse::<SocketAddr>().unwrap()).unwrap();
    tcp_echo(ctr.netns(), server.local_addr(), b"via cnitool", Duration::from_secs(5)).unwrap();
    drop(server);

    ok(cnitool(&["check", "cnl-tool", &netns]));
    let listed: Value = serde_json::from_str(&ok(cnitool(&["list", "cnl-tool"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["containerId"], container_id(&netns));
    assert_eq!(listed[0]["netns"], netns);

    // GC keeping the attachment leaves it; GC without --keep removes it (reference cnitool
    // semantics), by running DEL through the Go plugins.
    let id = container_id(&netns);
    ok(cnitool(&["gc", "cnl-tool", &netns, "--keep", &id]));
    assert_eq!(serde_json::from_str::<Value>(&ok(cnitool(&["list"]))).unwrap().as_array().unwrap().len(), 1);
    ok(cnitool(&["gc", "cnl-tool"]));
    assert_eq!(ok(cnitool(&["list"])).trim(), "[]");
    assert!(ctr.ip_json(&["link", "show"]).as_array().unwrap().iter().all(|l| l["ifname"] != "eth0"));

    // And the plain add → del cycle.
    ok(cnitool(&["add", "cnl-tool", &netns]));
    ok(cnitool(&["del", "cnl-tool", &netns]));
    assert_eq!(ok(cnitool(&["list"])).trim(), "[]");
    assert!(!setup.path("ipam/cnl-tool/10.232.0.77").exists(), "the address was released");
    let out = cnitool(&["check", "cnl-tool", &netns]);
    assert_eq!(out.status.code(), Some(1), "CHECK after DEL has no cached result");
}
