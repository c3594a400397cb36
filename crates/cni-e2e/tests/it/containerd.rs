//! containerd's `ctr run --cni` on the plugin directory under test (see the crate docs).
//! Needs root, containerd, runc and busybox-static; fails loudly without them.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Instant;

use cni_e2e::containerd::{Containerd, NETWORK, SUBNET};
use cni_e2e::image::IMAGE_NAME;
use cni_e2e::net_text::{single_ipv4, Ipv4Cidr};
use cni_e2e::oracle::host_local_allocations;

#[test]
fn ctr_run_cni_gets_an_address_and_reaches_another_container() {
    let containerd = Containerd::start();
    let subnet = Ipv4Cidr::parse(SUBNET).unwrap();

    // The first container prints its address and stays up until killed; `ctr run --rm`
    // (foreground) tears its network down when the task ends.
    let mut first = containerd
        .ctr_without_timeout()
        .args(["run", "--rm", "--cni", IMAGE_NAME, "cne-first", "sh", "-c"])
        .arg("ip -o -4 addr show eth0; exec sleep 600")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ctr run");
    let mut line = String::new();
    BufReader::new(first.stdout.take().expect("piped")).read_line(&mut line).expect("read ctr output");
    if line.is_empty() {
        let _ = first.kill();
        let output = first.wait_with_output().expect("wait for ctr");
        panic!(
            "ctr run --cni [{}] printed no address: {}\ncontainerd log:\n{}",
            containerd.plugins_label(),
            String::from_utf8_lossy(&output.stderr),
            containerd.log()
        );
    }
    let first_addr = single_ipv4(&line);
    assert!(subnet.contains(first_addr.addr), "first container got {first_addr:?}, outside {SUBNET}");
    let data_dir = containerd.host_local_data_dir();
    assert!(host_local_allocations(&data_dir, NETWORK).contains(&first_addr.addr.to_string()));

    let started = Instant::now();
    let script = format!("ip -o -4 addr show eth0; ping -c 1 -W 3 {}", first_addr.addr);
    let out = containerd.ok(&["run", "--rm", "--cni", IMAGE_NAME, "cne-second", "sh", "-c", &script]);
    eprintln!(
        "cni-e2e [{}]: ctr run --rm --cni (with a ping) took {:?}",
        containerd.plugins_label(),
        started.elapsed()
    );
    let second_addr = single_ipv4(out.lines().next().unwrap_or_default());
    assert!(subnet.contains(second_addr.addr), "second container got {second_addr:?}, outside {SUBNET}");
    assert_ne!(first_addr.addr, second_addr.addr);
    assert!(out.contains("1 packets received"), "ping from the second container failed:\n{out}");

    containerd.ok(&["task", "kill", "--signal", "SIGKILL", "cne-first"]);
    let status = first.wait().expect("wait for ctr run");
    assert!(!status.success(), "the killed container's ctr run reported success");
    let left = host_local_allocations(&data_dir, NETWORK);
    assert!(left.is_empty(), "addresses still allocated after both containers ended: {left:?}");
}
