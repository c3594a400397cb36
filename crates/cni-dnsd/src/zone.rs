//! What the resolver knows: per network, its domain and the names of its attachments, built
//! from the state directory in one pass and swapped in whole, so a query sees either the
//! old records or the new ones.
//!
//! Names are kept lower case (DNS compares names case-insensitively, RFC 4343) without the
//! trailing dot. A name registered by several attachments (two containers given one alias,
//! or one container on two interfaces) answers with all their addresses: each attachment
//! owns only its own file, so removing one leaves the others' addresses in place. (The
//! reference plugin kept one hosts file and removed every line carrying the name on DEL,
//! dropping the other container's entry too.)

use cni_dns::{validate_domain, validate_host_name, HostRecord, StateDir, MAX_ADDRESSES, MAX_ALIASES};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// One network's records.
#[derive(Debug, Default)]
pub struct NetworkZone {
    pub network: String,
    /// Lower case, no trailing dot, e.g. `dns.podman`.
    pub domain: String,
    pub listen: Vec<IpAddr>,
    /// The port answered on at the `listen` addresses.
    pub port: u16,
    pub upstreams: Vec<SocketAddr>,
    /// Who may ask: sources outside these are not answered (none: nobody is).
    pub subnets: Vec<ipnet::IpNet>,
    /// The bridge the network's clients are behind, and its index when the records were
    /// loaded (0: no such interface now, so nothing arrives there).
    pub interface: Option<String>,
    pub ifindex: u32,
    /// `<name>.<domain>` → addresses, in the order attachments registered them (by file).
    names: HashMap<String, Vec<IpAddr>>,
    /// address → the container name that owns it (`<name>.<domain>`).
    pointers: HashMap<IpAddr, String>,
    pub attachments: usize,
}

/// Why a query was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source address is not in the network's subnets, or is the gateway's own (the
    /// host itself: the resolver forwarding to itself, or any local process).
    Source,
    /// It arrived on another interface than the network's bridge.
    Interface,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Source => "source",
            Refusal::Interface => "interface",
        }
    }
}

/// What a name resolves to on one network.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The name is ours: these are its addresses (maybe none of the type asked for).
    Found(&'a [IpAddr]),
    /// The name is under our domain and nobody has it.
    NoSuchName,
    /// Not under our domain: forward it.
    NotOurs,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl NetworkZone {
    pub fn new(network: &str, domain: &str, listen: Vec<IpAddr>, upstreams: Vec<SocketAddr>) -> NetworkZone {
        NetworkZone { network: network.into(), domain: key(domain), listen, upstreams, ..Default::default() }
    }

    /// Adds one attachment. Records are checked again here: the files are root's, but a
    /// record the plugin would refuse is not served either.
    pub fn add(&mut self, host: &HostRecord) -> Result<(), String> {
        for name in std::iter::once(&host.name).chain(&host.aliases) {
            validate_host_name(name, &self.domain).map_err(|e| format!("name {name:?} {e}"))?;
        }
        if host.aliases.len() > MAX_ALIASES || host.addresses.len() > MAX_ADDRESSES {
            return Err("more aliases or addresses than allowed".into());
        }
        self.attachments += 1;
        let owner = format!("{}.{}", key(&host.name), self.domain);
        for address in &host.addresses {
            self.pointers.entry(*address).or_insert_with(|| owner.clone());
        }
        for name in std::iter::once(&host.name).chain(&host.aliases) {
            let addresses = self.names.entry(format!("{}.{}", key(name), self.domain)).or_default();
            for address in &host.addresses {
                if !addresses.contains(address) {
                    addresses.push(*address);
                }
            }
        }
        Ok(())
    }

    /// Whether a query from `peer` that arrived on interface `ifindex` is this network's to
    /// answer: from one of its subnets, on its bridge. Anything else (a host's neighbour
    /// routed to the gateway, a container of another network, a spoofed source) is not.
    ///
    /// A packet the host sends to its own gateway address is looped back, yet the kernel
    /// reports the gateway's interface (the bridge) as where it arrived; its source is then
    /// the gateway address itself, which no container has, so that is refused by name.
    pub fn admits(&self, peer: IpAddr, ifindex: u32) -> Result<(), Refusal> {
        let peer = peer.to_canonical();
        if !self.subnets.iter().any(|subnet| subnet.contains(&peer)) || self.listen.contains(&peer) {
            return Err(Refusal::Source);
        }
        if self.ifindex == 0 || ifindex != self.ifindex {
            return Err(Refusal::Interface);
        }
        Ok(())
    }

    /// Looks a query name up. A bare single label (`web`, asked by a client without our
    /// search domain) is tried under the domain too, as dnsmasq's `expand-hosts` did.
    pub fn lookup(&self, qname: &str) -> Lookup<'_> {
        let name = key(qname);
        if let Some(found) = self.names.get(&name) {
            return Lookup::Found(found);
        }
        if name == self.domain {
            return Lookup::Found(&[]);
        }
        // `<something>.<domain>`, without building that string for every query.
        let under_domain = name.len() > self.domain.len()
            && name.ends_with(self.domain.as_str())
            && name.as_bytes()[name.len() - self.domain.len() - 1] == b'.';
        if under_domain {
            return Lookup::NoSuchName;
        }
        if !name.is_empty() && !name.contains('.') {
            if let Some(found) = self.names.get(&format!("{name}.{}", self.domain)) {
                return Lookup::Found(found);
            }
        }
        Lookup::NotOurs
    }

    /// The name an address of this network belongs to (for PTR).
    pub fn pointer(&self, address: IpAddr) -> Option<&str> {
        self.pointers.get(&address).map(String::as_str)
    }

    pub fn name_count(&self) -> usize {
        self.names.len()
    }
}

/// Every network, and which one answers on which address.
#[derive(Debug, Default)]
pub struct Zones {
    pub networks: BTreeMap<String, Arc<NetworkZone>>,
    pub by_address: HashMap<IpAddr, Arc<NetworkZone>>,
    /// What could not be loaded, by file, for the log and `status`.
    pub problems: Vec<String>,
}

impl Zones {
    /// Reads the whole state directory (bounded by the crate's limits).
    pub fn load(state: &StateDir) -> Zones {
        let mut zones = Zones::default();
        let networks = match state.networks(cni_dns::MAX_NETWORKS) {
            Ok(n) => n,
            Err(e) => {
                zones.problems.push(e.to_string());
                return zones;
            }
        };
        for network in networks {
            let record = match state.read_network(&network) {
                Ok(Some(r)) => r,
                // A network directory without its file is one a plugin is still making.
                Ok(None) => continue,
                Err(e) => {
                    zones.problems.push(e.to_string());
                    continue;
                }
            };
            if let Err(e) = validate_domain(&record.domain) {
                zones.problems.push(format!("network {network}: domain {:?} {e}", record.domain));
                continue;
            }
            let mut upstreams = record.upstreams.clone();
            upstreams.truncate(cni_dns::MAX_UPSTREAMS);
            let mut zone = NetworkZone::new(&network, &record.domain, record.listen.clone(), upstreams);
            zone.port = record.port;
            zone.subnets = record.subnets.iter().copied().take(cni_dns::MAX_ADDRESSES).collect();
            zone.interface = record.interface.clone();
            match &record.interface {
                Some(name) => match cni_os::inet::interface_index(name) {
                    Ok(index) => zone.ifindex = index,
                    // Answered again as soon as the bridge is back and the records are read.
                    Err(e) => zones.problems.push(format!("network {network}: bridge {name:?}: {e}")),
                },
                None => zones.problems.push(format!(
                    "network {network}: the record names no bridge (written by an older plugin): \
                     nobody is answered until the network's next ADD"
                )),
            }
            match state.hosts(&network, cni_dns::MAX_HOSTS_PER_NETWORK) {
                Ok(hosts) => {
                    for host in hosts {
                        match host {
                            Ok(h) => {
                                if let Err(e) = zone.add(&h) {
                                    zones
                                        .problems
                                        .push(format!("network {network}: {}: {e}", h.container_id));
                                }
                            }
                            Err(e) => zones.problems.push(e.to_string()),
                        }
                    }
                }
                Err(e) => zones.problems.push(e.to_string()),
            }
            let zone = Arc::new(zone);
            for address in &zone.listen {
                if let Some(other) = zones.by_address.get(address) {
                    zones.problems.push(format!(
                        "network {network}: {address} is already served for network {}",
                        other.network
                    ));
                    continue;
                }
                zones.by_address.insert(*address, zone.clone());
            }
            zones.networks.insert(network, zone);
        }
        zones
    }

    pub fn attachment_count(&self) -> usize {
        self.networks.values().map(|z| z.attachments).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: &str, name: &str, aliases: &[&str], addresses: &[&str]) -> HostRecord {
        HostRecord {
            container_id: id.into(),
            ifname: "eth0".into(),
            name: name.into(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn names_aliases_and_case() {
        let mut zone = NetworkZone::new("n", "DNS.Podman", vec![], vec![]);
        zone.add(&host("c1", "Web", &["www"], &["10.0.0.2", "fd00::2"])).unwrap();
        let both = ips(&["10.0.0.2", "fd00::2"]);
        assert_eq!(zone.lookup("web.dns.podman."), Lookup::Found(&both));
        assert_eq!(zone.lookup("WEB.DNS.PODMAN"), Lookup::Found(&both));
        assert_eq!(zone.lookup("www.dns.podman"), Lookup::Found(&both));
        assert_eq!(zone.lookup("web"), Lookup::Found(&both));
        assert_eq!(zone.lookup("db.dns.podman"), Lookup::NoSuchName);
        assert_eq!(zone.lookup("db"), Lookup::NotOurs);
        assert_eq!(zone.lookup("example.com"), Lookup::NotOurs);
        // Ends with the domain's text without being under it.
        assert_eq!(zone.lookup("xdns.podman"), Lookup::NotOurs);
        assert_eq!(zone.lookup("a.xdns.podman"), Lookup::NotOurs);
        assert_eq!(zone.pointer("fd00::2".parse().unwrap()), Some("web.dns.podman"));
    }

    #[test]
    fn a_name_shared_by_two_attachments_has_both_addresses() {
        let mut zone = NetworkZone::new("n", "d.test", vec![], vec![]);
        zone.add(&host("c1", "a", &["shared"], &["10.0.0.2"])).unwrap();
        zone.add(&host("c2", "b", &["shared"], &["10.0.0.3"])).unwrap();
        assert_eq!(zone.lookup("shared.d.test"), Lookup::Found(&ips(&["10.0.0.2", "10.0.0.3"])));
        assert_eq!(zone.pointer("10.0.0.3".parse().unwrap()), Some("b.d.test"));
    }

    #[test]
    fn only_the_networks_subnets_on_its_bridge_are_answered() {
        let mut zone = NetworkZone::new("n", "d.test", vec![], vec![]);
        let (v4, v6): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "fd00::7".parse().unwrap());
        // A record without subnets or bridge: nobody.
        assert_eq!(zone.admits(v4, 0), Err(Refusal::Source));
        zone.subnets = vec!["10.0.0.0/24".parse().unwrap(), "fd00::/64".parse().unwrap()];
        assert_eq!(zone.admits(v4, 0), Err(Refusal::Interface));
        zone.ifindex = 7;
        assert_eq!(zone.admits(v4, 7), Ok(()));
        assert_eq!(zone.admits(v6, 7), Ok(()));
        assert_eq!(zone.admits(v4, 8), Err(Refusal::Interface));
        assert_eq!(zone.admits("10.0.1.7".parse().unwrap(), 7), Err(Refusal::Source));
        assert_eq!(zone.admits("192.168.1.2".parse().unwrap(), 7), Err(Refusal::Source));
        // The gateway itself: the host, looped back.
        zone.listen = vec!["10.0.0.1".parse().unwrap()];
        assert_eq!(zone.admits("10.0.0.1".parse().unwrap(), 7), Err(Refusal::Source));
    }

    #[test]
    fn records_that_the_plugin_would_refuse_are_not_served() {
        let mut zone = NetworkZone::new("n", "d.test", vec![], vec![]);
        assert!(zone.add(&host("c1", "bad name", &[], &["10.0.0.2"])).is_err());
        assert!(zone.add(&host("c1", "ok", &["a\nb"], &["10.0.0.2"])).is_err());
        let many: Vec<String> = (0..=MAX_ALIASES).map(|i| format!("a{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(zone.add(&host("c1", "ok", &many, &["10.0.0.2"])).is_err());
        assert_eq!(zone.name_count(), 0);
    }
}
