//! A lease: what a DHCPACK granted, in the form the daemon keeps on disk and sends to the
//! plugin, and the CNI result made from it.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{SystemTime, UNIX_EPOCH};

use cni_types::{Dns, IpConfig, Route};
use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Serialize};

use super::lease6::Lease6;
use super::options as opt;
use super::wire::Message;

/// One route a server handed out; `gw` 0.0.0.0 means on-link (RFC 3442).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRoute {
    pub dst: Ipv4Net,
    pub gw: Ipv4Addr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The address with the prefix of the subnet mask option (/32 without one).
    pub address: Ipv4Net,
    pub server_id: Ipv4Addr,
    #[serde(default)]
    pub routers: Vec<Ipv4Addr>,
    /// Option 121 routes; when present, options 3 and 33 are ignored (RFC 3442).
    #[serde(default)]
    pub classless_routes: Vec<LeaseRoute>,
    #[serde(default)]
    pub static_routes: Vec<LeaseRoute>,
    #[serde(default)]
    pub dns_servers: Vec<Ipv4Addr>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub search: Vec<String>,
    #[serde(default)]
    pub mtu: Option<u16>,
    /// From the ACK: the lease time (option 51), T1 and T2 (options 58 and 59; 1/2 and 7/8
    /// of the lease time by default, RFC 2131 4.4.5).
    #[serde(flatten)]
    pub times: LeaseTimes,
}

/// When a lease of either family is to be renewed (T1), rebound (T2) and given up, as
/// seconds from the moment the request that won it was sent. Records keep these fields
/// flat in the lease, as they always have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimes {
    /// How long the address is the client's (v6: the valid lifetime).
    pub lease_secs: u32,
    pub renew_secs: u32,
    pub rebind_secs: u32,
    /// Unix time the request was sent; the times count from then.
    pub acquired_unix: u64,
}

impl LeaseTimes {
    /// Unix time `secs` after the request; a lifetime of "infinity" saturates rather than
    /// overflows.
    fn at(&self, secs: u32) -> u64 {
        self.acquired_unix.saturating_add(u64::from(secs))
    }
    pub fn renew_at(&self) -> u64 {
        self.at(self.renew_secs)
    }
    pub fn rebind_at(&self) -> u64 {
        self.at(self.rebind_secs)
    }
    pub fn expires_at(&self) -> u64 {
        self.at(self.lease_secs)
    }
    /// The same lease with every time at zero: lost (a NAK, NoBinding).
    fn lost(self) -> LeaseTimes {
        LeaseTimes { lease_secs: 0, renew_secs: 0, rebind_secs: 0, ..self }
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Lease {
    /// The lease an ACK grants, or `None` when the ACK lacks what a lease needs (an
    /// address, a server id). `acquired_unix` is when the request was sent (RFC 2131 4.4.1:
    /// times count from then).
    pub fn from_ack(ack: &Message, acquired_unix: u64) -> Option<Lease> {
        if ack.yiaddr.is_unspecified() {
            return None;
        }
        let server_id = ack.option(opt::SERVER_ID).and_then(opt::ipv4)?;
        let prefix =
            ack.option(opt::SUBNET_MASK).and_then(opt::ipv4).and_then(opt::mask_prefix).unwrap_or(32);
        let lease_secs = ack.option(opt::LEASE_TIME).and_then(opt::u32_value).unwrap_or(u32::MAX);
        let default_t1 = lease_secs / 2;
        let default_t2 = (u64::from(lease_secs) * 7 / 8) as u32;
        let mut renew_secs = ack.option(opt::RENEWAL_TIME).and_then(opt::u32_value).unwrap_or(default_t1);
        let mut rebind_secs = ack.option(opt::REBINDING_TIME).and_then(opt::u32_value).unwrap_or(default_t2);
        // Times out of order are the server's mistake; fall back to the RFC's defaults.
        if rebind_secs > lease_secs || renew_secs > rebind_secs {
            renew_secs = default_t1;
            rebind_secs = default_t2;
        }
        let to_routes = |list: Vec<(Ipv4Net, Ipv4Addr)>| {
            list.into_iter().map(|(dst, gw)| LeaseRoute { dst, gw }).collect::<Vec<_>>()
        };
        Some(Lease {
            address: Ipv4Net::new(ack.yiaddr, prefix).ok()?,
            server_id,
            routers: ack.option(opt::ROUTERS).map(opt::ipv4_list).unwrap_or_default(),
            classless_routes: to_routes(
                ack.option(opt::CLASSLESS_ROUTES).map(opt::classless_routes).unwrap_or_default(),
            ),
            static_routes: to_routes(
                ack.option(opt::STATIC_ROUTES).map(opt::static_routes).unwrap_or_default(),
            ),
            dns_servers: ack
                .option(opt::DNS_SERVERS)
                .map(opt::ipv4_list)
                .unwrap_or_default()
                .into_iter()
                .take(opt::MAX_DNS_SERVERS)
                .collect(),
            domain: ack.option(opt::DOMAIN_NAME).and_then(opt::domain_name),
            search: ack.option(opt::DOMAIN_SEARCH).map(opt::domain_search).unwrap_or_default(),
            mtu: ack.option(opt::INTERFACE_MTU).and_then(opt::u16_value),
            times: LeaseTimes { lease_secs, renew_secs, rebind_secs, acquired_unix },
        })
    }

    pub fn gateway(&self) -> Option<Ipv4Addr> {
        self.routers.first().copied()
    }

    /// Routes for the result: option 121 alone when present (RFC 3442 says to ignore the
    /// router option then); otherwise option 33 plus a default route via the first router.
    pub fn routes(&self) -> Vec<Route> {
        let convert = |r: &LeaseRoute| {
            let gw = (!r.gw.is_unspecified()).then_some(IpAddr::V4(r.gw));
            Route::new(IpNet::V4(r.dst), gw)
        };
        if !self.classless_routes.is_empty() {
            return self.classless_routes.iter().map(convert).collect();
        }
        let mut routes: Vec<Route> = self.static_routes.iter().map(convert).collect();
        if let Some(gw) = self.gateway() {
            routes.push(Route::new("0.0.0.0/0".parse().expect("literal"), Some(IpAddr::V4(gw))));
        }
        routes
    }

    pub fn dns(&self) -> Dns {
        Dns {
            nameservers: self.dns_servers.iter().map(ToString::to_string).collect(),
            domain: self.domain.clone().unwrap_or_default(),
            search: self.search.clone(),
            options: Vec::new(),
        }
    }

    pub fn ip_config(&self) -> IpConfig {
        IpConfig {
            interface: None,
            address: IpNet::V4(self.address),
            gateway: self.gateway().map(IpAddr::V4),
        }
    }
}

/// A lease of either family, as records and daemon responses carry it. Untagged, so the
/// records of earlier versions (v4 leases, with no `iaid`) read as they are: a v4 lease
/// never reads as a v6 one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Leased {
    V6(Lease6),
    V4(Lease),
}

impl Leased {
    pub fn times(&self) -> &LeaseTimes {
        match self {
            Leased::V4(l) => &l.times,
            Leased::V6(l) => &l.times,
        }
    }
    pub fn renew_at(&self) -> u64 {
        self.times().renew_at()
    }
    pub fn rebind_at(&self) -> u64 {
        self.times().rebind_at()
    }
    pub fn expires_at(&self) -> u64 {
        self.times().expires_at()
    }
    pub fn lease_secs(&self) -> u32 {
        self.times().lease_secs
    }
    /// The address with its prefix length.
    pub fn address(&self) -> IpNet {
        match self {
            Leased::V4(l) => IpNet::V4(l.address),
            Leased::V6(l) => IpNet::V6(l.address),
        }
    }
    /// The same lease with every time at zero: lost (a NAK, NoBinding).
    pub fn lost(&self) -> Leased {
        let mut lost = self.clone();
        match &mut lost {
            Leased::V4(l) => l.times = l.times.lost(),
            Leased::V6(l) => l.times = l.times.lost(),
        }
        lost
    }
    pub fn ip_config(&self) -> IpConfig {
        match self {
            Leased::V4(l) => l.ip_config(),
            Leased::V6(l) => l.ip_config(),
        }
    }
    pub fn routes(&self) -> Vec<Route> {
        match self {
            Leased::V4(l) => l.routes(),
            Leased::V6(l) => l.routes(),
        }
    }
    pub fn dns(&self) -> Dns {
        match self {
            Leased::V4(l) => l.dns(),
            Leased::V6(l) => l.dns(),
        }
    }
}

impl std::fmt::Display for Leased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.address().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{encode_classless_routes, encode_domain_search};

    fn ack() -> Message {
        let mut m = Message::request(1, [0; 6]);
        m.yiaddr = Ipv4Addr::new(10, 9, 0, 20);
        m.set_option(opt::SERVER_ID, vec![10, 9, 0, 1]);
        m.set_option(opt::SUBNET_MASK, vec![255, 255, 255, 0]);
        m.set_option(opt::ROUTERS, vec![10, 9, 0, 1, 10, 9, 0, 2]);
        m.set_option(opt::DNS_SERVERS, vec![10, 9, 0, 53]);
        m.set_option(opt::DOMAIN_NAME, b"example.org".to_vec());
        m.set_option(opt::DOMAIN_SEARCH, encode_domain_search(&["a.example", "b.example"]));
        m.set_option(opt::LEASE_TIME, 3600u32.to_be_bytes().to_vec());
        m.set_option(opt::STATIC_ROUTES, vec![192, 168, 5, 0, 10, 9, 0, 3]);
        m
    }

    #[test]
    fn lease_from_ack_with_default_times() {
        let lease = Lease::from_ack(&ack(), 1000).unwrap();
        assert_eq!(lease.address, "10.9.0.20/24".parse::<Ipv4Net>().unwrap());
        assert_eq!(
            (lease.times.renew_at(), lease.times.rebind_at(), lease.times.expires_at()),
            (2800, 4150, 4600)
        );
        let json = serde_json::to_value(lease.routes()).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"dst": "192.168.5.0/24", "gw": "10.9.0.3"}, {"dst": "0.0.0.0/0", "gw": "10.9.0.1"}])
        );
        let dns = lease.dns();
        assert_eq!(
            (dns.nameservers, dns.domain, dns.search),
            (
                vec!["10.9.0.53".to_string()],
                "example.org".into(),
                vec!["a.example".to_string(), "b.example".to_string()]
            )
        );
        assert_eq!(lease.ip_config().gateway, Some("10.9.0.1".parse().unwrap()));
    }

    #[test]
    fn a_server_cannot_write_resolver_settings_or_flood_the_result() {
        let mut m = ack();
        m.set_option(opt::DOMAIN_NAME, b"evil.example\nnameserver 6.6.6.6".to_vec());
        let mut search = encode_domain_search(&["good.example"]);
        search.extend_from_slice(b"\x05x y\nz\0"); // a name with a space and a newline
        search.extend(encode_domain_search(&["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"]));
        m.set_option(opt::DOMAIN_SEARCH, search);
        m.set_option(opt::DNS_SERVERS, (1..=60).flat_map(|i| [10, 9, 0, i]).collect());
        let dns = Lease::from_ack(&m, 1000).unwrap().dns();
        assert_eq!(dns.domain, "", "a domain name with a newline is dropped");
        assert_eq!(dns.search, ["good.example", "n1", "n2", "n3", "n4", "n5", "n6", "n7"]);
        assert_eq!(dns.nameservers.len(), opt::MAX_DNS_SERVERS);
    }

    #[test]
    fn classless_routes_win_over_routers() {
        let mut m = ack();
        let routes = [
            ("0.0.0.0/0".parse().unwrap(), Ipv4Addr::new(10, 9, 0, 7)),
            ("10.9.1.0/24".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
        ];
        m.set_option(opt::CLASSLESS_ROUTES, encode_classless_routes(&routes));
        let json = serde_json::to_value(Lease::from_ack(&m, 0).unwrap().routes()).unwrap();
        assert_eq!(json, serde_json::json!([{"dst": "0.0.0.0/0", "gw": "10.9.0.7"}, {"dst": "10.9.1.0/24"}]));
    }

    proptest::proptest! {
        /// Whatever options an ACK carries, making a lease and a result from it never
        /// panics, and the times stay ordered.
        #[test]
        fn any_ack_options_are_safe(
            options in proptest::collection::vec((1u8..=254, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)), 0..12),
            yiaddr in proptest::prelude::any::<u32>(),
        ) {
            let mut m = ack();
            m.yiaddr = Ipv4Addr::from(yiaddr);
            for (code, value) in options {
                m.set_option(code, value);
            }
            if let Some(lease) = Lease::from_ack(&m, 1000) {
                proptest::prop_assert!(lease.times.renew_at() <= lease.times.rebind_at() && lease.times.rebind_at() <= lease.times.expires_at());
                let _ = (lease.routes(), lease.dns(), lease.ip_config());
            }
        }
    }

    #[test]
    fn bad_acks_and_times() {
        let mut m = ack();
        m.set_option(opt::RENEWAL_TIME, 5000u32.to_be_bytes().to_vec());
        assert_eq!(Lease::from_ack(&m, 0).unwrap().times.renew_secs, 1800);
        m.options.retain(|(c, _)| *c != opt::SERVER_ID);
        assert!(Lease::from_ack(&m, 0).is_none());
        let mut m = ack();
        m.yiaddr = Ipv4Addr::UNSPECIFIED;
        assert!(Lease::from_ack(&m, 0).is_none());
    }
}
