//! host-local with many addresses held, written by someone else (the Go plugin's layout):
//! the first operation indexes them, allocation hands out the next free address and none
//! of those held, release by container ID finds what it allocated and leaves the others,
//! and a reservation the Go plugin adds later is seen. Whether the cost stays flat in the
//! number of held addresses is measured by cni-bench (W4).

use super::support;

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use cni_plugins::ipam::host_local::{self, HostLocalError};
use support::{conf, ip, ip_files};

const HELD: u32 = 5_000;

fn nth_address(n: u32) -> IpAddr {
    // 10.60.0.2 onwards.
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 60, 0, 2)) + n))
}

/// Fills the network directory with `held` reservations the way a busy node has them.
fn populate(dir: &Path, held: u32) {
    fs::create_dir_all(dir).unwrap();
    for n in 0..held {
        fs::write(dir.join(nth_address(n).to_string()), format!("held-{n}\r\neth0")).unwrap();
    }
    fs::write(dir.join("last_reserved_ip.0"), nth_address(held - 1).to_string()).unwrap();
}

#[test]
fn five_thousand_foreign_reservations_are_indexed_and_respected() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("held", tmp.path(), r#""subnet":"10.60.0.0/16""#);
    let dir = tmp.path().join("held");
    populate(&dir, HELD);

    // Allocation continues after the last reserved address.
    let mut ours = Vec::new();
    for round in 0..20u32 {
        let got = host_local::allocate(&c, &format!("probe-{round}"), "eth0").unwrap();
        assert_eq!(got.len(), 1);
        let address = got[0].address.addr();
        assert_eq!(address, nth_address(HELD + round), "round {round}");
        ours.push(address);
    }
    // A held container is known by ID: it cannot allocate twice, and releases its own.
    let err = host_local::allocate(&c, "held-7", "eth0").unwrap_err();
    assert!(matches!(err, HostLocalError::AlreadyAllocated { .. }), "{err}");
    assert_eq!(host_local::release(&c, "held-7", "eth0", &[]).unwrap().released, vec![nth_address(7)]);

    // Release by ID only (no prevResult) finds each of ours.
    for (round, address) in ours.iter().enumerate().filter(|(round, _)| round % 2 == 0) {
        assert_eq!(
            host_local::release(&c, &format!("probe-{round}"), "eth0", &[]).unwrap().released,
            vec![*address]
        );
    }
    let files = ip_files(&dir);
    assert_eq!(files.len(), HELD as usize - 1 + ours.len() / 2);
    assert!(!files.contains(&nth_address(7)) && files.contains(&nth_address(8)));

    // One reservation by the Go plugin, as it writes it: the next operation sees it.
    fs::write(dir.join("10.60.250.1"), "go-made\r\neth0").unwrap();
    fs::write(dir.join("last_reserved_ip.0"), "10.60.250.1").unwrap();
    let next = host_local::allocate(&c, "after-go", "eth0").unwrap();
    assert_eq!(next[0].address.addr(), ip("10.60.250.2"));
    let err = host_local::allocate(&c, "go-made", "eth0").unwrap_err();
    assert!(matches!(err, HostLocalError::AlreadyAllocated { .. }), "go-made not indexed: {err}");
}
