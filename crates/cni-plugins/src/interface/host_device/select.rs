//! Which host device the configuration means: by name, MAC, sysfs device path or PCI
//! address, and whether a PCI device is bound to a userspace (DPDK) driver instead.

use crate::common::NetResultExt;
use cni_net::{Link, MacAddr, Netlink};
use cni_sdk::{CniError, Request};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Drivers that hand a NIC to userspace: the device then has no netdev to move.
const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

const SYS_BUS_PCI: &str = "/sys/bus/pci/devices";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDeviceConf {
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub hwaddr: String,
    #[serde(default)]
    pub kernelpath: String,
    #[serde(default, rename = "pciBusID")]
    pub pci_bus_id: String,
    /// Where the device's original MTU and state are kept between ADD and DEL.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    #[serde(default)]
    pub dns: Option<cni_types::Dns>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/cni/host-device")
}

/// The one way the configuration names the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Name(String),
    Mac(MacAddr),
    KernelPath(PathBuf),
    Pci(String),
}

impl HostDeviceConf {
    pub fn load(req: &Request) -> Result<(HostDeviceConf, Selector), CniError> {
        let conf: HostDeviceConf = req.config()?;
        // The runtime's deviceID (a PCI address from a device plugin) stands for pciBusID.
        let device_id = match req.conf.runtime_config("deviceID") {
            Some(v) => cni_sdk::config::parse_value::<String>("runtimeConfig.deviceID", v)?,
            None => String::new(),
        };
        let pci = if device_id.is_empty() { conf.pci_bus_id.clone() } else { device_id };
        let given: Vec<&str> = [
            ("device", !conf.device.is_empty()),
            ("hwaddr", !conf.hwaddr.is_empty()),
            ("kernelpath", !conf.kernelpath.is_empty()),
            ("pciBusID", !pci.is_empty()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect();
        if given.len() != 1 {
            return Err(CniError::invalid_config(format!(
                "specify exactly one of \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\" (got {})",
                if given.is_empty() { "none".to_string() } else { given.join(", ") }
            )));
        }
        let selector = match given[0] {
            "device" => Selector::Name(conf.device.clone()),
            "hwaddr" => Selector::Mac(conf.hwaddr.parse().map_err(|_| {
                CniError::invalid_config(format!("invalid MAC address {:?} in hwaddr", conf.hwaddr))
            })?),
            "kernelpath" => {
                let path = PathBuf::from(&conf.kernelpath);
                if !path.is_absolute() || !conf.kernelpath.starts_with("/sys/devices/") {
                    return Err(CniError::invalid_config(format!(
                        "kernelpath {:?} must be absolute and begin with /sys/devices/",
                        conf.kernelpath
                    )));
                }
                Selector::KernelPath(path)
            }
            _ => {
                if pci.contains('/') || pci.starts_with('.') {
                    return Err(CniError::invalid_config(format!("invalid pciBusID {pci:?}")));
                }
                Selector::Pci(pci)
            }
        };
        Ok((conf, selector))
    }
}

/// The userspace driver a PCI device is bound to, if it is one of those.
pub fn userspace_driver(sys_bus_pci: &Path, pci: &str) -> Option<String> {
    let driver = std::fs::read_link(sys_bus_pci.join(pci).join("driver")).ok()?;
    let name = driver.file_name()?.to_string_lossy().into_owned();
    USERSPACE_DRIVERS.contains(&name.as_str()).then_some(name)
}

/// As [`userspace_driver`] on the real sysfs.
pub fn pci_userspace_driver(pci: &str) -> Option<String> {
    userspace_driver(Path::new(SYS_BUS_PCI), pci)
}

/// Interface names listed in a sysfs `net` directory.
fn net_dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The netdev names of a PCI device (`net/`, or `virtio*/net/` for virtio devices).
fn pci_net_names(pci: &str) -> Vec<String> {
    let device = Path::new(SYS_BUS_PCI).join(pci);
    let direct = net_dir_names(&device.join("net"));
    if !direct.is_empty() {
        return direct;
    }
    let mut virtio: Vec<PathBuf> = std::fs::read_dir(&device)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
                .map(|e| e.path().join("net"))
                .collect()
        })
        .unwrap_or_default();
    virtio.sort();
    virtio.iter().flat_map(|dir| net_dir_names(dir)).collect()
}

/// Finds the device on the host; not finding it is a configuration error (code 7).
pub fn find(nl: &mut Netlink, selector: &Selector) -> Result<Link, CniError> {
    let not_found = |what: String| CniError::invalid_config(format!("failed to find host device: {what}"));
    match selector {
        Selector::Name(name) => nl
            .link_by_name(name)
            .map_err(|e| not_found(format!("{name:?}: {e}")))?
            .ok_or_else(|| not_found(format!("no device named {name:?}"))),
        Selector::Mac(mac) => nl
            .links()
            .or_cni("list links")?
            .into_iter()
            .find(|l| l.mac == Some(*mac))
            .ok_or_else(|| not_found(format!("no device with hwaddr {mac}"))),
        Selector::KernelPath(path) => {
            let names = net_dir_names(&path.join("net"));
            let links = nl.links().or_cni("list links")?;
            names
                .iter()
                .find_map(|name| links.iter().find(|l| &l.name == name).cloned())
                .ok_or_else(|| not_found(format!("no network device at {}", path.join("net").display())))
        }
        Selector::Pci(pci) => {
            let names = pci_net_names(pci);
            let Some(name) = names.first() else {
                return Err(not_found(format!("no net directory under pci device {pci}")));
            };
            nl.link_by_name(name)
                .or_cni("look up the PCI device's interface")?
                .ok_or_else(|| not_found(format!("{name} (pci device {pci}) is not in this namespace")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userspace_drivers_are_recognised_by_the_driver_link() {
        let root = tempfile::tempdir().unwrap();
        for (pci, driver) in [("0000:00:01.0", "vfio-pci"), ("0000:00:02.0", "e1000e")] {
            let device = root.path().join(pci);
            std::fs::create_dir_all(&device).unwrap();
            std::os::unix::fs::symlink(format!("../../../bus/pci/drivers/{driver}"), device.join("driver"))
                .unwrap();
        }
        assert_eq!(userspace_driver(root.path(), "0000:00:01.0").as_deref(), Some("vfio-pci"));
        assert_eq!(userspace_driver(root.path(), "0000:00:02.0"), None);
        assert_eq!(userspace_driver(root.path(), "0000:00:03.0"), None);
    }
}
