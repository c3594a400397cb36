//! The agent's command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cni_cli::clap::{self, Parser};
use cni_etcd::TlsFiles;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::{Error, Result};

/// The agent's flags as given; [`Config::from_args`] fills in the defaults that depend on
/// other flags and checks them together.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "cni-overlay-agent",
    version,
    // A flag given twice takes its last value, as before clap (wrappers append overrides).
    args_override_self = true,
    about = "The overlay's node agent: leases this node's pod subnet in etcd and keeps the \
             routes, neighbours and tunnel entries to every other node's subnet in step"
)]
pub struct Args {
    /// etcd members, comma-separated
    #[arg(long, value_name = "URL[,URL...]", required = true)]
    pub etcd_endpoints: String,
    /// The underlay interface the node's peers reach it on
    #[arg(long, value_name = "UNDERLAY_IF", required = true)]
    pub iface: String,
    /// This node's name [default: the host name]
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// The cluster's pod network
    #[arg(long, value_name = "CIDR", default_value = "10.244.0.0/16")]
    pub network: Ipv4Net,
    /// Prefix length of each node's subnet
    #[arg(long, value_name = "N", default_value_t = 24)]
    pub subnet_len: u8,
    /// The cluster's IPv6 pod network [default: none: IPv4 only]
    #[arg(long, value_name = "CIDR")]
    pub network6: Option<Ipv6Net>,
    /// Prefix length of each node's IPv6 subnet
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub subnet_len6: u8,
    /// How peers' subnets are reached
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Backend::Vxlan)]
    pub backend: Backend,
    /// etcd key prefix
    #[arg(long, value_name = "KEY", default_value = "/cni-rs/overlay")]
    pub prefix: String,
    /// Lease TTL of the node's subnet record, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub ttl: i64,
    /// VXLAN network identifier
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub vni: u32,
    /// VXLAN UDP port, or WireGuard's listen port [default: 4789; 51820 with --backend
    /// wireguard]
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The overlay device [default: cni-vx0; cni-wg0 with --backend wireguard]
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// The node's WireGuard private key, made on first start (delete it to rotate)
    #[arg(long, value_name = "PATH", default_value = "/var/lib/cni-rs/overlay/wireguard.key")]
    pub wg_key_file: PathBuf,
    /// Where the leased subnet is written
    #[arg(long, value_name = "PATH", default_value = "/run/cni-rs/overlay/subnet.env")]
    pub subnet_file: PathBuf,
    /// Also write a bridge + host-local conflist using the subnet there
    #[arg(long, value_name = "PATH")]
    pub conflist: Option<PathBuf>,
    /// Bridge named in that conflist
    #[arg(long, value_name = "NAME", default_value = "cni0")]
    pub bridge: String,
    /// Program the network of this namespace instead of the agent's own (etcd is still
    /// reached from the agent's namespace)
    #[arg(long, value_name = "PATH")]
    pub netns: Option<PathBuf>,
    /// Revoke the lease on SIGTERM (peers drop this node at once)
    #[arg(long)]
    pub revoke_on_exit: bool,
    /// The etcd cluster's CA (PEM): endpoints are then https://
    #[arg(long, value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for members requiring one, with --key-file
    #[arg(long, value_name = "PATH")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM)
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Serve /healthz and /metrics there [default: off]
    #[arg(long, value_name = "IP:PORT", value_parser = cni_metrics::parse_address)]
    pub metrics_address: Option<SocketAddr>,
    #[command(flatten)]
    pub log: cni_cli::LogArgs,
}

/// How the agent reaches its peers' pod subnets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Every peer over the VXLAN device.
    Vxlan,
    /// Every peer by a plain route via its underlay address, no encapsulation (flannel's
    /// host-gw): the peers must share the underlay's L2, a record whose underlay is not
    /// on-link is refused.
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

impl Config {
    /// Parses the flags (without the program name), as the agent does.
    pub fn parse(args: &[String]) -> Result<Config> {
        let program = std::iter::once("cni-overlay-agent".to_string());
        let args = Args::try_parse_from(program.chain(args.iter().cloned()))
            .map_err(|e| Error::Config(e.to_string().trim_end().to_string()))?;
        Config::from_args(args)
    }

    /// The configuration the flags ask for, with the defaults that depend on other flags
    /// (the port and device follow `--backend`), checked together.
    pub fn from_args(args: Args) -> Result<Config> {
        let port = args.port.unwrap_or(args.backend.default_port());
        let device = args.device.unwrap_or_else(|| args.backend.default_device().into());
        let config = Config {
            endpoints: args.etcd_endpoints.split(',').map(str::to_string).collect(),
            node: args.node.unwrap_or_else(host_name),
            iface: args.iface,
            network: args.network,
            subnet_len: args.subnet_len,
            network6: args.network6,
            subnet_len6: args.subnet_len6,
            backend: args.backend,
            prefix: args.prefix.trim_end_matches('/').into(),
            ttl: args.ttl,
            vni: args.vni,
            port,
            device,
            wg_key_file: args.wg_key_file,
            subnet_file: args.subnet_file,
            conflist: args.conflist,
            bridge: args.bridge,
            revoke_on_exit: args.revoke_on_exit,
            netns: args.netns,
            tls: tls_files(args.ca_file, args.cert_file, args.key_file)?,
            metrics_address: args.metrics_address,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        if self.endpoints.iter().all(String::is_empty) {
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

    /// docs/plugins/cni-overlay-agent.md documents exactly the agent's flags.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        cni_testkit::docs::assert_page_documents_exactly_the_flags(
            env!("CARGO_MANIFEST_DIR"),
            "cni-overlay-agent.md",
            &<Args as clap::CommandFactory>::command(),
            "--",
        );
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
        // A flag given twice takes its last value (the tests' harness appends overrides).
        let c = parse(&["--device", "first", "--device", "wg9"]);
        assert_eq!(c.device, "wg9");
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
