//! Where CNI finds the node's subnet: a small env file (`OVERLAY_SUBNET=...`, read back on
//! the next start as the subnet to ask for again) and, optionally, a ready conflist that
//! puts pods on the node's bridge with host-local addresses from that subnet.

use std::path::Path;

use cni_os::fs::Durability;
use ipnet::{Ipv4Net, Ipv6Net};
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

/// The env file's contents: the IPv4 keys as they always were, then (dual-stack) the IPv6
/// network and subnet.
pub fn subnet_env(config: &Config, subnet: Ipv4Net, subnet6: Option<Ipv6Net>, mtu: u32) -> String {
    let mut text =
        format!("OVERLAY_NETWORK={}\nOVERLAY_SUBNET={subnet}\nOVERLAY_MTU={mtu}\n", config.network);
    if let (Some(network6), Some(subnet6)) = (config.network6, subnet6) {
        text += &format!("OVERLAY_IPV6_NETWORK={network6}\nOVERLAY_IPV6_SUBNET={subnet6}\n");
    }
    text
}

/// The subnet a previous run wrote, if the file is there and parses.
pub fn read_subnet(path: &Path) -> Option<Ipv4Net> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| line.strip_prefix("OVERLAY_SUBNET=")).and_then(|s| s.trim().parse().ok())
}

/// The IPv6 subnet a previous run wrote, if any.
pub fn read_subnet6(path: &Path) -> Option<Ipv6Net> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("OVERLAY_IPV6_SUBNET="))
        .and_then(|s| s.trim().parse().ok())
}

/// A conflist for the node's pods: our bridge plugin (the node's bridge as the pods'
/// gateway, the overlay's MTU) with host-local handing out the node's subnet, and with
/// dual-stack a second range (its IPv6 subnet) and default route.
pub fn conflist(config: &Config, subnet: Ipv4Net, subnet6: Option<Ipv6Net>, mtu: u32) -> Value {
    let mut ranges = vec![json!([{"subnet": subnet.to_string()}])];
    let mut routes = vec![json!({"dst": "0.0.0.0/0"})];
    if let Some(subnet6) = subnet6 {
        ranges.push(json!([{"subnet": subnet6.to_string()}]));
        routes.push(json!({"dst": "::/0"}));
    }
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
                "ranges": ranges,
                "routes": routes
            }
        }]
    })
}

/// Writes the env file and, when asked for, the conflist.
pub fn write(config: &Config, subnet: Ipv4Net, subnet6: Option<Ipv6Net>, mtu: u32) -> Result<()> {
    write_atomic(&config.subnet_file, &subnet_env(config, subnet, subnet6, mtu))?;
    if let Some(path) = &config.conflist {
        let text = serde_json::to_string_pretty(&conflist(config, subnet, subnet6, mtu)).expect("json");
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
        write(&config, subnet, None, 1450).unwrap();
        assert_eq!(read_subnet(&config.subnet_file), Some(subnet));
        assert_eq!(read_subnet6(&config.subnet_file), None);
        let list = conflist(&config, subnet, None, 1450);
        assert_eq!(list["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.244.9.0/24");
        assert_eq!(list["plugins"][0]["ipam"]["ranges"].as_array().unwrap().len(), 1);
        assert_eq!(list["plugins"][0]["mtu"], 1450);
    }

    #[test]
    fn dual_stack_env_keeps_the_ipv4_keys_and_the_conflist_has_both_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--network6".into(), "fd00:244::/48".into()])
            .chain(["--subnet-file".into(), dir.path().join("subnet.env").display().to_string()])
            .collect();
        let config = Config::parse(&args).unwrap();
        let subnet: Ipv4Net = "10.244.9.0/24".parse().unwrap();
        let subnet6: Ipv6Net = "fd00:244:0:9::/64".parse().unwrap();
        write(&config, subnet, Some(subnet6), 1430).unwrap();
        let env = std::fs::read_to_string(&config.subnet_file).unwrap();
        assert_eq!(
            env,
            "OVERLAY_NETWORK=10.244.0.0/16\nOVERLAY_SUBNET=10.244.9.0/24\nOVERLAY_MTU=1430\n\
             OVERLAY_IPV6_NETWORK=fd00:244::/48\nOVERLAY_IPV6_SUBNET=fd00:244:0:9::/64\n"
        );
        assert_eq!(
            (read_subnet(&config.subnet_file), read_subnet6(&config.subnet_file)),
            (Some(subnet), Some(subnet6))
        );
        let ipam = &conflist(&config, subnet, Some(subnet6), 1430)["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][1][0]["subnet"], "fd00:244:0:9::/64");
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
    }
}
