//! Where CNI finds the node's subnet: a small env file (`OVERLAY_SUBNET=...`, read back on
//! the next start as the subnet to ask for again) and, optionally, a ready conflist that
//! puts pods on the node's bridge with host-local addresses from that subnet.

use std::path::Path;

use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::config::Config;
use crate::{Error, Result};

/// Writes `text` to `path` through a temporary file and a rename: a reader never sees half
/// a file, and a crash leaves the old one.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::Io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::Io(format!("renaming to {}", path.display()), e))
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
