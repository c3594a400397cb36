//! Allocation and release cost must not grow with the number of held addresses (DESIGN.md
//! decision 6). Not a benchmark: it prints the numbers and asserts a loose bound (3x).
//! For contrast it also prints the Go reference's ADD time, which walks the directory.

#[path = "host_local_support/mod.rs"]
mod support;

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use cni_plugins::ipam::host_local::{self, HostLocalConfig};
use support::{net_conf_json, run_go};

const ROUNDS: u32 = 60;

fn nth_address(n: u32) -> IpAddr {
    // 10.60.0.2 onwards.
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 60, 0, 2)) + n))
}

/// Fills the network directory with `held` allocations the way a busy node has them.
fn populate(dir: &Path, held: u32) {
    fs::create_dir_all(dir).unwrap();
    for n in 0..held {
        fs::write(dir.join(nth_address(n).to_string()), format!("held-{n}\r\neth0")).unwrap();
    }
    fs::write(dir.join("last_reserved_ip.0"), nth_address(held - 1).to_string()).unwrap();
    flush_filesystem(dir);
}

/// Writes back the filesystem's dirty data, so that the first fsync of a measured
/// operation does not pay for writing back everything `populate` just created.
fn flush_filesystem(dir: &Path) {
    let handle = fs::File::open(dir).unwrap();
    // SAFETY: syncfs on a descriptor we own for the duration of the call.
    let rc = unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&handle)) };
    assert_eq!(rc, 0, "syncfs: {}", std::io::Error::last_os_error());
}

/// Where to measure: tmpfs by default, so that the numbers show the algorithm's cost
/// rather than the disk's fsync latency (which is constant per operation but noisy on a
/// shared machine); `HOST_LOCAL_TIMING_DIR` picks another filesystem.
fn scratch_dir() -> tempfile::TempDir {
    let base = std::env::var("HOST_LOCAL_TIMING_DIR").unwrap_or_else(|_| {
        if Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir().display().to_string()
        }
    });
    tempfile::tempdir_in(base).unwrap()
}

/// The median: robust against the odd scheduler hiccup on a shared machine.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

struct Timings {
    alloc: Duration,
    release: Duration,
    first_build: Duration,
    catch_up: Duration,
}

/// Median allocate and release-by-ID time with `held` allocations present, plus the
/// one-time cost of indexing a directory written by someone else and of catching up after
/// one foreign (Go) reservation.
fn measure(held: u32) -> Timings {
    let tmp = scratch_dir();
    let json = net_conf_json("timing", tmp.path(), r#""subnet":"10.60.0.0/16""#);
    let conf = HostLocalConfig::parse(json.as_bytes(), None).unwrap();
    populate(&tmp.path().join("timing"), held);
    // The first operation after a foreign writer (here: populate) rebuilds the index once.
    let rebuild_start = Instant::now();
    host_local::allocate(&conf, "warmup", "eth0").unwrap();
    let rebuild = rebuild_start.elapsed();
    flush_filesystem(tmp.path());

    let mut alloc = Vec::new();
    let mut release = Vec::new();
    for round in 0..ROUNDS {
        let id = format!("probe-{round}");
        let start = Instant::now();
        host_local::allocate(&conf, &id, "eth0").unwrap();
        alloc.push(start.elapsed());
        // Release every other one, by ID only (no prevResult): the index must find it.
        if round % 2 == 0 {
            let start = Instant::now();
            assert_eq!(host_local::release(&conf, &id, "eth0", &[]).unwrap().released.len(), 1);
            release.push(start.elapsed());
        }
    }
    // One reservation by the Go plugin, as it writes it; our next operation catches up.
    let dir = tmp.path().join("timing");
    fs::write(dir.join("10.60.250.1"), "go-made\r\neth0").unwrap();
    fs::write(dir.join("last_reserved_ip.0"), "10.60.250.1").unwrap();
    let start = Instant::now();
    host_local::allocate(&conf, "after-go", "eth0").unwrap();
    let catch_up = start.elapsed();
    assert!(host_local::allocate(&conf, "go-made", "eth0").is_err(), "go-made not indexed");
    Timings { alloc: median(alloc), release: median(release), first_build: rebuild, catch_up }
}

fn go_add_time(held: u32) -> Duration {
    let tmp = scratch_dir();
    let json = net_conf_json("gotiming", tmp.path(), r#""subnet":"10.60.0.0/16""#);
    populate(&tmp.path().join("gotiming"), held);
    let start = Instant::now();
    for i in 0..5 {
        assert!(run_go("ADD", &json, &format!("go-{i}"), "eth0", None).0);
    }
    start.elapsed() / 5
}

#[test]
fn allocation_cost_does_not_grow_with_held_addresses() {
    let t10 = measure(10);
    let t2k = measure(2_000);
    let t20k = measure(20_000);
    for (label, pick) in [
        ("allocate", (|t: &Timings| t.alloc) as fn(&Timings) -> Duration),
        ("release by ID", |t| t.release),
        ("first index build of a foreign directory", |t| t.first_build),
        ("next ADD after one Go ADD (catch-up scan)", |t| t.catch_up),
    ] {
        eprintln!(
            "host-local (ours) {label}: 10 held {:?}, 2,000 held {:?}, 20,000 held {:?}",
            pick(&t10),
            pick(&t2k),
            pick(&t20k)
        );
    }
    eprintln!(
        "host-local (Go 1.1.1 process, incl. exec) ADD: 10 held {:?}, 2,000 held {:?}, 20,000 held {:?}",
        go_add_time(10),
        go_add_time(2_000),
        go_add_time(20_000)
    );
    // Loose bound: wall-clock times on a shared machine; a small constant floor absorbs
    // scheduler noise on sub-millisecond numbers.
    let floor = Duration::from_micros(300);
    for t in [&t2k, &t20k] {
        assert!(t.alloc <= t10.alloc * 3 + floor, "allocate grew: {:?} -> {:?}", t10.alloc, t.alloc);
        assert!(t.release <= t10.release * 3 + floor, "release grew: {:?} -> {:?}", t10.release, t.release);
    }
}
