//! Throwaway certificates for TLS tests, made with Debian's `openssl` command: a CA, a
//! server certificate for 127.0.0.1 (an IP SAN) and a client certificate signed by it.
//! [`Pki::create`] can be called twice for a second, unrelated CA (the "wrong CA" case).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cni_etcd::TlsFiles;

const OPENSSL: &str = "/usr/bin/openssl";

/// The PEM files of one CA and the certificates it signed, all in one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new(OPENSSL).current_dir(dir).args(args).output().unwrap_or_else(|e| {
        panic!("{OPENSSL}: {e} (install Debian's openssl: tools/test --setup-only does)")
    });
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A new P-256 key in `key` and, in `out`, a request (`-new`) or a self-signed
/// certificate (`-x509`) for `subject`.
fn key_and_request(dir: &Path, kind: &str, key: &str, out: &str, subject: &str, extra: &[&str]) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut args = vec!["req", kind];
    args.extend(ec);
    args.extend(["-keyout", key, "-out", out, "-subj", subject]);
    args.extend(extra);
    openssl(dir, &args);
}

/// A P-256 key and a certificate for `cn` signed by the CA in `dir`, with the extensions
/// in `ext`.
fn signed(dir: &Path, name: &str, cn: &str, ext: &str) {
    let (key, csr, cert, ext_file) =
        (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
    fs::write(dir.join(&ext_file), ext).expect("writing an openssl extension file");
    key_and_request(dir, "-new", &key, &csr, &format!("/CN={cn}"), &[]);
    let ca = ["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2"];
    let mut args = vec!["x509", "-req", "-in", &csr];
    args.extend(ca);
    args.extend(["-out", &cert, "-extfile", &ext_file]);
    openssl(dir, &args);
}

impl Pki {
    /// Makes a CA named `name` and its certificates in `dir` (created if missing).
    pub fn create(dir: &Path, name: &str) -> Pki {
        fs::create_dir_all(dir).expect("creating the certificate directory");
        let ca_usage = [
            "-days",
            "2",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ];
        key_and_request(dir, "-x509", "ca.key", "ca.pem", &format!("/CN={name} test CA"), &ca_usage);
        let leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n";
        // clientAuth too: etcd's own JSON gateway dials the member's gRPC side with the
        // server certificate as its client certificate.
        let server = format!("{leaf}extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n");
        signed(dir, "server", "etcd", &server);
        signed(dir, "client", &format!("{name}-client"), &format!("{leaf}extendedKeyUsage=clientAuth\n"));
        Pki {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        }
    }

    /// What a client of this CA's servers configures: the CA and the client certificate.
    pub fn client_files(&self) -> TlsFiles {
        TlsFiles {
            ca_file: self.ca.clone(),
            cert_file: Some(self.client_cert.clone()),
            key_file: Some(self.client_key.clone()),
        }
    }
}
