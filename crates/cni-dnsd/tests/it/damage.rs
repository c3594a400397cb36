//! Damaged state and kill -9 for the dnsname plugin and its resolver: record files that are
//! garbage, oversized or symbolic links are skipped (the rest is served) and a DEL still
//! clears them; a plugin killed at any moment of its ADD leaves nothing a DEL cannot
//! remove. Needs root.

use crate::support::{Container, Host, Network};
use cni_testkit::kill::{sweep, SeededRng};
use hickory_proto::op::ResponseCode;
use std::time::{Duration, Instant};

fn host_files(host: &Host, network: &str) -> Vec<String> {
    match std::fs::read_dir(host.state_dir().join("networks").join(network).join("hosts")) {
        Ok(d) => d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn damaged_records_are_skipped_the_rest_is_served_and_del_clears_them() {
    let host = Host::new();
    let net = Network::new("dnsdmg", 9);
    let mut web = Container::new("web");
    let mut db = Container::new("db");
    let mut cache = Container::new("cache");
    net.add(&host, &mut web, &[]).unwrap();
    net.add(&host, &mut db, &[]).unwrap();
    net.add(&host, &mut cache, &[]).unwrap();
    let files = host_files(&host, "dnsdmg");
    let path_of = |ctr: &Container| {
        let name = files.iter().find(|f| f.ends_with(&format!("_{}.json", ctr.id))).unwrap();
        host.state_dir().join("networks/dnsdmg/hosts").join(name)
    };
    // db's record is cut off mid-write; cache's is replaced by a link to a file elsewhere
    // (which holds a valid-looking record that must not be believed).
    std::fs::write(path_of(&db), "{\"containerID\": \"x\", \"na").unwrap();
    let elsewhere = host.dirs.path().join("planted.json");
    std::fs::write(&elsewhere, std::fs::read(path_of(&web)).unwrap()).unwrap();
    std::fs::remove_file(path_of(&cache)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, path_of(&cache)).unwrap();
    // The resolver is killed and comes back through STATUS, reading the damaged tree.
    host.kill_resolver();
    assert!(net.status(&host).success());
    let gw = net.gateway();
    assert_eq!(web.lookup(gw, "web.dns.podman."), Ok(vec![web.address("dnsdmg").to_string()]));
    assert_eq!(web.lookup(gw, "db.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert_eq!(web.lookup(gw, "cache.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    let log = std::fs::read_to_string(host.state_dir().join("dnsd.log")).unwrap();
    assert!(log.contains("damaged record") && log.contains("symbolic link"), "{log}");
    // CHECK says what is wrong.
    let check = net.dnsname_verb(&host, &db, "CHECK");
    assert!(!check.success());
    // DEL clears the damaged files too; the planted target is untouched.
    net.del(&host, &mut db);
    net.del(&host, &mut cache);
    assert!(elsewhere.exists());
    assert_eq!(host_files(&host, "dnsdmg").len(), 1);
    net.del(&host, &mut web);
    assert!(host_files(&host, "dnsdmg").is_empty());
}

#[test]
fn a_plugin_killed_during_add_leaves_nothing_that_del_cannot_remove() {
    let host = Host::new();
    let net = Network::new("dnskill", 10);
    let mut other = Container::new("other");
    net.add(&host, &mut other, &[]).unwrap();
    let ctr = Container::new("victim");
    let prev = net.bridge_add(&host, &ctr);
    // How long one ADD takes, to spread the kill moments over it.
    let start = Instant::now();
    let out = net.dnsname_call(&host, "ADD", &ctr, &prev).run();
    assert!(out.success(), "{out:?}");
    let duration = start.elapsed().max(Duration::from_millis(2));
    assert!(net.dnsname_call(&host, "DEL", &ctr, &prev).run().success());
    let (mut rng, seed) = SeededRng::from_env("DNS_KILL_SEED");
    for after in sweep(&mut rng, duration, 12) {
        let outcome = net.dnsname_call(&host, "ADD", &ctr, &prev).run_killed_after(after);
        let del = net.dnsname_call(&host, "DEL", &ctr, &prev).run();
        assert!(del.success(), "seed {seed}, killed after {after:?}: DEL {del:?}");
        let files = host_files(&host, "dnskill");
        assert_eq!(files.len(), 1, "seed {seed}, killed after {after:?} ({outcome:?}): {files:?}");
        assert_eq!(
            other.lookup(net.gateway(), "victim.dns.podman."),
            Err(ResponseCode::NXDomain.to_string()),
            "seed {seed}, after {after:?}"
        );
    }
    // And the network still works for the survivor and for a fresh ADD.
    assert!(net.dnsname_call(&host, "ADD", &ctr, &prev).run().success());
    assert_eq!(
        other.lookup(net.gateway(), "alias.dns.podman."),
        Ok(vec![prev["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string()])
    );
    assert!(net.dnsname_call(&host, "DEL", &ctr, &prev).run().success());
    net.del(&host, &mut other);
}
