//! TLS for `https://` endpoints: the cluster's CA and, for members started with
//! `--client-cert-auth`, a client certificate and key, all PEM files. rustls with the
//! `ring` provider (the one already in the build through other crates), offering ALPN
//! `h2` (etcd's Go server speaks HTTP/2 over TLS only when it is negotiated); the server's
//! certificate must name the endpoint's host (an IP SAN for an address such as 127.0.0.1).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

/// Where the PEM files are (the configuration's `caFile`, `certFile`, `keyFile`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TlsFiles {
    pub ca_file: PathBuf,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// A loaded TLS client configuration, cheap to clone and share between connections.
#[derive(Clone)]
pub struct Tls {
    pub(crate) config: Arc<ClientConfig>,
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Config(format!("{what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!("{what} {}: no PEM certificate in it", path.display())));
    }
    Ok(certs)
}

impl Tls {
    /// Reads and checks the files: a missing or unreadable file, a key that does not
    /// parse or does not match the certificate are configuration errors naming the file.
    pub fn load(files: &TlsFiles) -> Result<Tls> {
        let mut roots = RootCertStore::empty();
        let ca = certificates(&files.ca_file, "caFile")?;
        for cert in ca {
            roots.add(cert).map_err(|e| Error::Config(format!("caFile {}: {e}", files.ca_file.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        // rustls checks the files here (a key that does not parse or does not match the
        // certificate), so the error names them.
        let mut config = match (&files.cert_file, &files.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert_file), Some(key_file)) => {
                let chain = certificates(cert_file, "certFile")?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| Error::Config(format!("keyFile {}: {e}", key_file.display())))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::Config(format!(
                        "certFile {} with keyFile {}: {e}",
                        cert_file.display(),
                        key_file.display()
                    ))
                })?
            }
            _ => return Err(Error::Config("certFile and keyFile go together: give both or neither".into())),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Tls { config: Arc::new(config) })
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}
