//! Helpers shared by the host-local integration tests.

use std::net::IpAddr;
use std::path::Path;

use cni_plugins::ipam::host_local::HostLocalConf;
use cni_testkit::runner::PluginCall;

/// The Go reference plugin (Debian package `containernetworking-plugins`).
pub const GO_HOST_LOCAL: &str = "/usr/lib/cni/host-local";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The JSON a runtime would send, with `ipam` given as a JSON object text and the data
/// directory set to `data_dir`.
pub fn net_conf_json(network: &str, data_dir: &Path, ipam_ranges: &str) -> String {
    format!(
        r#"{{"cniVersion":"0.4.0","name":"{network}","type":"host-local",
        "ipam":{{"type":"host-local","dataDir":"{}",{ipam_ranges}}}}}"#,
        data_dir.display()
    )
}

pub fn conf(network: &str, data_dir: &Path, ipam_ranges: &str) -> HostLocalConf {
    HostLocalConf::parse(net_conf_json(network, data_dir, ipam_ranges).as_bytes(), None).unwrap()
}

/// Runs the Go host-local binary; returns (success, parsed stdout).
pub fn run_go(
    command: &str,
    conf_json: &str,
    container_id: &str,
    ifname: &str,
    cni_args: Option<&str>,
) -> (bool, serde_json::Value) {
    assert!(
        Path::new(GO_HOST_LOCAL).exists(),
        "{GO_HOST_LOCAL} is missing: apt-get install -y containernetworking-plugins"
    );
    let mut call = PluginCall::new(GO_HOST_LOCAL, command)
        .container_id(container_id)
        .ifname(ifname)
        .netns("/proc/self/ns/net-not-used")
        .cni_path("/usr/lib/cni")
        .stdin(conf_json);
    if let Some(args) = cni_args {
        call = call.args(args);
    }
    let out = call.run();
    let value = if out.stdout.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("Go stdout not JSON ({e}): {}", out.stdout))
    };
    (out.success(), value)
}

/// The addresses (without prefix) of a Go ADD result.
pub fn go_result_ips(result: &serde_json::Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("no ips in {result}"))
        .iter()
        .map(|entry| {
            let cidr = entry["address"].as_str().unwrap();
            ip(cidr.split('/').next().unwrap())
        })
        .collect()
}

/// Names of the address files in a network directory.
pub fn ip_files(network_dir: &Path) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = std::fs::read_dir(network_dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    ips.sort();
    ips
}
