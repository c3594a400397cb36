//! W7: bandwidth shaping as achieved: one container attached with bridge + host-local +
//! bandwidth (both directions limited to the same rate), then a bulk TCP transfer towards
//! the container (ingress) and one from it (egress). The rate achieved is the transfer's
//! bytes over the time from before connect to the last byte read, against the configured
//! one: just under 1 (TCP/IP headers ride in the same budget) is shaping as configured.

use super::chain::{load_list, runtime_conf};
use super::{BenchContext, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::{BenchHost, OwnedNetns};
use crate::stats::median;
use libcni::CniConfig;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The configured rate, bits/s, both ways.
pub const RATE: u64 = 10_000_000;
/// The bucket, bits: small against the transfers, so the rate dominates.
const BURST: u64 = 100_000;
const PORT: u16 = 7300;
/// The gateway host-local gives the bridge (.1 of [`configs::SUBNET`]).
const GATEWAY: &str = "10.88.0.1";

pub struct Shaping;

impl Shaping {
    /// Bytes per transfer: 2.5 MB take 2 s at 10 Mbit/s, 1 MB for smoke runs.
    fn bytes(ctx: &BenchContext) -> usize {
        if ctx.smoke {
            1_000_000
        } else {
            2_500_000
        }
    }
}

impl Workload for Shaping {
    fn id(&self) -> WorkloadId {
        WorkloadId::W7
    }

    fn title(&self) -> String {
        format!("bandwidth at {} Mbit/s both ways: rate achieved by a bulk TCP transfer", RATE / 1_000_000)
    }

    fn needs(&self) -> Vec<&'static str> {
        configs::SHAPED_PLUGINS.to_vec()
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let host = BenchHost::create(ctx.state_root())?;
        let list = load_list(&configs::shaped_list(host.data_dir(), RATE, BURST))?;
        let cni = CniConfig::new([set.dir.clone()]).with_cache_dir(host.cache_dir.path());
        let container = ctx.pool.get(0);
        let rt = runtime_conf(0, &container.path_str(), false);
        let added = host
            .netns
            .run(|| cni.add_network_list(&list, &rt))?
            .map_err(|e| BenchError::cni("ADD of the shaped container", e))?;
        let address = added.json["ips"][0]["address"].as_str().unwrap_or_default();
        let ip: IpAddr = address
            .split('/')
            .next()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| BenchError::Check(format!("no container address in {}", added.json)))?;
        let gateway: IpAddr = GATEWAY.parse().expect("a valid address");
        let bytes = Self::bytes(ctx);
        let transfers = || -> Result<(Duration, Duration)> {
            let ingress = transfer(&host.netns, container, SocketAddr::new(ip, PORT), bytes)?;
            let egress = transfer(container, &host.netns, SocketAddr::new(gateway, PORT + 1), bytes)?;
            Ok((ingress, egress))
        };
        let transferred = transfers();
        // DEL also after a failed transfer: the container namespace is reused.
        let deleted = host.netns.run(|| cni.del_network_list(&list, &rt))?;
        let (ingress, egress) = transferred?;
        deleted.map_err(|e| BenchError::cni("DEL of the shaped container", e))?;
        record(out, "ingress", bytes, ingress);
        record(out, "egress", bytes, egress);
        Ok(())
    }
}

/// The transfer's time as an operation, and the rate of the median transfer over the
/// configured one as fact `<direction>_achieved_over_configured`.
fn record(out: &mut SetOutcome, direction: &str, bytes: usize, took: Duration) {
    let name = format!("{direction} transfer of {:.1} MB", bytes as f64 / 1e6);
    out.op(&name).add_phase([took], Duration::ZERO);
    let Some(typical) = out.find(&name).and_then(|o| median(&o.timings.samples)) else {
        return;
    };
    let achieved = bytes as f64 * 8.0 / typical.as_secs_f64();
    let ratio = achieved / RATE as f64;
    out.fact(&format!("{direction}_achieved_over_configured"), ratio);
    let prefix = format!("{direction}:");
    out.notes.retain(|n| !n.starts_with(&prefix));
    out.note(format!(
        "{prefix} {:.2} Mbit/s achieved for {:.2} configured ({ratio:.2}x)",
        achieved / 1e6,
        RATE as f64 / 1e6
    ));
}

/// Sends `bytes` from `sender` to `addr` in `receiver`: the time from before connect until
/// the last byte was read.
fn transfer(sender: &OwnedNetns, receiver: &OwnedNetns, addr: SocketAddr, bytes: usize) -> Result<Duration> {
    let io = |what: &str| {
        let context = format!("{what} ({addr})");
        move |e| BenchError::io(context, e)
    };
    // Sockets stay in the namespace they were created in.
    let listener = receiver.run(|| TcpListener::bind(addr))?.map_err(io("listen"))?;
    let reader = std::thread::spawn(move || -> std::io::Result<(usize, Instant)> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut total = 0;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok((total, Instant::now())),
                n => total += n,
            }
        }
    });
    let started = Instant::now();
    let sent = sender.run(|| -> std::io::Result<()> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        stream.set_write_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(&vec![0x5a; bytes])?;
        stream.shutdown(Shutdown::Write)
    })?;
    if let Err(e) = sent {
        // Unblocks the reader's accept, so the thread can be joined.
        let _ = receiver.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(1)));
        let _ = reader.join();
        return Err(io("send")(e));
    }
    let (received, ended) = reader
        .join()
        .map_err(|_| BenchError::Check("the receiving thread panicked".into()))?
        .map_err(io("receive"))?;
    if received != bytes {
        return Err(BenchError::Check(format!("{received} of {bytes} bytes arrived at {addr}")));
    }
    Ok(ended - started)
}
