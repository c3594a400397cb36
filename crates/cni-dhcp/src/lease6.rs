//! A DHCPv6 lease: what a REPLY's IA_NA granted, checked as untrusted input, and the CNI
//! result made from it.
//!
//! DHCPv6 hands out neither a prefix length nor routes (RFC 8415 18.2.10.1: the prefix is
//! the router advertisement's business). The address gets the prefix length the
//! configuration gives (`ipv6PrefixLength`) or /128, so the interface plugin never claims a
//! whole subnet on-link that may not be; the default route, and on-link prefixes, come from
//! router advertisements, which the kernel keeps acting on (`accept_ra`). The result
//! therefore carries the address, no gateway and no routes.

use std::net::{IpAddr, Ipv6Addr};

use cni_types::{Dns, IpConfig, Route};
use ipnet::{IpNet, Ipv6Net};
use serde::{Deserialize, Serialize};

use super::lease::LeaseTimes;
use super::options::{domain_search, MAX_DNS_SERVERS};
use super::wire6::{IaNa, Message, MAX_DUID_LEN, OPT_DNS_SERVERS, OPT_DOMAIN_LIST, OPT_SERVER_ID};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease6 {
    /// The address, with the configured prefix length (see the module documentation).
    pub address: Ipv6Net,
    /// The DUID of the server that granted it (RENEW and RELEASE name it).
    pub server_duid: Vec<u8>,
    pub iaid: u32,
    #[serde(default)]
    pub dns_servers: Vec<Ipv6Addr>,
    #[serde(default)]
    pub search: Vec<String>,
    pub preferred_secs: u32,
    /// The valid lifetime (when it ends, the address is gone), T1 and T2 (RFC 8415 21.4;
    /// the client picks 0.5 and 0.8 of the preferred lifetime when the server leaves them
    /// to it).
    #[serde(flatten)]
    pub times: LeaseTimes,
}

/// Why a reply's binding is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the server sent no usable server id")]
    NoServerId,
    #[error("no IA_NA for our IAID with an address")]
    NoAddress,
    #[error("the offered address {0} is not a unicast global or unique-local address")]
    BadAddress(Ipv6Addr),
    #[error("the offered lifetimes are unusable (preferred {preferred} s, valid {valid} s)")]
    BadLifetimes { preferred: u32, valid: u32 },
}

/// True for an address a container may be given: unicast, not loopback, link-local,
/// v4-mapped or otherwise special-cased (multicast, unspecified).
pub fn is_assignable(addr: Ipv6Addr) -> bool {
    let s = addr.segments();
    !(addr.is_unspecified()
        || addr.is_loopback()
        || addr.is_multicast()
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local, deprecated
        || addr.to_ipv4_mapped().is_some()
        || s[..6] == [0; 6]) // v4-compatible and the rest of ::/96
}

impl Lease6 {
    /// The lease a REPLY (or ADVERTISE) grants to IA `iaid`, with `prefix_len` for the
    /// address. `sent_unix` is when the request went out.
    pub fn from_reply(reply: &Message, iaid: u32, prefix_len: u8, sent_unix: u64) -> Result<Lease6, Refused> {
        let server_duid = reply
            .option(OPT_SERVER_ID)
            .filter(|d| (3..=MAX_DUID_LEN).contains(&d.len()))
            .ok_or(Refused::NoServerId)?
            .to_vec();
        let ia: IaNa = reply.ia_nas().find(|ia| ia.iaid == iaid).ok_or(Refused::NoAddress)?;
        let granted =
            ia.addresses.iter().find(|a| a.status.is_success() && a.valid > 0).ok_or(Refused::NoAddress)?;
        if !is_assignable(granted.address) {
            return Err(Refused::BadAddress(granted.address));
        }
        // "Infinity" (all ones) is taken as the 136 years it reads as: the deadlines
        // saturate rather than overflow (see `LeaseTimes`).
        let (preferred, valid) = (granted.preferred, granted.valid);
        if preferred > valid {
            // RFC 8415 21.6: such an address must be discarded.
            return Err(Refused::BadLifetimes { preferred, valid });
        }
        let default_t1 = preferred / 2;
        let default_t2 = (u64::from(preferred) * 4 / 5) as u32;
        let (mut t1, mut t2) = (ia.t1, ia.t2);
        // Zero leaves them to us; out of order, or past the valid lifetime, is the
        // server's mistake: fall back to the defaults rather than renew too late.
        if t1 == 0 || t2 == 0 || t1 > t2 || t2 > valid {
            t1 = default_t1;
            t2 = default_t2;
        }
        let dns_servers = reply
            .option(OPT_DNS_SERVERS)
            .unwrap_or_default()
            .chunks_exact(16)
            .map(|c| Ipv6Addr::from(<[u8; 16]>::try_from(c).expect("chunks of 16")))
            .filter(|a| !a.is_unspecified() && !a.is_multicast())
            .take(MAX_DNS_SERVERS)
            .collect();
        let search = reply.option(OPT_DOMAIN_LIST).map(domain_search).unwrap_or_default();
        Ok(Lease6 {
            address: Ipv6Net::new(granted.address, prefix_len.min(128)).map_err(|_| Refused::NoAddress)?,
            server_duid,
            iaid,
            dns_servers,
            search,
            preferred_secs: preferred,
            times: LeaseTimes {
                lease_secs: valid,
                renew_secs: t1,
                rebind_secs: t2,
                acquired_unix: sent_unix,
            },
        })
    }

    pub fn ip_config(&self) -> IpConfig {
        IpConfig { interface: None, address: IpNet::V6(self.address), gateway: None }
    }

    /// None: routes come from router advertisements (see the module documentation).
    pub fn routes(&self) -> Vec<Route> {
        Vec::new()
    }

    pub fn dns(&self) -> Dns {
        Dns {
            nameservers: self.dns_servers.iter().map(ToString::to_string).collect(),
            domain: String::new(),
            search: self.search.clone(),
            options: Vec::new(),
        }
    }

    pub fn address_ip(&self) -> IpAddr {
        IpAddr::V6(self.address.addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::encode_domain_search;
    use crate::wire6::{MessageType, Status, OPT_IA_NA, STATUS_NO_ADDRS_AVAIL};

    fn reply(address: &str, preferred: u32, valid: u32, t1: u32, t2: u32) -> Message {
        let mut m = Message::new(MessageType::Reply, 1);
        m.push(OPT_SERVER_ID, vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1]);
        let ia = IaNa::grant(9, (t1, t2), address.parse().unwrap(), (preferred, valid));
        m.push(OPT_IA_NA, ia.encode());
        m
    }

    #[test]
    fn a_reply_makes_a_lease_with_dns_and_search() {
        let mut m = reply("2001:db8::20", 100, 200, 30, 60);
        let mut dns = "2001:db8::53".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        dns.extend_from_slice(&[0xff; 16]); // multicast: dropped
        dns.extend_from_slice(&[1, 2, 3]); // not a whole address: dropped
        m.push(OPT_DNS_SERVERS, dns);
        let mut search = encode_domain_search(&["a.example", "b.example"]);
        search.extend_from_slice(b"\x05x y\nz\0"); // a name with a space and a newline
        m.push(OPT_DOMAIN_LIST, search);
        let lease = Lease6::from_reply(&m, 9, 64, 1000).unwrap();
        assert_eq!(lease.address, "2001:db8::20/64".parse::<Ipv6Net>().unwrap());
        assert_eq!(
            (lease.times.renew_at(), lease.times.rebind_at(), lease.times.expires_at()),
            (1030, 1060, 1200)
        );
        assert_eq!(lease.dns().nameservers, ["2001:db8::53"]);
        assert_eq!(lease.dns().search, ["a.example", "b.example"]);
        assert_eq!(lease.ip_config().gateway, None);
        assert!(lease.routes().is_empty());
    }

    #[test]
    fn times_left_to_the_client_or_out_of_order_get_the_defaults() {
        let lease = Lease6::from_reply(&reply("fd00::5", 100, 200, 0, 0), 9, 128, 0).unwrap();
        assert_eq!((lease.times.renew_secs, lease.times.rebind_secs), (50, 80));
        let lease = Lease6::from_reply(&reply("fd00::5", 100, 200, 90, 40), 9, 128, 0).unwrap();
        assert_eq!((lease.times.renew_secs, lease.times.rebind_secs), (50, 80));
        let lease =
            Lease6::from_reply(&reply("fd00::5", u32::MAX, u32::MAX, 0, 0), 9, 128, u64::MAX - 5).unwrap();
        assert_eq!(lease.times.expires_at(), u64::MAX, "infinity saturates");
    }

    #[test]
    fn special_addresses_and_bad_lifetimes_are_refused() {
        for bad in ["::", "::1", "ff02::1", "fe80::1", "::ffff:10.0.0.1", "::10.0.0.1", "fec0::1"] {
            assert_eq!(
                Lease6::from_reply(&reply(bad, 10, 20, 0, 0), 9, 64, 0),
                Err(Refused::BadAddress(bad.parse().unwrap())),
                "{bad}"
            );
        }
        assert_eq!(
            Lease6::from_reply(&reply("fd00::5", 30, 20, 0, 0), 9, 64, 0),
            Err(Refused::BadLifetimes { preferred: 30, valid: 20 })
        );
        assert_eq!(Lease6::from_reply(&reply("fd00::5", 0, 0, 0, 0), 9, 64, 0), Err(Refused::NoAddress));
        assert_eq!(Lease6::from_reply(&reply("fd00::5", 1, 2, 0, 0), 8, 64, 0), Err(Refused::NoAddress));
        let mut m = reply("fd00::5", 1, 2, 0, 0);
        m.options.retain(|(c, _)| *c != OPT_SERVER_ID);
        assert_eq!(Lease6::from_reply(&m, 9, 64, 0), Err(Refused::NoServerId));
        let mut m = Message::new(MessageType::Reply, 1);
        m.push(OPT_SERVER_ID, vec![0, 3, 0, 1]);
        let mut ia = IaNa::request(9, None);
        ia.status = Status { code: STATUS_NO_ADDRS_AVAIL, message: String::new() };
        m.push(OPT_IA_NA, ia.encode());
        assert_eq!(Lease6::from_reply(&m, 9, 64, 0), Err(Refused::NoAddress));
    }
}
