//! The network configurations the workloads use.

use serde_json::{json, Value};
use std::path::Path;

/// The bridge every workload's host namespace gets (each run has its own namespace, so
/// the name never collides).
pub const BRIDGE: &str = "cnk0";
pub const NETWORK: &str = "cnkbench";
pub const SUBNET: &str = "10.88.0.0/16";

/// W1 (`ip_masq`) and W1nm (without): bridge as gateway + host-local.
pub fn bridge_list(data_dir: &Path, ip_masq: bool) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [bridge_plugin(data_dir, ip_masq, false)],
    })
}

/// W2: what podman 4 (CNI backend) writes for its default network.
pub fn podman_list(data_dir: &Path) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": NETWORK,
        "plugins": [
            bridge_plugin(data_dir, true, true),
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"},
        ],
    })
}

/// W7: bridge (isGateway) + host-local, then bandwidth limiting both directions to
/// `rate` bits/s with a bucket of `burst` bits.
pub fn shaped_list(data_dir: &Path, rate: u64, burst: u64) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            bridge_plugin(data_dir, false, false),
            {"type": "bandwidth", "ingressRate": rate, "ingressBurst": burst,
             "egressRate": rate, "egressBurst": burst},
        ],
    })
}

/// How many plugins libcni starts for one ADD of W1 / W1nm / W2: the process starts the
/// exec model cannot avoid (a delegated IPAM plugin may run inside its caller, as ours
/// does, so it is not counted).
pub fn chain_execs(chain: crate::options::WorkloadId) -> Option<usize> {
    use crate::options::WorkloadId;
    let list = match chain {
        WorkloadId::W1 => bridge_list(Path::new(""), true),
        WorkloadId::W1nm => bridge_list(Path::new(""), false),
        WorkloadId::W2 => podman_list(Path::new("")),
        _ => return None,
    };
    list["plugins"].as_array().map(Vec::len)
}

pub const SHAPED_PLUGINS: [&str; 3] = ["bridge", "host-local", "bandwidth"];
pub const PODMAN_PLUGINS: [&str; 5] = ["bridge", "host-local", "portmap", "firewall", "tuning"];
pub const BRIDGE_PLUGINS: [&str; 2] = ["bridge", "host-local"];
pub const MACVLAN_PLUGINS: [&str; 2] = ["macvlan", "host-local"];

/// The interface the macvlan workload's macvlans hang off, made in the run's host namespace (a veth end
/// standing in for the NIC).
pub const MACVLAN_MASTER: &str = "cnkm0";

/// The macvlan workload: macvlan (bridge mode) + host-local.
pub fn macvlan_list(data_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [{
            "type": "macvlan",
            "master": MACVLAN_MASTER,
            "mode": "bridge",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET}]], "dataDir": data_dir},
        }],
    })
}

fn bridge_plugin(data_dir: &Path, ip_masq: bool, podman: bool) -> Value {
    let mut range = json!({"subnet": SUBNET});
    if podman {
        range["gateway"] = json!("10.88.0.1");
    }
    let mut plugin = json!({
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": true,
        "ipMasq": ip_masq,
        "ipam": {
            "type": "host-local",
            "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[range]],
            "dataDir": data_dir,
        },
    });
    if podman {
        plugin["hairpinMode"] = json!(true);
    }
    plugin
}

/// W4: host-local run on its own (stdin of the IPAM plugin itself).
pub fn ipam_request(data_dir: &Path, network: &str, subnet: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": network,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": data_dir},
    })
}

/// The podman-style port mapping of container `index`.
pub fn port_mapping(index: usize) -> Value {
    json!([{"hostPort": 20000 + index, "containerPort": 80, "protocol": "tcp"}])
}
