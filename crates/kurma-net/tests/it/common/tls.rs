//! Throwaway certificates for the tests' https servers, made with `openssl`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA of its own and a server certificate it signed for one IP address, as PEM files.
pub struct TestCert {
    /// The CA's certificate (what `HostOptions::ca_file` names).
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCert {
    /// Writes a new CA and a certificate for `ip` (its only name) into `dir`.
    pub fn issue(dir: &Path, ip: &str) -> TestCert {
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=kmt-ca"],
            ]
            .concat(),
        );
        let subject = format!("/CN={ip}");
        openssl(
            &[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", &subject]].concat(),
        );
        std::fs::write(
            dir.join("leaf.ext"),
            format!("subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ]);
        TestCert { ca: dir.join("ca.pem"), cert: dir.join("leaf.pem"), key: dir.join("leaf.key") }
    }

    /// An HTTP client of the test's own that trusts only this CA.
    pub fn agent(&self) -> ureq::Agent {
        use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
        let ca = Certificate::from_pem(&std::fs::read(&self.ca).unwrap()).unwrap();
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .root_certs(RootCerts::new_with_certs(&[ca]))
            .build();
        ureq::Agent::config_builder().tls_config(tls).build().into()
    }
}
