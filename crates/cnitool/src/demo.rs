//! `cnitool demo`: attach a throwaway namespace to a network, prove it works, detach.
//!
//! Both sides are throwaway: the "host" side of the network is a namespace of its own, so
//! the bridge, the veth host ends and the nftables rules live there and the machine's own
//! network is never touched — when the demo ends both namespaces are gone and the host is
//! exactly as it was. Plugins come from CNI_PATH, or else from the `cni-plugins` binary
//! next to cnitool (installed into a temp dir for the run), or else /opt/cni/bin.

use crate::commands::{container_id, print_json, Context, Failure};
use cni_net::netns::{OwnedNamedNs, DEFAULT_NETNS_DIR};
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The host port the demo maps to the container's port 80.
const DEMO_HOST_PORT: u16 = 18080;

/// podman's default chain, on a subnet of its own.
fn default_network(data_dir: &Path) -> Result<NetworkConfigList, Failure> {
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "cni-rs-demo",
        "plugins": [
            {"type": "bridge", "bridge": "cnidemo0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": "10.231.0.0/24", "gateway": "10.231.0.1"}]],
                      "dataDir": data_dir}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"},
            {"type": "tuning"}
        ]
    });
    NetworkConfigList::from_bytes(conf.to_string().as_bytes()).map_err(Failure::from)
}

/// A named namespace with its loopback up, removed when dropped (also when the demo fails).
struct ThrowawayNs {
    owned: OwnedNamedNs,
}

impl ThrowawayNs {
    fn create(role: &str) -> Result<ThrowawayNs, Failure> {
        let name = format!("cnidemo-{role}-{}", std::process::id());
        let owned = OwnedNamedNs::create(DEFAULT_NETNS_DIR, &name)
            .map_err(|e| Failure(format!("create namespace {name}: {e}")))?;
        owned.bring_loopback_up().map_err(|e| Failure(e.to_string()))?;
        Ok(ThrowawayNs { owned })
    }

    fn path(&self) -> String {
        self.owned.path().display().to_string()
    }

    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, Failure> {
        let name = self.owned.name();
        self.owned.netns().run(f).map_err(|e| Failure(format!("enter namespace {name}: {e}")))
    }
}

/// Where the plugins come from, and the temp dir holding them when we installed them.
fn plugin_config(ctx: &Context, scratch: &Path) -> Result<CniConfig, Failure> {
    if !ctx.cni.plugin_dirs().is_empty() {
        return Ok(ctx.cni.clone());
    }
    let multi_call = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.join("cni-plugins")));
    let dir = match multi_call.filter(|p| p.exists()) {
        Some(binary) => {
            let dir = scratch.join("bin");
            let out = std::process::Command::new(&binary)
                .arg("install")
                .arg(&dir)
                .output()
                .map_err(|e| Failure(format!("run {}: {e}", binary.display())))?;
            if !out.status.success() {
                return Err(Failure(format!(
                    "installing the plugins failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            dir
        }
        None => PathBuf::from("/opt/cni/bin"),
    };
    Ok(CniConfig::new([dir]).with_timeout(ctx.cni.timeout()))
}

/// One TCP round trip from `client_ns` to `addr` served in `server_ns`.
fn tcp_round_trip(
    server_ns: &ThrowawayNs,
    client_ns: &ThrowawayNs,
    listen: SocketAddr,
    dial: SocketAddr,
) -> Result<Duration, Failure> {
    let listener = server_ns
        .run(|| TcpListener::bind(listen))?
        .map_err(|e| Failure(format!("listen on {listen}: {e}")))?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf)?;
        stream.write_all(&buf)
    });
    let started = Instant::now();
    let echoed = client_ns.run(|| -> std::io::Result<[u8; 5]> {
        let mut stream = TcpStream::connect_timeout(&dial, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"hello")?;
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf)?;
        Ok(buf)
    })?;
    let elapsed = started.elapsed();
    let served = server.join().map_err(|_| Failure("echo server panicked".into()))?;
    match (echoed, served) {
        (Ok(b), Ok(())) if &b == b"hello" => Ok(elapsed),
        (Err(e), _) | (_, Err(e)) => Err(Failure(format!("TCP to {dial}: {e}"))),
        _ => Err(Failure(format!("TCP to {dial}: wrong echo"))),
    }
}

/// What the demo proves once attached.
fn prove_connectivity(
    result: &cni_types::CniResult,
    host: &ThrowawayNs,
    ctr: &ThrowawayNs,
    has_portmap: bool,
) -> Result<(), Failure> {
    let ip = result.ips.first().ok_or_else(|| Failure("the result has no IP address".into()))?;
    let gateway = ip.gateway.ok_or_else(|| Failure("the result has no gateway".into()))?;
    let took = tcp_round_trip(host, ctr, SocketAddr::new(gateway, 7777), SocketAddr::new(gateway, 7777))?;
    println!(
        "connectivity: container {} -> host side of the bridge {gateway}:7777 ... ok ({took:.1?})",
        ip.address.addr()
    );
    if has_portmap {
        let any: IpAddr =
            if gateway.is_ipv4() { "0.0.0.0".parse().expect("valid") } else { "::".parse().expect("valid") };
        let loopback: IpAddr = if gateway.is_ipv4() {
            "127.0.0.1".parse().expect("valid")
        } else {
            "::1".parse().expect("valid")
        };
        let took =
            tcp_round_trip(ctr, host, SocketAddr::new(any, 80), SocketAddr::new(loopback, DEMO_HOST_PORT))?;
        println!("port mapping: host {loopback}:{DEMO_HOST_PORT} -> container :80 ... ok ({took:.1?})");
    }
    Ok(())
}

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    cni_os::is_root()
}

pub fn demo(ctx: &Context, network: Option<&str>) -> Result<(), Failure> {
    if !is_root() {
        return Err(Failure("the demo creates network namespaces: run it as root".into()));
    }
    let scratch =
        tempfile::Builder::new().prefix("cnitool-demo").tempdir().map_err(|e| Failure(e.to_string()))?;
    let cni = plugin_config(ctx, scratch.path())?.with_cache_dir(scratch.path().join("cache"));
    let list = match network {
        Some(name) => libcni::load_network(&ctx.netconf_dir, name)?,
        None => default_network(&scratch.path().join("ipam"))?,
    };
    let host = ThrowawayNs::create("host")?;
    let ctr = ThrowawayNs::create("ctr")?;
    let has_portmap = (0..list.plugins().len()).any(|i| list.plugin_type(i) == "portmap");
    let mut rt = RuntimeConf::new(container_id(&ctr.path()), ctr.path(), &ctx.ifname);
    if has_portmap {
        rt = rt.with_capability(
            "portMappings",
            json!([{"hostPort": DEMO_HOST_PORT, "containerPort": 80, "protocol": "tcp"}]),
        );
    }
    println!(
        "attaching namespace {} to network {:?} (plugins from {}; host side in namespace {})",
        ctr.owned.name(),
        list.name(),
        cni.plugin_dirs().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":"),
        host.owned.name()
    );
    let started = Instant::now();
    let result = host.run(|| cni.add_network_list(&list, &rt))??;
    println!("ADD took {:.1?}; result:", started.elapsed());
    print_json(&result.json);

    let proven =
        result.parse().map_err(Failure::from).and_then(|r| prove_connectivity(&r, &host, &ctr, has_portmap));
    let checked = if list.version.supports_check() {
        host.run(|| cni.check_network_list(&list, &rt))?
            .map_err(Failure::from)
            .map(|_| println!("CHECK ... ok"))
    } else {
        Ok(())
    };
    let started = Instant::now();
    let deleted = host.run(|| cni.del_network_list(&list, &rt))?.map_err(Failure::from);
    if deleted.is_ok() {
        println!(
            "DEL took {:.1?}; removing namespaces {} and {}",
            started.elapsed(),
            ctr.owned.name(),
            host.owned.name()
        );
    }
    proven.and(checked).and(deleted)
}
