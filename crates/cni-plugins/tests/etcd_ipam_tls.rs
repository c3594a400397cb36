//! etcd-ipam over TLS against a real etcd that requires client certificates
//! (`--client-cert-auth`), with certificates made by the test: ADD/DEL from the plugin
//! binary and through the node agent, and the refusals (no client certificate, another CA,
//! a missing file) as clear errors that allocate nothing.

mod common;

use std::path::Path;

use cni_etcd::testing::{EtcdCluster, Pki};
use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::{json, Value};

fn conf(cluster: &EtcdCluster, network: &str, tls: &Pki) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": network,
        "type": "etcd-ipam",
        "ipam": {
            "type": "etcd-ipam",
            "endpoints": cluster.endpoints(),
            "pools": ["10.91.0.0/16"],
            "nodeName": "node-a",
            "caFile": tls.ca,
            "certFile": tls.client_cert,
            "keyFile": tls.client_key,
        }
    })
}

fn run(conf: &Value, command: &str, container_id: &str) -> PluginOutput {
    PluginCall::new(common::plugin("etcd-ipam"), command)
        .container_id(container_id)
        .netns("/var/run/netns/et-unused")
        .config(conf)
        .run()
}

fn keys(cluster: &EtcdCluster, prefix: &str) -> Vec<String> {
    let (kvs, _) = cluster.client().get_prefix(prefix.as_bytes(), true).unwrap();
    kvs.iter().map(|kv| kv.key_str()).collect()
}

fn address(output: &PluginOutput) -> String {
    output.json()["ips"][0]["address"].as_str().unwrap().to_string()
}

#[test]
fn add_and_del_over_tls_from_the_plugin_and_the_agent() {
    use cni_plugins::ipam::etcd::agent::Agent;
    let cluster = EtcdCluster::start_tls("etpl", 3);
    assert!(cluster.endpoints().iter().all(|e| e.starts_with("https://")));
    let conf = conf(&cluster, "etnet", cluster.pki().unwrap());
    let first = address(&run(&conf, "ADD", "c1"));
    assert!(first.starts_with("10.91."), "{first}");
    assert_eq!(keys(&cluster, "/cni-rs/ipam/etnet/handle/"), ["/cni-rs/ipam/etnet/handle/c1/eth0"]);
    assert!(run(&conf, "CHECK", "c1").success());

    // Through the agent: its one kept-alive TLS connection serves several requests.
    let dir = tempfile::Builder::new().prefix("et-agent").tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || std::sync::Arc::new(Agent::default()).serve(listener));
    let mut via_agent = conf.clone();
    via_agent["ipam"]["agentSocket"] = socket.display().to_string().into();
    let second = address(&run(&via_agent, "ADD", "c2"));
    let third = address(&run(&via_agent, "ADD", "c3"));
    assert!(first != second && second != third && first != third, "{first} {second} {third}");
    assert_eq!(keys(&cluster, "/cni-rs/ipam/etnet/handle/").len(), 3);

    assert!(run(&conf, "DEL", "c1").success());
    assert!(run(&via_agent, "DEL", "c2").success());
    assert!(run(&via_agent, "DEL", "c2").success(), "DEL is idempotent");
    assert_eq!(keys(&cluster, "/cni-rs/ipam/etnet/handle/"), ["/cni-rs/ipam/etnet/handle/c3/eth0"]);
}

#[test]
fn refused_certificates_are_code_11_naming_tls_and_allocate_nothing() {
    let cluster = EtcdCluster::start_tls("etrf", 1);
    let pki = cluster.pki().unwrap();

    let mut no_cert = conf(&cluster, "etrf", pki);
    let ipam = no_cert["ipam"].as_object_mut().unwrap();
    ipam.remove("certFile");
    ipam.remove("keyFile");
    let err = run(&no_cert, "ADD", "c1").error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(
        err.msg.contains("TLS") && err.msg.contains("BadCertificate") && err.msg.contains("certFile"),
        "{err:?}"
    );

    let other = Pki::create(&cluster.dir().join("other-ca"), "etrf-other");
    let wrong_ca = conf(&cluster, "etrf", &other);
    let err = run(&wrong_ca, "ADD", "c1").error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("TLS") && err.msg.contains("UnknownIssuer"), "{err:?}");

    let mut missing = conf(&cluster, "etrf", pki);
    missing["ipam"]["keyFile"] = Path::new("/nonexistent/et-client.key").display().to_string().into();
    let err = run(&missing, "ADD", "c1").error();
    assert_eq!(err.code, 7, "{err:?}");
    assert!(err.msg.contains("keyFile /nonexistent/et-client.key"), "{err:?}");

    assert!(keys(&cluster, "/cni-rs/ipam/etrf/").is_empty(), "a refused client allocated something");
    // The right certificate still works afterwards.
    assert!(address(&run(&conf(&cluster, "etrf", pki), "ADD", "c1")).starts_with("10.91."));
}
