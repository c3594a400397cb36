//! etcd-ipam over TLS against a real etcd that requires client certificates
//! (`--client-cert-auth`), with certificates made by the test: ADD/DEL from the plugin
//! binary and through the node agent, and the refusals (no client certificate, another CA,
//! a missing file) as clear errors that allocate nothing. A module of the etcd_ipam tests,
//! whose helpers it uses.

use std::path::Path;

use cni_testkit::etcd::{EtcdCluster, Pki};
use serde_json::Value;

use super::{address, conf as plain_conf, etcd_keys as keys, run};

/// The network configuration with the cluster's TLS files (or another CA's).
fn conf(cluster: &EtcdCluster, network: &str, tls: &Pki) -> Value {
    let mut conf = plain_conf(&cluster.endpoints(), network, "node-a", &["10.91.0.0/16"], 26);
    conf["ipam"]["caFile"] = tls.ca.display().to_string().into();
    conf["ipam"]["certFile"] = tls.client_cert.display().to_string().into();
    conf["ipam"]["keyFile"] = tls.client_key.display().to_string().into();
    conf
}

fn run_json(conf: &Value, command: &str, container_id: &str) -> Value {
    run(conf, command, container_id).json()
}

#[test]
fn add_and_del_over_tls_from_the_plugin_and_the_agent() {
    use cni_etcd_ipam::agent::Agent;
    let cluster = EtcdCluster::start_tls("etpl", 3);
    assert!(cluster.endpoints().iter().all(|e| e.starts_with("https://")));
    let conf = conf(&cluster, "etnet", cluster.pki().unwrap());
    let first = address(&run_json(&conf, "ADD", "c1"));
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
    let second = address(&run_json(&via_agent, "ADD", "c2"));
    let third = address(&run_json(&via_agent, "ADD", "c3"));
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
    // The member's BadCertificate alert, or (TLS 1.3 refuses after the client's side of the
    // handshake) its hanging up on the request: either way the message names TLS and certFile.
    let refused = err.msg.contains("BadCertificate") || err.msg.contains("hung up");
    assert!(refused && err.msg.contains("TLS") && err.msg.contains("certFile"), "{err:?}");

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
    assert!(address(&run_json(&conf(&cluster, "etrf", pki), "ADD", "c1")).starts_with("10.91."));
}
