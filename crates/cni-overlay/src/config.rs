//! The agent's command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cni_etcd::TlsFiles;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::{Error, Result};

pub const USAGE: &str = "usage: cni-overlay-agent --etcd-endpoints URL[,URL...] --iface UNDERLAY_IF [options]
  --node NAME            this node's name (default: the host name)
  --network CIDR         the cluster's pod network (default 10.244.0.0/16)
  --subnet-len N         prefix length of each node's subnet (default 24)
  --network6 CIDR        the cluster's IPv6 pod network (default none: IPv4 only)
  --subnet-len6 N        prefix length of each node's IPv6 subnet (default 64)
  --backend MODE         vxlan, direct (routes via the peers' underlay addresses, no
                         encapsulation), auto (direct to peers on-link, VXLAN to the
                         others) or wireguard (every peer over an encrypted WireGuard
                         device) (default vxlan)
  --prefix KEY           etcd key prefix (default /cni-rs/overlay)
  --ttl SECONDS          lease TTL of the node's subnet record (default 10)
  --vni N                VXLAN network identifier (default 1)
  --port N               VXLAN UDP port, or WireGuard's listen port (default 4789;
                         51820 with --backend wireguard)
  --device NAME          the overlay device (default cni-vx0; cni-wg0 with --backend
                         wireguard)
  --wg-key-file PATH     the node's WireGuard private key, made on first start (default
                         /var/lib/cni-rs/overlay/wireguard.key; delete it to rotate)
  --subnet-file PATH     where the leased subnet is written (default /run/cni-rs/overlay/subnet.env)
  --conflist PATH        also write a bridge + host-local conflist using the subnet there
  --bridge NAME          bridge named in that conflist (default cni0)
  --netns PATH           program the network of this namespace instead of the agent's own
                         (etcd is still reached from the agent's namespace)
  --revoke-on-exit       revoke the lease on SIGTERM (peers drop this node at once)
  --ca-file PATH         the etcd cluster's CA (PEM): endpoints are then https://
  --cert-file PATH       client certificate (PEM) for members requiring one, with
  --key-file PATH        its private key (PEM)
  --metrics-address IP:PORT  serve /healthz and /metrics there (off by default)";

/// How the agent reaches its peers' pod subnets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Every peer over the VXLAN device.
    Vxlan,
    /// Every peer by a plain route via its underlay address (flannel's host-gw): the
    /// peers must share the underlay's L2, a record whose underlay is not on-link is
    /// refused.
    Direct,
    /// Direct to the peers whose underlay address is on-link, VXLAN to the others.
    Auto,
    /// Every peer over the node's WireGuard device: pod packets leave the node only
    /// encrypted, as UDP to the peer's WireGuard port.
    Wireguard,
}

impl Backend {
    /// The UDP port the overlay's device listens on when `--port` is not given.
    fn default_port(self) -> u16 {
        match self {
            Backend::Wireguard => 51820,
            _ => 4789,
        }
    }

    /// The overlay device's name when `--device` is not given.
    fn default_device(self) -> &'static str {
        match self {
            Backend::Wireguard => "cni-wg0",
            _ => "cni-vx0",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Vxlan => "vxlan",
            Backend::Direct => "direct",
            Backend::Auto => "auto",
            Backend::Wireguard => "wireguard",
        })
    }
}

impl std::str::FromStr for Backend {
    type Err = Error;

    fn from_str(value: &str) -> Result<Backend> {
        match value {
            "vxlan" => Ok(Backend::Vxlan),
            "direct" => Ok(Backend::Direct),
            "auto" => Ok(Backend::Auto),
            "wireguard" => Ok(Backend::Wireguard),
            _ => Err(Error::Config(format!("--backend: {value:?} is not vxlan, direct, auto or wireguard"))),
        }
    }
}

/// Everything the agent needs to know, from its flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub endpoints: Vec<String>,
    pub node: String,
    pub iface: String,
    pub network: Ipv4Net,
    pub subnet_len: u8,
    /// The IPv6 pod network (dual-stack); each node's IPv6 subnet is the one paired with
    /// its IPv4 subnet (see [`crate::lease::paired_subnet6`]).
    pub network6: Option<Ipv6Net>,
    pub subnet_len6: u8,
    pub backend: Backend,
    pub prefix: String,
    pub ttl: i64,
    pub vni: u32,
    pub port: u16,
    pub device: String,
    /// The node's WireGuard private key (`--backend wireguard`).
    pub wg_key_file: PathBuf,
    pub subnet_file: PathBuf,
    pub conflist: Option<PathBuf>,
    pub bridge: String,
    pub revoke_on_exit: bool,
    /// The namespace whose network the agent programs (None: its own).
    pub netns: Option<PathBuf>,
    /// TLS to etcd (etcd-ipam's `caFile`, `certFile`, `keyFile`), for `https://` endpoints.
    pub tls: Option<TlsFiles>,
    /// Where `/healthz` and `/metrics` are served (None: not at all).
    pub metrics_address: Option<SocketAddr>,
}

/// The TLS flags as etcd-ipam's `caFile`/`certFile`/`keyFile`: the certificate and key go
/// together, and both need the CA.
fn tls_files(
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
) -> Result<Option<TlsFiles>> {
    match (ca_file, cert_file, key_file) {
        (None, None, None) => Ok(None),
        (None, _, _) => {
            Err(Error::Config("--cert-file and --key-file need the cluster's CA (--ca-file)".into()))
        }
        (Some(_), Some(_), None) | (Some(_), None, Some(_)) => {
            Err(Error::Config("--cert-file and --key-file go together: give both or neither".into()))
        }
        (Some(ca_file), cert_file, key_file) => Ok(Some(TlsFiles { ca_file, cert_file, key_file })),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| Error::Config(format!("{flag}: {value:?} is not a valid number")))
}

impl Config {
    /// Parses the flags (without the program name).
    pub fn parse(args: &[String]) -> Result<Config> {
        let mut config = Config {
            endpoints: Vec::new(),
            node: host_name(),
            iface: String::new(),
            network: "10.244.0.0/16".parse().expect("default network"),
            subnet_len: 24,
            network6: None,
            subnet_len6: 64,
            backend: Backend::Vxlan,
            prefix: "/cni-rs/overlay".into(),
            ttl: 10,
            vni: 1,
            port: 0,
            device: String::new(),
            wg_key_file: "/var/lib/cni-rs/overlay/wireguard.key".into(),
            subnet_file: "/run/cni-rs/overlay/subnet.env".into(),
            conflist: None,
            bridge: "cni0".into(),
            revoke_on_exit: false,
            netns: None,
            tls: None,
            metrics_address: None,
        };
        let (mut ca_file, mut cert_file, mut key_file) = (None, None, None);
        let mut port = None;
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            if flag == "--revoke-on-exit" {
                config.revoke_on_exit = true;
                continue;
            }
            let value = rest.next().ok_or_else(|| Error::Config(format!("{flag} needs a value")))?.as_str();
            match flag.as_str() {
                "--etcd-endpoints" => config.endpoints = value.split(',').map(str::to_string).collect(),
                "--node" => config.node = value.into(),
                "--iface" => config.iface = value.into(),
                "--network" => {
                    config.network = value
                        .parse()
                        .map_err(|_| Error::Config(format!("--network: {value:?} is not a CIDR")))?
                }
                "--subnet-len" => config.subnet_len = number(flag, value)?,
                "--network6" => {
                    config.network6 =
                        Some(value.parse().map_err(|_| {
                            Error::Config(format!("--network6: {value:?} is not an IPv6 CIDR"))
                        })?)
                }
                "--subnet-len6" => config.subnet_len6 = number(flag, value)?,
                "--backend" => config.backend = value.parse()?,
                "--prefix" => config.prefix = value.trim_end_matches('/').into(),
                "--ttl" => config.ttl = number(flag, value)?,
                "--vni" => config.vni = number(flag, value)?,
                "--port" => port = Some(number(flag, value)?),
                "--device" => config.device = value.into(),
                "--wg-key-file" => config.wg_key_file = value.into(),
                "--subnet-file" => config.subnet_file = value.into(),
                "--conflist" => config.conflist = Some(value.into()),
                "--bridge" => config.bridge = value.into(),
                "--netns" => config.netns = Some(value.into()),
                "--ca-file" => ca_file = Some(PathBuf::from(value)),
                "--cert-file" => cert_file = Some(PathBuf::from(value)),
                "--key-file" => key_file = Some(PathBuf::from(value)),
                "--metrics-address" => {
                    config.metrics_address = Some(cni_metrics::parse_address(value).map_err(Error::Config)?)
                }
                _ => return Err(Error::Config(format!("unknown flag {flag}"))),
            }
        }
        config.tls = tls_files(ca_file, cert_file, key_file)?;
        config.port = port.unwrap_or(config.backend.default_port());
        if config.device.is_empty() {
            config.device = config.backend.default_device().into();
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::Config("--etcd-endpoints is required".into()));
        }
        for endpoint in &self.endpoints {
            match (endpoint.starts_with("https://"), self.tls.is_some()) {
                (true, false) => {
                    return Err(Error::Config(format!(
                        "--etcd-endpoints {endpoint} is https:// but --ca-file is not set"
                    )))
                }
                (false, true) => {
                    return Err(Error::Config(format!(
                        "--etcd-endpoints {endpoint}: with --ca-file every endpoint must be https://"
                    )))
                }
                _ => {}
            }
        }
        if self.iface.is_empty() {
            return Err(Error::Config("--iface (the underlay interface) is required".into()));
        }
        if self.node.is_empty() {
            return Err(Error::Config("--node is required (no host name found)".into()));
        }
        if self.subnet_len < self.network.prefix_len() || self.subnet_len > 30 {
            return Err(Error::Config(format!(
                "--subnet-len {} must lie between the network's /{} and /30",
                self.subnet_len,
                self.network.prefix_len()
            )));
        }
        if let Some(network6) = self.network6 {
            self.validate_network6(network6)?;
        }
        if self.ttl < 2 {
            return Err(Error::Config(format!("--ttl {} is too short (at least 2 seconds)", self.ttl)));
        }
        if self.port == 0 {
            return Err(Error::Config(
                "--port 0: the overlay needs a fixed port its peers can be told".into(),
            ));
        }
        if self.vni == 0 || self.vni >= 1 << 24 {
            return Err(Error::Config(format!("--vni {} is outside 1..16777215", self.vni)));
        }
        Ok(())
    }

    /// Every IPv4 subnet needs an IPv6 one to pair with, and a host-local range of at
    /// least a few addresses.
    fn validate_network6(&self, network6: Ipv6Net) -> Result<()> {
        if network6 != network6.trunc() {
            return Err(Error::Config(format!("--network6 {network6} has host bits set")));
        }
        if self.subnet_len6 < network6.prefix_len() || self.subnet_len6 > 120 {
            return Err(Error::Config(format!(
                "--subnet-len6 {} must lie between the IPv6 network's /{} and /120",
                self.subnet_len6,
                network6.prefix_len()
            )));
        }
        let bits4 = self.subnet_len - self.network.prefix_len();
        let bits6 = self.subnet_len6 - network6.prefix_len();
        if bits6 < bits4 {
            return Err(Error::Config(format!(
                "--network6 {network6} has 2^{bits6} subnets of /{}, fewer than the 2^{bits4} IPv4 subnets \
                 they pair with",
                self.subnet_len6
            )));
        }
        Ok(())
    }

    /// How often the lease is renewed: three times per TTL, so one lost renewal is harmless.
    pub fn keepalive_interval(&self) -> Duration {
        Duration::from_millis(self.ttl as u64 * 1000 / 3)
    }

    /// The etcd prefix of the subnet records.
    pub fn subnets_prefix(&self) -> String {
        format!("{}/subnets/", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/plugins/cni-overlay-agent.md documents exactly the flags the usage names, and
    /// the parser knows each one.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        use cni_testkit::docs;
        let page = docs::read_page(env!("CARGO_MANIFEST_DIR"), "cni-overlay-agent.md").unwrap();
        let documented = docs::table_keys(&page, "Flags");
        let problems = docs::compare("cni-overlay-agent.md", "flag", &docs::usage_flags(USAGE), &documented);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        for flag in documented {
            if let Err(e) = Config::parse(&args(&[&flag, "1"])) {
                assert!(!e.to_string().contains(&format!("unknown flag {flag}")), "{flag}: {e}");
            }
        }
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_defaults() {
        let c = Config::parse(&args(&[
            "--etcd-endpoints",
            "http://a:1,http://b:2",
            "--iface",
            "eth0",
            "--node",
            "n1",
        ]))
        .unwrap();
        assert_eq!(c.endpoints.len(), 2);
        assert_eq!((c.subnet_len, c.ttl, c.vni, c.port), (24, 10, 1, 4789));
        assert_eq!(c.subnets_prefix(), "/cni-rs/overlay/subnets/");
        assert_eq!((c.backend, c.network6, c.subnet_len6), (Backend::Vxlan, None, 64));
    }

    #[test]
    fn dual_stack_and_backend_flags() {
        let c = Config::parse(&args(&[
            "--etcd-endpoints",
            "http://a:1",
            "--iface",
            "eth0",
            "--node",
            "n1",
            "--network6",
            "fd00:244::/48",
            "--backend",
            "auto",
        ]))
        .unwrap();
        assert_eq!(c.network6, Some("fd00:244::/48".parse().unwrap()));
        assert_eq!(c.backend, Backend::Auto);
    }

    #[test]
    fn the_wireguard_backend_has_its_own_port_and_device() {
        let base = ["--etcd-endpoints", "http://a:1", "--iface", "eth0", "--node", "n1"];
        let parse = |extra: &[&str]| Config::parse(&args(&[&base[..], extra].concat())).unwrap();
        let c = parse(&["--backend", "wireguard"]);
        assert_eq!((c.backend, c.port, c.device.as_str()), (Backend::Wireguard, 51820, "cni-wg0"));
        assert_eq!(c.wg_key_file, PathBuf::from("/var/lib/cni-rs/overlay/wireguard.key"));
        let c =
            parse(&["--backend", "wireguard", "--port", "7000", "--device", "wg7", "--wg-key-file", "/k"]);
        assert_eq!((c.port, c.device.as_str(), c.wg_key_file.to_str()), (7000, "wg7", Some("/k")));
        // The flags' order does not matter.
        let c = parse(&["--port", "7000", "--backend", "wireguard"]);
        assert_eq!((c.port, c.device.as_str()), (7000, "cni-wg0"));
        let c = parse(&[]);
        assert_eq!((c.port, c.device.as_str()), (4789, "cni-vx0"));
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let base = ["--etcd-endpoints", "http://a:1", "--iface", "eth0", "--node", "n"];
        let with = |extra: &[&str]| {
            let mut list = args(&base);
            list.extend(args(extra));
            Config::parse(&list).unwrap_err().to_string()
        };
        assert!(with(&["--subnet-len", "8"]).contains("--subnet-len"));
        assert!(with(&["--ttl", "1"]).contains("--ttl"));
        assert!(with(&["--vni", "0"]).contains("--vni"));
        assert!(with(&["--network", "nope"]).contains("--network"));
        assert!(with(&["--bogus", "1"]).contains("--bogus"));
        assert!(with(&["--backend", "host-gw"]).contains("--backend"));
        assert!(with(&["--port", "0"]).contains("--port 0"));
        assert!(with(&["--port", "65536"]).contains("--port"));
        assert!(with(&["--network6", "10.0.0.0/8"]).contains("--network6"));
        assert!(with(&["--network6", "fd00::1/48"]).contains("host bits"));
        assert!(with(&["--network6", "fd00::/48", "--subnet-len6", "40"]).contains("--subnet-len6"));
        assert!(with(&["--network6", "fd00::/48", "--subnet-len6", "121"]).contains("--subnet-len6"));
        // A /16 of /24s is 256 subnets: a /60 of /64s (16) cannot pair with each.
        assert!(with(&["--network6", "fd00::/60"]).contains("fewer than"));
        // TLS: an http:// endpoint with a CA, a certificate without its key or without a CA.
        assert!(with(&["--ca-file", "/ca"]).contains("must be https://"));
        assert!(with(&["--cert-file", "/c", "--key-file", "/k"]).contains("--ca-file"));
        let https = ["--etcd-endpoints", "https://a:1", "--iface", "eth0", "--node", "n"];
        let err = |extra: &[&str]| {
            let mut list = args(&https);
            list.extend(args(extra));
            Config::parse(&list).unwrap_err().to_string()
        };
        assert!(err(&[]).contains("--ca-file is not set"));
        assert!(err(&["--ca-file", "/ca", "--cert-file", "/c"]).contains("go together"));
        let mut list = args(&https);
        list.extend(args(&["--ca-file", "/ca", "--cert-file", "/c", "--key-file", "/k"]));
        let tls = Config::parse(&list).unwrap().tls.unwrap();
        assert_eq!((tls.ca_file.to_str(), tls.key_file.unwrap().to_str()), (Some("/ca"), Some("/k")));
        assert!(Config::parse(&args(&["--iface", "eth0"]))
            .unwrap_err()
            .to_string()
            .contains("--etcd-endpoints"));
    }
}
