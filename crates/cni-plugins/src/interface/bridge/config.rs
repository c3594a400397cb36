//! The bridge plugin's configuration, parsed and validated in one place.
//!
//! The plugin's modules form layers, each using only those below it: `vlan_plan` (the VLAN
//! keys, no kernel work) < `config` < `gateway` (addresses on the bridge) and `vlan` (the
//! port's VLANs in the kernel) < `vlan_gateway` (an access VLAN's gateway link) < the
//! plugin in `mod.rs`; `spoofcheck` stands alone.

use super::vlan_plan::{self, PortPlan, TrunkEntry};
use cni_sdk::{CniError, Request};
use cni_types::Dns;
use serde::Deserialize;

fn default_bridge() -> String {
    "cni0".to_string()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeConf {
    #[serde(default = "default_bridge")]
    pub bridge: String,
    #[serde(default)]
    pub is_gateway: bool,
    #[serde(default)]
    pub is_default_gateway: bool,
    #[serde(default)]
    pub force_address: bool,
    #[serde(default)]
    pub ip_masq: bool,
    #[serde(default)]
    pub ip_masq_backend: Option<String>,
    #[serde(default)]
    pub mtu: u32,
    #[serde(default)]
    pub hairpin_mode: bool,
    #[serde(default)]
    pub promisc_mode: bool,
    /// VLAN keys: see `vlan_plan.rs`.
    #[serde(default)]
    pub vlan: i64,
    #[serde(default)]
    pub vlan_trunk: Vec<TrunkEntry>,
    #[serde(default)]
    pub preserve_default_vlan: bool,
    #[serde(default, rename = "enabledad")]
    pub enable_dad: bool,
    #[serde(default, rename = "macspoofchk")]
    pub mac_spoof_check: bool,
    #[serde(default)]
    pub disable_container_interface: bool,
    #[serde(default)]
    pub port_isolation: bool,
    #[serde(default)]
    pub dns: Option<Dns>,
}

impl BridgeConf {
    /// Parses and validates; `isDefaultGateway` implies `isGateway`.
    pub fn load(req: &Request) -> Result<BridgeConf, CniError> {
        let mut conf: BridgeConf = req.config()?;
        if conf.is_default_gateway {
            conf.is_gateway = true;
        }
        conf.validate(req)?;
        conf.vlan_plan()?;
        Ok(conf)
    }

    fn validate(&self, req: &Request) -> Result<(), CniError> {
        cni_types::validate::validate_interface_name_field("bridge", &self.bridge)?;
        if self.hairpin_mode && self.promisc_mode {
            return Err(CniError::invalid_config("cannot set hairpinMode and promiscMode at the same time"));
        }
        if self.mtu != 0 && !(68..=65535).contains(&self.mtu) {
            return Err(CniError::invalid_config(format!(
                "invalid mtu {}: must be between 68 and 65535",
                self.mtu
            )));
        }
        if self.disable_container_interface && cni_sdk::delegate::has_ipam(req) {
            return Err(CniError::invalid_config("cannot use ipam when disableContainerInterface is set"));
        }
        if self.is_gateway && cni_sdk::delegate::ipam_autoconfigures(req) {
            // slaac's gateway is the advertising router: the bridge would take the router's
            // link-local address as its own, a duplicate on the segment.
            return Err(CniError::invalid_config(
                "isGateway/isDefaultGateway: with ipam slaac the gateway is the advertising router, not the bridge",
            ));
        }
        match self.ip_masq_backend.as_deref() {
            None | Some("nftables") => {}
            // Masquerading is programmed over nf_tables netlink; an iptables backend would
            // mean spawning a process per ADD, which this project exists to avoid.
            Some("iptables") => return Err(CniError::unsupported_field("ipMasqBackend", "iptables")),
            Some(other) => {
                return Err(CniError::invalid_config(format!(
                    "invalid ipMasqBackend {other:?}: expected \"nftables\" or \"iptables\""
                )))
            }
        }
        Ok(())
    }

    /// The VLAN keys, validated (and, with `isGateway`, the gateway link's name).
    pub fn vlan_plan(&self) -> Result<PortPlan, CniError> {
        let plan = PortPlan::new(self.vlan, &self.vlan_trunk, self.preserve_default_vlan)?;
        if self.is_gateway && plan.access != 0 {
            vlan_plan::validate_gateway_link_name(&self.bridge, plan.access)?;
        }
        Ok(plan)
    }

    pub fn mtu(&self) -> Option<u32> {
        (self.mtu != 0).then_some(self.mtu)
    }
}
