//! Twenty containers attached and detached at the same time, and interface templates.

use std::collections::HashSet;

use crate::common::{
    addresses_of, links_of, lo_and_mynet, mynet_entry, reservations, Bed, ImageFiles, PREFIX,
};
use cni_testkit::ns::TestNetns;
use serde_json::json;

#[test]
fn twenty_containers_concurrently_get_distinct_addresses_and_leak_nothing() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config =
        lo_and_mynet(&images.file_uri("lo-net.aci"), &images.file_uri("mynet.aci"), "kh-br-c", "10.209.30");
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let host_links_before = bed.host_links();
    let containers: Vec<TestNetns> = (0..20).map(|_| TestNetns::with_prefix(PREFIX).unwrap()).collect();

    let addresses: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = containers
            .iter()
            .enumerate()
            .map(|(i, ns)| {
                let host = &host;
                scope.spawn(move || {
                    let record = host.attach(&format!("kh-many-{i}"), ns.path(), None).unwrap();
                    record.networks[1].result["ip4"]["ip"].as_str().unwrap().to_string()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let distinct: HashSet<&String> = addresses.iter().collect();
    assert_eq!(distinct.len(), 20, "distinct addresses: {addresses:?}");
    for (ns, address) in containers.iter().zip(&addresses) {
        assert_eq!(
            addresses_of(ns, "eth0"),
            std::slice::from_ref(address),
            "the kernel has what the metadata says"
        );
    }
    assert_eq!(reservations(&host, "mynet").len(), 20);
    assert_eq!(bed.host_links().len(), host_links_before.len() + 20);

    std::thread::scope(|scope| {
        for i in 0..20 {
            let host = &host;
            scope.spawn(move || host.detach(&format!("kh-many-{i}")).unwrap());
        }
    });
    for ns in &containers {
        assert_eq!(links_of(ns), ["lo"]);
    }
    assert_eq!(bed.host_links(), host_links_before, "every host end is gone");
    assert!(reservations(&host, "mynet").is_empty(), "every address is released");
    assert_eq!(host.status().unwrap()["containers"], json!([]));
}

#[test]
fn interface_templates_skip_taken_names_and_a_collision_runs_nothing() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = json!({ "container_networks": [
        mynet_entry("net-a", &images.file_uri("mynet.aci"), "kh-br-ta", "10.209.31"),
        mynet_entry("net-b", &images.file_uri("mynet.aci"), "kh-br-tb", "10.209.32"),
        { "name": "fixed", "aci": images.file_uri("shell.aci"), "containerInterface": "eth1",
          "bridge": "kh-br-tc", "ipam": { "subnet": "10.209.33.0/24" } },
    ]});
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    // The container already has an eth0 (a veth pair inside it; no dummy module here).
    let status = container
        .command("ip")
        .args(["link", "add", "eth0", "type", "veth", "peer", "name", "khpeer0"])
        .status()
        .unwrap();
    assert!(status.success());

    let both = ["net-a".to_string(), "net-b".to_string()];
    let record = host.attach("kh-tpl", container.path(), Some(&both)).unwrap();
    let names: Vec<_> = record.networks.iter().map(|n| n.interface.clone().unwrap()).collect();
    assert_eq!(names, ["eth1", "eth2"]);
    assert_eq!(addresses_of(&container, "eth1"), [record.networks[0].result["ip4"]["ip"].as_str().unwrap()]);
    host.detach("kh-tpl").unwrap();

    // "eth1" literally, after net-a takes eth1: cannot be satisfied, so no add runs at all.
    let err = host.attach("kh-tpl", container.path(), Some(&["net-a".into(), "fixed".into()])).unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("network \"fixed\": containerInterface \"eth1\" collides"), "{message}");
    let mut links = links_of(&container);
    links.sort();
    assert_eq!(links, ["eth0", "khpeer0", "lo"]);
    assert!(reservations(&host, "net-a").is_empty());
    assert!(host.attached("kh-tpl").unwrap().is_none());
}

#[test]
fn calls_for_one_container_run_one_after_another() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config =
        lo_and_mynet(&images.file_uri("lo-net.aci"), &images.file_uri("mynet.aci"), "kh-br-o", "10.209.34");
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let container = TestNetns::with_prefix(PREFIX).unwrap();

    let results: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> =
            (0..4).map(|_| scope.spawn(|| host.attach("kh-same", container.path(), None))).collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "exactly one attach wins");
    for err in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(err.to_string().contains("is already attached"), "{err}");
    }
    let mut links = links_of(&container);
    links.sort();
    assert_eq!(links, ["eth0", "lo"], "one add per network, not one per caller");
    assert_eq!(reservations(&host, "mynet").len(), 1);

    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| host.detach("kh-same").unwrap());
        }
    });
    assert_eq!(links_of(&container), ["lo"]);
    assert!(reservations(&host, "mynet").is_empty());
}
