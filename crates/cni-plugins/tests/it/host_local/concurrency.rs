//! Concurrent allocation never hands out an address twice: several threads (each with its
//! own lock descriptor, so flock() really arbitrates between them) racing with Go
//! host-local processes on the same data directory.

use super::support;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::net::IpAddr;
use std::thread;

use cni_plugins::ipam::host_local::{self, HostLocalConf};
use support::{go_result_ips, net_conf_json, run_go};

const THREADS: usize = 6;
const PER_THREAD: usize = 20;
const GO_PROCESSES: usize = 3;
const PER_GO_PROCESS: usize = 8;

#[test]
fn threads_and_go_processes_never_share_an_address() {
    let tmp = tempfile::tempdir().unwrap();
    let json = net_conf_json("race", tmp.path(), r#""subnet":"10.44.0.0/24""#);
    let conf = HostLocalConf::parse(json.as_bytes(), None).unwrap();

    let results: Vec<(String, IpAddr)> = thread::scope(|scope| {
        let mut handles = Vec::new();
        for t in 0..THREADS {
            let conf = &conf;
            handles.push(scope.spawn(move || {
                (0..PER_THREAD)
                    .map(|i| {
                        let id = format!("rs-{t}-{i}");
                        let got = host_local::allocate(conf, &id, "eth0").unwrap();
                        // Churn: release every third one again to exercise DEL under load.
                        if i % 3 == 0 {
                            assert_eq!(
                                host_local::release(conf, &id, "eth0", &[]).unwrap().released.len(),
                                1
                            );
                            None
                        } else {
                            Some((id, got[0].address.addr()))
                        }
                    })
                    .collect::<Vec<_>>()
            }));
        }
        for p in 0..GO_PROCESSES {
            let json = &json;
            handles.push(scope.spawn(move || {
                (0..PER_GO_PROCESS)
                    .map(|i| {
                        let id = format!("go-{p}-{i}");
                        let (ok, out) = run_go("ADD", json, &id, "eth0", None);
                        assert!(ok, "{out}");
                        Some((id, go_result_ips(&out)[0]))
                    })
                    .collect::<Vec<_>>()
            }));
        }
        handles.into_iter().flat_map(|h| h.join().unwrap()).flatten().collect()
    });

    let mut seen = HashSet::new();
    for (id, ip) in &results {
        assert!(seen.insert(*ip), "{ip} handed out twice (second time to {id})");
    }
    // The directory agrees: exactly the live attachments, each file naming its holder.
    let dir = tmp.path().join("race");
    let mut on_disk: HashMap<IpAddr, String> = HashMap::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if let Ok(ip) = entry.file_name().to_str().unwrap().parse::<IpAddr>() {
            on_disk.insert(ip, fs::read_to_string(entry.path()).unwrap());
        }
    }
    assert_eq!(on_disk.len(), results.len());
    for (id, ip) in &results {
        assert_eq!(on_disk[ip], format!("{id}\r\neth0"));
    }
    let expected = THREADS * (PER_THREAD - PER_THREAD.div_ceil(3)) + GO_PROCESSES * PER_GO_PROCESS;
    assert_eq!(results.len(), expected);
}

const CHILD_ENV: &str = "HOST_LOCAL_RACE_CHILD";
const CHILDREN: usize = 4;
const PER_CHILD: usize = 15;

/// Several processes of ours race on one directory: this test re-runs itself as the
/// children (selected by an environment variable) and checks their combined allocations.
#[test]
fn processes_of_ours_never_share_an_address() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // Child: "<data dir>|<child number>".
        let (data_dir, child) = spec.split_once('|').unwrap();
        let json = net_conf_json("procrace", std::path::Path::new(data_dir), r#""subnet":"10.45.0.0/24""#);
        let conf = HostLocalConf::parse(json.as_bytes(), None).unwrap();
        for i in 0..PER_CHILD {
            let id = format!("proc-{child}-{i}");
            let got = host_local::allocate(&conf, &id, "eth0").unwrap();
            println!("ALLOC {id} {}", got[0].address.addr());
        }
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..CHILDREN)
        .map(|k| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "host_local::concurrency::processes_of_ours_never_share_an_address",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{}|{k}", tmp.path().display()))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut seen: HashMap<IpAddr, String> = HashMap::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stdout));
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            // libtest may print "test <name> ... " on the same line before ours.
            let Some(rest) = line.find("ALLOC ").map(|at| &line[at + "ALLOC ".len()..]) else { continue };
            let (id, ip) = rest.split_once(' ').unwrap();
            if let Some(other) = seen.insert(ip.parse().unwrap(), id.to_string()) {
                panic!("{ip} handed out to {other} and {id}");
            }
        }
    }
    assert_eq!(seen.len(), CHILDREN * PER_CHILD);
    let dir = tmp.path().join("procrace");
    for (ip, id) in &seen {
        assert_eq!(fs::read_to_string(dir.join(ip.to_string())).unwrap(), format!("{id}\r\neth0"));
    }
    // The index stayed right under the race: DEL by ID alone finds every address.
    let json = net_conf_json("procrace", tmp.path(), r#""subnet":"10.45.0.0/24""#);
    let conf = HostLocalConf::parse(json.as_bytes(), None).unwrap();
    for (ip, id) in &seen {
        assert_eq!(host_local::release(&conf, id, "eth0", &[]).unwrap().released, vec![*ip]);
    }
}
