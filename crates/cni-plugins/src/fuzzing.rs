//! The dry part of every plugin, for the `plugin_entry` fuzz target in `fuzz/` and for
//! [`crate::dry_run`] (what `cnitool validate` calls). A fuzzer may run each plugin's
//! parsing and validation of a request, but never the netlink, nftables and file work
//! behind it: this is the stage before any of that, by the plugin's registry name.

use cni_sdk::{CniError, Request};

/// A configuration stage by plugin name, `None` for a name it does not know: how the
/// stages of our plugins built outside this crate (etcd-ipam's, dhcp's) are passed in.
pub type Stage = fn(&str, &Request) -> Option<Result<(), CniError>>;

/// Parses and validates `req` as the plugin `name`'s ADD does before it touches anything
/// (and, for an interface plugin, as its built-in IPAM plugin does with the same stdin).
/// `None` for a name the registry does not know.
pub fn config_stage(name: &str, req: &Request) -> Option<Result<(), CniError>> {
    use crate::interface::{bridge, dummy, host_device, ipvlan, macvlan, ptp, tap, vlan};
    use crate::ipam::{host_local, slaac, static_ipam};
    use crate::meta::{bandwidth, dnsname, firewall, portmap, sbr, tuning, vrf};
    Some(match name {
        "bandwidth" => bandwidth::config::load(req).map(drop),
        "bridge" => bridge::BridgeConf::load(req).map(drop),
        "dnsname" => dnsname::config_stage(req),
        "dummy" => dummy::require_ipam(req),
        "firewall" => firewall::config::load(req).map(drop),
        "host-device" => host_device::HostDeviceConf::load(req).map(drop),
        "host-local" => host_local::load(req).map(drop),
        "ipvlan" => ipvlan::IpvlanConf::load(req).map(drop),
        "loopback" => Ok(()),
        "macvlan" => macvlan::MacvlanConf::load(req).map(drop),
        "portmap" => portmap::config::PortmapConf::load(req).map(drop),
        "ptp" => ptp::PtpConf::load(req).map(drop),
        "sbr" => sbr::load(req).map(drop),
        "slaac" => slaac::config::load(req).map(drop),
        "static" => static_ipam::StaticIpam::load(req).map(drop),
        "tap" => tap::TapConf::load(req).map(drop),
        "tuning" => tuning::config::load(req).map(drop),
        "vlan" => vlan::VlanConf::load(req).map(drop),
        "vrf" => vrf::load(req).map(drop),
        _ => return None,
    })
}

/// [`config_stage`] (or the first of `others` that knows a plugin not of this crate) followed by the IPAM
/// plugin's own stage when `ipam.type` names one of ours: an interface plugin hands it the
/// same stdin.
pub fn config_stage_with_ipam(name: &str, req: &Request, others: &[Stage]) -> Option<Result<(), CniError>> {
    let stage =
        |name: &str| config_stage(name, req).or_else(|| others.iter().find_map(|other| other(name, req)));
    let own = stage(name)?;
    let ipam = req.conf.ipam.as_ref().map(|i| i.ipam_type.as_str()).filter(|t| *t != name);
    Some(match ipam.and_then(stage) {
        Some(ipam) => own.and(ipam),
        None => own,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_sdk::Command;

    fn request(stdin: &str) -> Request {
        Request {
            command: Command::Add,
            container_id: "ctr".into(),
            netns: "/run/netns/none".into(),
            ifname: "eth0".into(),
            args: Default::default(),
            path: vec![],
            stdin: stdin.as_bytes().to_vec(),
            conf: serde_json::from_str(stdin).unwrap(),
            version: cni_sdk::Version::V1_1_0,
            trace: None,
        }
    }

    #[test]
    fn every_registered_plugin_has_a_config_stage() {
        let req = request(r#"{"cniVersion":"1.1.0","name":"n","type":"x"}"#);
        for entry in crate::registry::plugins() {
            assert!(config_stage(entry.name, &req).is_some(), "{} has no config stage", entry.name);
        }
        assert!(config_stage("no-such-plugin", &req).is_none());
    }

    #[test]
    fn the_stage_refuses_what_the_plugin_refuses() {
        let bad_mtu = request(r#"{"cniVersion":"1.1.0","name":"n","type":"bridge","mtu":5}"#);
        assert_eq!(config_stage("bridge", &bad_mtu).unwrap().unwrap_err().code, 7);
        let bad_range = request(
            r#"{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/33"}}"#,
        );
        assert!(config_stage("bridge", &bad_range).unwrap().is_ok());
        assert!(config_stage_with_ipam("bridge", &bad_range, &[]).unwrap().is_err());
        assert!(config_stage("dummy", &request(r#"{"cniVersion":"1.1.0","name":"n","type":"dummy"}"#))
            .unwrap()
            .is_err());
    }
}
