//! End to end: netplugin images served from file://, http:// and docker:// (a registry on
//! 127.0.0.1), plugin containers run by runc, a throwaway namespace attached to `lo` +
//! `mynet`, real TCP to the bridge gateway, and a detach that leaves nothing behind.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::servers::{FileServer, Registry};
use crate::common::{addresses_of, links_of, lo_and_mynet, reservations, Bed, ImageFiles, PREFIX};
use cni_testkit::ns::TestNetns;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use kurma_net::PluginStart;

/// Starts the plugins of `config`, attaches a namespace, checks traffic, detaches, checks
/// that nothing is left, stops the plugins.
fn attach_lo_and_mynet(bed: &Bed, config: &serde_json::Value, subnet_base: &str, bridge: &str) {
    let host = bed.host(config);
    let started = host.start_plugins().unwrap();
    assert_eq!(
        started,
        vec![("lo".to_string(), PluginStart::Started), ("mynet".to_string(), PluginStart::Started)]
    );
    for network in ["lo", "mynet"] {
        assert_eq!(host.plugin_status(network).as_deref(), Some("created"), "{network}'s plugin container");
    }
    // setup checked the configuration; the bridge comes with the first add.
    assert!(!links_of(&bed.host_ns).iter().any(|l| l == bridge), "{:?}", links_of(&bed.host_ns));

    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let uuid = "146d7cef-fbf6-41da-a2f8-eba218597f9c";
    let record = host.attach(uuid, container.path(), None).unwrap();
    assert_eq!(record.networks.len(), 2);
    assert_eq!(record.networks[0].network, "lo");
    assert_eq!(record.networks[0].interface, None);
    assert_eq!(record.networks[1].interface.as_deref(), Some("eth0"));
    let ip = record.networks[1].result["ip4"]["ip"].as_str().unwrap().to_string();
    assert_eq!(record.networks[1].result["ip4"]["gateway"], format!("{subnet_base}.1"));
    // The kernel agrees with the metadata.
    assert_eq!(addresses_of(&container, "eth0"), std::slice::from_ref(&ip));
    assert_eq!(host.attached(uuid).unwrap().as_ref(), Some(&record));
    assert_eq!(reservations(&host, "mynet").len(), 1);
    // The bridge with the gateway and the masquerade rule, in the namespace the plugins
    // see as the host's.
    assert_eq!(addresses_of(&bed.host_ns, bridge), [format!("{subnet_base}.1/24")]);
    let subnet = format!("{subnet_base}.0/24");
    assert!(nft_mentions(bed, &subnet), "no masquerade rule for {subnet}: {}", nft_ruleset(bed));

    let gateway: SocketAddr = format!("{subnet_base}.1:0").parse().unwrap();
    let server = tcp_echo_server(bed.host_ns.netns(), gateway).unwrap();
    tcp_echo(container.netns(), server.local_addr(), b"kurma", Duration::from_secs(5)).unwrap();

    let host_links_attached = bed.host_links().len();
    host.detach(uuid).unwrap();
    assert_eq!(links_of(&container), ["lo"], "detach removes the container's interface");
    assert_eq!(bed.host_links().len(), host_links_attached - 1, "detach removes the host end");
    assert!(reservations(&host, "mynet").is_empty(), "detach releases the address");
    assert!(host.attached(uuid).unwrap().is_none());
    assert!(!nft_mentions(bed, &ip), "a rule for {ip} is left: {}", nft_ruleset(bed));
    assert!(!nft_mentions(bed, &subnet), "a rule for {subnet} is left: {}", nft_ruleset(bed));
    host.detach(uuid).unwrap(); // idempotent

    host.stop_plugins().unwrap();
    for network in ["lo", "mynet"] {
        assert_eq!(host.plugin_status(network), None);
    }
}

/// The host namespace's nftables ruleset, as the kernel reports it.
fn nft_ruleset(bed: &Bed) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", bed.host_ns.name(), "nft", "-j", "list", "ruleset"])
        .output()
        .unwrap();
    assert!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Whether any rule of the host namespace names `cidr`'s address (as nft prints it).
fn nft_mentions(bed: &Bed, cidr: &str) -> bool {
    let address = cidr.split('/').next().unwrap();
    nft_ruleset(bed).contains(&format!("\"{address}\""))
}

#[test]
fn images_from_files_aci_and_oci() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = lo_and_mynet(
        &images.file_uri("lo-net.aci"),
        &images.file_uri("mynet.oci.tar"),
        "kh-br-f",
        "10.209.1",
    );
    attach_lo_and_mynet(&bed, &config, "10.209.1", "kh-br-f");
    let config = lo_and_mynet(
        &images.file_uri("lo-net.oci.tar"),
        &images.file_uri("mynet.aci"),
        "kh-br-g",
        "10.209.2",
    );
    attach_lo_and_mynet(&bed, &config, "10.209.2", "kh-br-g");
}

#[test]
fn images_from_http() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let server = FileServer::start(images.dir.clone());
    let url = |name: &str| format!("http://127.0.0.1:{}/{name}", server.port);
    let config = lo_and_mynet(&url("lo-net.aci"), &url("mynet.oci.tar"), "kh-br-h", "10.209.3");
    attach_lo_and_mynet(&bed, &config, "10.209.3", "kh-br-h");
}

#[test]
fn images_from_a_docker_registry() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let registry = Registry::start(&bed.tmp.path().join("registry"));
    registry.push_archive("kh/lo-netplugin", "1", &images.dir.join("lo-net.oci.tar"));
    registry.push_archive("kh/cni-netplugin", "1", &images.dir.join("mynet.oci.tar"));
    let config = lo_and_mynet(
        &format!("docker://{}/kh/lo-netplugin:1", registry.addr),
        &format!("docker://{}/kh/cni-netplugin:1", registry.addr),
        "kh-br-d",
        "10.209.4",
    );
    attach_lo_and_mynet(&bed, &config, "10.209.4", "kh-br-d");
}
