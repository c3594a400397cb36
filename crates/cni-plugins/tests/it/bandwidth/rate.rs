//! `bandwidth` really shapes: a bulk TCP transfer between the host namespace and a
//! container cannot beat the configured rate, towards the container (ingress) and from it
//! (egress). The kernel's token bucket lets at most `burst + rate * t` bits through in any
//! time `t`, so the bound is checked over a window that starts before the first byte is
//! sent and ends when the last one arrived: a loaded machine can only make the transfer
//! slower, never faster, so this cannot fail by chance. Unshaped, a veth moves gigabits
//! per second, far above the bound. What exactly is configured (qdiscs, IFB, filters, and
//! nothing left after DEL) is checked in `bandwidth.rs`; how close the achieved rate comes
//! to the configured one is measured by cni-bench (W7). Needs root.

use super::support;
use crate::common;

use cni_testkit::ns::{HostAndContainers, TestNetns};
use serde_json::json;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};
use support::*;

/// How far above the configured rate a transfer may appear to run: the burst and one
/// packet of slack are a few percent of these transfers; this is generous on top.
const ALLOWANCE: f64 = 1.25;

/// Sends `bytes` from `sender` to `addr` in `receiver`; returns the rate in bits/s over
/// the window from before the connection was made until the last byte was read.
fn transfer(sender: &TestNetns, receiver: &TestNetns, addr: SocketAddr, bytes: usize) -> f64 {
    // Sockets stay in the namespace they were created in.
    let listener = receiver.run(|| TcpListener::bind(addr)).unwrap().unwrap();
    let reader = thread::spawn(move || -> io::Result<(usize, Instant)> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        loop {
            let n = stream.read(&mut buffer)?;
            if n == 0 {
                return Ok((total, Instant::now()));
            }
            total += n;
        }
    });
    let started = Instant::now();
    let mut stream =
        sender.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(10))).unwrap().unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    stream.write_all(&vec![0x5au8; bytes]).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let (received, ended) = reader.join().unwrap().unwrap();
    assert_eq!(received, bytes, "bytes lost");
    let rate = bytes as f64 * 8.0 / (ended - started).as_secs_f64();
    eprintln!("{bytes} bytes to {addr}: {:.2} Mbit/s", rate / 1e6);
    rate
}

fn assert_shaped(measured: f64, rate: u64) {
    assert!(
        measured <= ALLOWANCE * rate as f64,
        "{:.2} Mbit/s through a limit of {:.2} Mbit/s: not shaped",
        measured / 1e6,
        rate as f64 / 1e6
    );
}

#[test]
fn ingress_transfer_cannot_beat_the_configured_rate() {
    const RATE: u64 = 10_000_000;
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr8", "10.160.0.2/24");
    common::add(
        "bandwidth",
        &env.host,
        c,
        &conf("1.0.0", json!({"ingressRate": RATE, "ingressBurst": 100_000}), Some(&prev)),
    );
    let shaped = transfer(&env.host, c, "10.160.0.2:7102".parse().unwrap(), 2_000_000);
    assert_shaped(shaped, RATE);
}

#[test]
fn egress_transfer_cannot_beat_the_configured_rate() {
    const RATE: u64 = 16_000_000;
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr9", "10.161.0.2/24");
    let limits = json!({"egressRate": RATE, "egressBurst": 160_000});
    common::add("bandwidth", &env.host, c, &conf("1.0.0", limits, Some(&prev)));
    let shaped = transfer(c, &env.host, "10.161.0.1:7201".parse().unwrap(), 3_000_000);
    assert_shaped(shaped, RATE);
}
