//! `bandwidth` really shapes: a bounded TCP bulk transfer between the host namespace and a
//! container runs at the configured rate (±20%), towards the container (ingress) and from
//! it (egress). Throughput is measured at the receiver, from its first byte to EOF. Needs
//! root.

mod bandwidth_support;
mod common;

use bandwidth_support::*;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use serde_json::json;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Accepts one connection within `deadline` on a non-blocking listener.
fn accept_within(listener: &TcpListener, deadline: Duration) -> io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let started = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && started.elapsed() < deadline => {
                thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sends `bytes` from `sender` to `addr` in `receiver`; returns the goodput in bits/s.
fn transfer(sender: &TestNetns, receiver: &TestNetns, addr: SocketAddr, bytes: usize) -> f64 {
    // Sockets stay in the namespace they were created in.
    let listener = receiver.run(|| TcpListener::bind(addr)).unwrap().unwrap();
    let reader = thread::spawn(move || -> io::Result<f64> {
        let mut stream = accept_within(&listener, Duration::from_secs(10))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut first: Option<(Instant, usize)> = None;
        let mut total = 0usize;
        loop {
            let n = stream.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            first.get_or_insert((Instant::now(), n));
            total += n;
        }
        let (started, first_len) = first.expect("data arrived");
        Ok((total - first_len) as f64 * 8.0 / started.elapsed().as_secs_f64())
    });
    let mut stream =
        sender.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5))).unwrap().unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let payload = vec![0x5au8; bytes];
    stream.write_all(&payload).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let goodput = reader.join().unwrap().unwrap();
    eprintln!("{bytes} bytes to {addr}: {:.2} Mbit/s", goodput / 1e6);
    goodput
}

fn assert_near(measured: f64, rate: f64) {
    let ratio = measured / rate;
    assert!(
        (0.8..=1.2).contains(&ratio),
        "measured {:.2} Mbit/s for a limit of {:.2} Mbit/s",
        measured / 1e6,
        rate / 1e6
    );
}

#[test]
fn ingress_transfer_runs_at_the_configured_rate() {
    const RATE: u64 = 10_000_000;
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr8", "10.160.0.2/24");
    // Unshaped, the same transfer is far faster: the measurement can tell them apart.
    let unshaped = transfer(&env.host, c, "10.160.0.2:7101".parse().unwrap(), 3_000_000);
    assert!(unshaped > 3.0 * RATE as f64, "unshaped {unshaped}");

    common::add(
        "bandwidth",
        &env.host,
        c,
        &conf("1.0.0", json!({"ingressRate": RATE, "ingressBurst": 100_000}), Some(&prev)),
    );
    let shaped = transfer(&env.host, c, "10.160.0.2:7102".parse().unwrap(), 3_000_000);
    assert_near(shaped, RATE as f64);
    // The other direction is not limited.
    let reverse = transfer(c, &env.host, "10.160.0.1:7103".parse().unwrap(), 3_000_000);
    assert!(reverse > 3.0 * RATE as f64, "egress {reverse}");
}

#[test]
fn egress_transfer_runs_at_the_configured_rate() {
    const RATE: u64 = 16_000_000;
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let prev = attach("1.0.0", &env.host, c, "cnhbr9", "10.161.0.2/24");
    let limits = json!({"egressRate": RATE, "egressBurst": 160_000});
    let bw_conf = conf("1.0.0", limits, Some(&prev));
    common::add("bandwidth", &env.host, c, &bw_conf);
    let shaped = transfer(c, &env.host, "10.161.0.1:7201".parse().unwrap(), 4_000_000);
    assert_near(shaped, RATE as f64);

    // After DEL the container sends at full speed again.
    common::ok(del(&env.host, c, &bw_conf));
    let unshaped = transfer(c, &env.host, "10.161.0.1:7202".parse().unwrap(), 4_000_000);
    assert!(unshaped > 3.0 * RATE as f64, "after DEL {unshaped}");
}
