//! TLS against a real etcd started with `--client-cert-auth`: certificates made by the test
//! (openssl), the server's name checked against the endpoint's host, a client without a
//! certificate or trusting another CA refused with an error that says TLS.

use std::time::Duration;

use cni_etcd::{Client, Error, Tls, TlsFiles};
use cni_testkit::etcd::{EtcdCluster, Pki};

fn client(endpoints: &[String], files: &TlsFiles) -> Client {
    Client::with_tls(endpoints, Duration::from_secs(2), Some(Tls::load(files).expect("TLS files"))).unwrap()
}

fn unreachable_reason(err: Error) -> String {
    match err {
        Error::Unreachable { reason, .. } => reason,
        other => panic!("expected an unreachable error, got {other}"),
    }
}

#[test]
fn client_certificate_reads_and_writes_over_tls() {
    let cluster = EtcdCluster::start_tls("etls1", 1);
    let pki = cluster.pki().unwrap();
    let mut client = client(&cluster.endpoints(), &pki.client_files());
    client.put(b"/etls/key", b"value", 0).unwrap();
    // Several calls on the one kept-alive TLS connection.
    for _ in 0..3 {
        assert_eq!(client.get(b"/etls/key").unwrap().unwrap().value, b"value");
    }
    assert!(cluster.endpoints()[0].starts_with("https://"));
}

#[test]
fn client_without_certificate_is_refused() {
    let cluster = EtcdCluster::start_tls("etls2", 1);
    let pki = cluster.pki().unwrap();
    let files = TlsFiles { ca_file: pki.ca.clone(), cert_file: None, key_file: None };
    let reason =
        unreachable_reason(client(&cluster.endpoints(), &files).put(b"/etls/x", b"", 0).unwrap_err());
    assert!(reason.contains("TLS") && reason.to_lowercase().contains("certificate"), "{reason}");
    // Nothing was written.
    assert!(cluster.client().get(b"/etls/x").unwrap().is_none());
}

#[test]
fn server_of_another_ca_is_refused() {
    let cluster = EtcdCluster::start_tls("etls3", 1);
    let other = Pki::create(&cluster.dir().join("other-ca"), "etls-other");
    let reason =
        unreachable_reason(client(&cluster.endpoints(), &other.client_files()).get(b"/x").unwrap_err());
    assert!(reason.contains("TLS") && reason.contains("UnknownIssuer"), "{reason}");
}

#[test]
fn server_name_must_match_the_endpoint_host() {
    let cluster = EtcdCluster::start_tls("etls4", 1);
    let pki = cluster.pki().unwrap();
    // The certificate names 127.0.0.1 only: "localhost" reaches the same member but is
    // not a name the certificate vouches for.
    let by_name: Vec<String> =
        cluster.endpoints().iter().map(|e| e.replace("127.0.0.1", "localhost")).collect();
    let reason = unreachable_reason(client(&by_name, &pki.client_files()).get(b"/x").unwrap_err());
    assert!(reason.contains("TLS") && reason.contains("not valid for name"), "{reason}");
}

#[test]
fn bad_tls_files_are_configuration_errors_naming_the_file() {
    let dir = tempfile::Builder::new().prefix("etls").tempdir().unwrap();
    let pki = Pki::create(dir.path(), "etls5");
    let missing = TlsFiles { ca_file: dir.path().join("nope.pem"), ..pki.client_files() };
    assert!(matches!(Tls::load(&missing), Err(Error::Config(m)) if m.contains("caFile")));
    let key_is_not_a_cert = TlsFiles { ca_file: pki.client_key.clone(), ..pki.client_files() };
    assert!(matches!(Tls::load(&key_is_not_a_cert), Err(Error::Config(m)) if m.contains("caFile")));
    let half = TlsFiles { key_file: None, ..pki.client_files() };
    assert!(matches!(Tls::load(&half), Err(Error::Config(m)) if m.contains("keyFile")));
    let wrong_key = TlsFiles { key_file: Some(pki.server_key.clone()), ..pki.client_files() };
    assert!(Tls::load(&wrong_key).is_err(), "a key of another certificate is accepted");
    // An https:// endpoint without TLS files, and plain endpoints with them.
    assert!(
        matches!(Client::new(&["https://127.0.0.1:1"], Duration::from_secs(1)), Err(Error::Config(m)) if m.contains("caFile"))
    );
    let tls = Tls::load(&pki.client_files()).unwrap();
    assert!(Client::with_tls(&["http://127.0.0.1:1"], Duration::from_secs(1), Some(tls)).is_err());
}
