//! Where CNI finds the node's subnet: a small env file (`OVERLAY_SUBNET=...`, read back on
//! the next start as the subnet to ask for again) and, optionally, a ready conflist that
//! puts pods on the node's bridge with host-local addresses from that subnet.

use std::path::Path;

use cni_os::fs::Durability;
use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::config::Config;
use crate::{Error, Result};

/// Writes `text` to `path` with cni-os's atomic write (a reader never sees half a file, a
/// crash leaves the old one, and the temporary file beside it is created exclusively
/// without following a link planted in its place). Both files are read by CNI runtimes
/// and are not secret: 0644.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
    }
    cni_os::fs::write_atomic(path, text.as_bytes(), 0o644, Durability::Synced)
        .map_err(|e| Error::Io(format!("writing {}", path.display()), e))
}

/// The env file's contents.
pub fn subnet_env(config: &Config, subnet: Ipv4Net, mtu: u32) -> String {
    format!("OVERLAY_NETWORK={}\nOVERLAY_SUBNET={subnet}\nOVERLAY_MTU={mtu}\n", config.network)
}

/// The subnet a previous run wrote, if the file is there and parses.
pub fn read_subnet(path: &Path) -> Option<Ipv4Net> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| line.strip_prefix("OVERLAY_SUBNET=")).and_then(|s| s.trim().parse().ok())
}

/// A conflist for the node's pods: our bridge plugin (the node's bridge as the pods'
/// gateway, the overlay's MTU) with host-local handing out the node's subnet.
pub fn conflist(config: &Config, subnet: Ipv4Net, mtu: u32) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": "overlay",
        "plugins": [{
            "type": "bridge",
            "bridge": config.bridge,
            "isGateway": true,
            "mtu": mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet.to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        }]
    })
}

/// Writes the env file and, when asked for, the conflist.
pub fn write(config: &Config, subnet: Ipv4Net, mtu: u32) -> Result<()> {
    write_atomic(&config.subnet_file, &subnet_env(config, subnet, mtu))?;
    if let Some(path) = &config.conflist {
        let text = serde_json::to_string_pretty(&conflist(config, subnet, mtu)).expect("json");
        write_atomic(path, &(text + "\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_round_trips_the_subnet() {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--subnet-file".into(), dir.path().join("subnet.env").display().to_string()])
            .collect();
        let config = Config::parse(&args).unwrap();
        let subnet: Ipv4Net = "10.244.9.0/24".parse().unwrap();
        assert_eq!(read_subnet(&config.subnet_file), None);
        write(&config, subnet, 1450).unwrap();
        assert_eq!(read_subnet(&config.subnet_file), Some(subnet));
        let list = conflist(&config, subnet, 1450);
        assert_eq!(list["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.244.9.0/24");
        assert_eq!(list["plugins"][0]["mtu"], 1450);
    }
}
