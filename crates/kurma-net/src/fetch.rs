//! Every HTTP request of kurma-net goes through here: a registry's manifests, blobs and
//! tokens, and `http(s)://` images. Whoever answers (a registry, a web server, anyone on
//! the path of plain HTTP) is not trusted, so:
//!
//! - a body is read only up to what it may be ([`Bound`]): exactly a descriptor's size
//!   for a blob, a fixed cap for a JSON document or a whole image. A `Content-Length`
//!   above the bound is refused before a byte is read, and a body that runs past it is
//!   cut off at the bound plus one byte, whatever the server said;
//! - redirects are followed here, not by the HTTP library, so that one from `https` to
//!   plain `http` is refused (it would drop the server's authentication and the
//!   transport's integrity for the rest of the fetch), at most [`MAX_REDIRECTS`] of them,
//!   and a token is never sent on to another host;
//! - what is plain HTTP at all is decided by one rule, [`is_loopback`], and it is applied
//!   to every hop of a request ([`transport_allowed`]): the first URL and each redirect's
//!   target. Plain HTTP to another machine is followed only when the body is checked
//!   against a digest the caller already holds ([`Check::Digest`]); otherwise a loopback
//!   server could send the fetch on to an unauthenticated host off the machine.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{pem::PemObject, CertificateDer};
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
use ureq::Agent;
use url::{Host, Url};

/// An HTTP answer: its head, and a body not yet read.
pub type Response = ureq::http::Response<ureq::Body>;

/// How long one HTTP request may take before the fetch fails.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(120);

/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 5;

/// The largest image kurma-net fetches: an `http(s)://` image file, or the sum of the
/// config and layers a registry's manifest declares. The netplugin images this
/// repository builds are a few tens of MiB; 1 GiB leaves room for any real plugin and
/// still bounds the disk a hostile server can fill.
pub const MAX_IMAGE_BYTES: u64 = 1 << 30;

/// The caps of one host side: production values by default. (Tests lower `image` to
/// play an endless server without sending a gigabyte; the code path is the same.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// A JSON document: a manifest, an index, a token answer.
    pub document: u64,
    /// A whole image (see [`MAX_IMAGE_BYTES`]).
    pub image: u64,
}

impl Default for FetchLimits {
    fn default() -> FetchLimits {
        FetchLimits { document: kurma_model::image::MAX_DOCUMENT_BYTES, image: MAX_IMAGE_BYTES }
    }
}

/// How long a body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Exactly this many bytes: a blob of a known descriptor.
    Exactly(u64),
    /// At most this many: a document or an image of unknown size.
    AtMost(u64),
}

impl Bound {
    fn max(self) -> u64 {
        match self {
            Bound::Exactly(n) | Bound::AtMost(n) => n,
        }
    }

    fn describe(self) -> String {
        match self {
            Bound::Exactly(n) => format!("the {n} bytes its descriptor declares"),
            Bound::AtMost(n) => format!("the limit of {n} bytes"),
        }
    }
}

/// Whether `host` is this machine's loopback: an IP literal in 127.0.0.0/8, `::1`, or
/// exactly the name `localhost`. The one rule for "plain HTTP is acceptable here": a name
/// that merely starts with `127.` (`127.0.0.1.example.net`) is a DNS name like any other.
pub fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
        Host::Domain(name) => *name == "localhost",
    }
}

/// Whether plain HTTP to `url` is acceptable without a digest pin (its host is loopback).
pub fn plain_http_allowed(url: &Url) -> bool {
    url.host().is_some_and(|host| is_loopback(&host))
}

/// What vouches for a body besides its transport: decides whether plain HTTP to another
/// machine may carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The caller checks the body against a digest it held before asking (an image URI's
    /// pin, a descriptor's digest): whoever answers cannot swap it unnoticed.
    Digest,
    /// Nothing but the transport: the body (a manifest by tag, a token, an unpinned image)
    /// is only as good as the server's authentication.
    Transport,
}

/// Why a fetch failed. The messages name the URL (or the file) and the rule; the variants
/// are what a caller can tell apart: a hop the transport rules refuse, an answer that is
/// not a success, a body over its bound, and the rest.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: not a URL: {reason}")]
    NotAUrl { url: String, reason: url::ParseError },
    /// Plain http to another machine for a body nothing but the transport vouches for.
    #[error(
        "refusing plain http to another machine ({url}): only loopback may be spoken to in plain \
         text unless the content is pinned by digest"
    )]
    PlainHttp { url: String },
    /// A scheme other than http(s).
    #[error("refusing a {scheme}: URL ({url})")]
    Scheme { scheme: String, url: String },
    /// One hop of `GET url` was refused by the transport rules (`refused` says which).
    #[error("GET {url}: {refused}")]
    HopRefused { url: String, refused: Box<FetchError> },
    #[error("GET {url}: {source}")]
    Request { url: String, source: Box<ureq::Error> },
    #[error("GET {url}: more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects { url: String },
    #[error("GET {from}: bad redirect {location:?}: {reason}")]
    BadRedirect { from: String, location: String, reason: url::ParseError },
    #[error(
        "GET {from}: refusing the redirect from https to plain http ({to}): it would give up the \
         server's authentication"
    )]
    Downgrade { from: String, to: String },
    #[error("GET {from}: refusing the redirect to a {scheme}: URL ({to})")]
    RedirectScheme { from: String, scheme: String, to: String },
    /// The answer's status is not a success (`status` is its code).
    #[error("GET {url}: the server answered {status} {reason}")]
    Status { url: String, status: u16, reason: &'static str },
    /// The private CA file is unreadable, holds no certificate, or one that is not usable.
    #[error("CA file {}: {reason}", path.display())]
    CaFile { path: std::path::PathBuf, reason: String },
    /// A body over its bound, declared so or found so while reading.
    #[error("{what}: the server declares {declared} bytes, more than {bound}")]
    DeclaredTooLong { what: String, declared: u64, bound: String },
    #[error("{what}: the body is longer than {bound}")]
    TooLong { what: String, bound: String },
    /// A body shorter than its descriptor declares.
    #[error("{what}: the body ended after {copied} of the {size} bytes its descriptor declares")]
    Truncated { what: String, copied: u64, size: u64 },
    #[error("{what}: {source}")]
    Read { what: String, source: std::io::Error },
}

/// Whether one hop of a request may go to `url`: `https`, plain `http` to this machine's
/// loopback, or plain `http` anywhere when the body is checked by digest. The error names
/// the hop's URL and the rule.
pub fn transport_allowed(url: &Url, check: Check) -> Result<(), FetchError> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if check == Check::Digest || plain_http_allowed(url) => Ok(()),
        "http" => Err(FetchError::PlainHttp { url: url.to_string() }),
        other => Err(FetchError::Scheme { scheme: other.to_string(), url: url.to_string() }),
    }
}

/// The HTTP client of one fetch.
#[derive(Debug, Clone)]
pub struct Fetcher {
    agent: Agent,
    pub limits: FetchLimits,
}

impl Fetcher {
    /// A client with `limits` that trusts the usual web roots and, when given, the PEM
    /// certificates in `ca_file` too (a registry or image server with a private CA).
    pub fn new(limits: FetchLimits, ca_file: Option<&Path>) -> Result<Fetcher, FetchError> {
        let config = Agent::config_builder()
            // Redirects are ours to follow (see the module's documentation), and every
            // status is an answer for the caller to judge.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_TIMEOUT))
            .tls_config(tls_config(ca_file)?)
            .build();
        Ok(Fetcher { agent: config.into(), limits })
    }

    /// GETs `url` with `headers`, following redirects under this module's policy; `check`
    /// says what vouches for the body ([`transport_allowed`] is applied to every hop,
    /// before it is connected to). Every status comes back as a response (4xx and 5xx
    /// too): callers decide what they mean. An `Authorization` header goes only to the
    /// host it was given for.
    pub fn get(&self, url: &str, headers: &[(&str, &str)], check: Check) -> Result<Response, FetchError> {
        let mut current =
            Url::parse(url).map_err(|reason| FetchError::NotAUrl { url: url.to_string(), reason })?;
        let origin = authority(&current);
        for _ in 0..=MAX_REDIRECTS {
            transport_allowed(&current, check).map_err(|refused| FetchError::HopRefused {
                url: url.to_string(),
                refused: Box::new(refused),
            })?;
            let mut request = self.agent.get(current.as_str());
            for (name, value) in headers {
                if name.eq_ignore_ascii_case("authorization") && authority(&current) != origin {
                    continue;
                }
                request = request.header(*name, *value);
            }
            let response = request.call().map_err(|source| FetchError::Request {
                url: current.to_string(),
                source: Box::new(source),
            })?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let Some(location) = header(&response, "Location") else {
                return Ok(response);
            };
            current = redirect_target(&current, location)?;
        }
        Err(FetchError::TooManyRedirects { url: url.to_string() })
    }

    /// GETs `url` and fails unless the answer is a 2xx.
    pub fn get_ok(&self, url: &str, headers: &[(&str, &str)], check: Check) -> Result<Response, FetchError> {
        let response = self.get(url, headers, check)?;
        check_status(url, response)
    }
}

/// The roots a server's certificate may chain to: the web's (Mozilla's list, as the
/// `webpki-root-certs` crate ships it) and, when given, every certificate of the PEM file
/// `ca_file` too. ureq takes one list (the web's or a given one, never both), so the web's
/// are part of the list we give it.
fn tls_config(ca_file: Option<&Path>) -> Result<TlsConfig, FetchError> {
    let mut roots: Vec<Certificate<'static>> =
        webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().map(|cert| Certificate::from_der(cert)).collect();
    if let Some(ca_file) = ca_file {
        roots.extend(private_ca(ca_file)?);
    }
    Ok(TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(RootCerts::new_with_certs(&roots))
        .build())
}

/// The certificates of the PEM file `ca_file`, each checked to be a usable trust anchor
/// (ureq would skip one that is not without a word).
fn private_ca(ca_file: &Path) -> Result<Vec<Certificate<'static>>, FetchError> {
    let refused = |reason: String| FetchError::CaFile { path: ca_file.to_path_buf(), reason };
    let pem = std::fs::read(ca_file).map_err(|err| refused(err.to_string()))?;
    let mut checked = rustls::RootCertStore::empty();
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|err| refused(err.to_string()))?;
        certs.push(Certificate::from_der(cert.as_ref()).to_owned());
        checked.add(cert).map_err(|err| refused(err.to_string()))?;
    }
    if certs.is_empty() {
        return Err(refused("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The value of the header `name`, when there is one and it is text.
pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|value| value.to_str().ok())
}

/// A response, or an error naming its status when it is not a success.
pub fn check_status(url: &str, response: Response) -> Result<Response, FetchError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    Err(FetchError::Status {
        url: url.to_string(),
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or(""),
    })
}

/// Where a redirect from `from` to `location` leads, or why it is not followed: a
/// downgrade from https to http, or a scheme other than http(s). (Whether plain http to
/// the target is acceptable at all is [`transport_allowed`]'s, checked on every hop.)
pub fn redirect_target(from: &Url, location: &str) -> Result<Url, FetchError> {
    let to = from.join(location).map_err(|reason| FetchError::BadRedirect {
        from: from.to_string(),
        location: location.to_string(),
        reason,
    })?;
    match (from.scheme(), to.scheme()) {
        (_, "https") | ("http", "http") => Ok(to),
        ("https", "http") => Err(FetchError::Downgrade { from: from.to_string(), to: to.to_string() }),
        (_, other) => Err(FetchError::RedirectScheme {
            from: from.to_string(),
            scheme: other.to_string(),
            to: to.to_string(),
        }),
    }
}

fn authority(url: &Url) -> (Option<String>, Option<u16>) {
    (url.host_str().map(str::to_string), url.port_or_known_default())
}

/// Reads a whole body into memory, within `bound`.
pub fn read_body(response: Response, bound: Bound, what: &str) -> Result<Vec<u8>, FetchError> {
    let mut body = Vec::new();
    copy_body(response, bound, &mut body, what)?;
    Ok(body)
}

/// Copies a body into `dest`, within `bound`: a declared length above it is refused
/// before reading, and ureq stops the read (an error) at the first byte past it, whatever
/// the server declared. Returns the length.
pub fn copy_body(
    response: Response,
    bound: Bound,
    dest: &mut impl Write,
    what: &str,
) -> Result<u64, FetchError> {
    let what = what.to_string();
    let declared = header(&response, "Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(declared) = declared.filter(|&d| d > bound.max()) {
        return Err(FetchError::DeclaredTooLong { what, declared, bound: bound.describe() });
    }
    let mut body = response.into_body().into_with_config().limit(bound.max()).reader();
    let copied = match std::io::copy(&mut body, dest) {
        Ok(copied) => copied,
        Err(err) if over_limit(&err) => return Err(FetchError::TooLong { what, bound: bound.describe() }),
        Err(source) => return Err(FetchError::Read { what, source }),
    };
    if let Bound::Exactly(size) = bound {
        if copied != size {
            return Err(FetchError::Truncated { what, copied, size });
        }
    }
    Ok(copied)
}

/// Whether a body's read failed because the body ran past its limit.
fn over_limit(err: &std::io::Error) -> bool {
    let inner = err.get_ref().and_then(|inner| inner.downcast_ref::<ureq::Error>());
    matches!(inner, Some(ureq::Error::BodyExceedsLimit(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(url: &str) -> bool {
        plain_http_allowed(&Url::parse(url).unwrap())
    }

    #[test]
    fn only_literal_loopback_addresses_and_localhost_are_loopback() {
        for url in ["http://127.0.0.1:5000/", "http://127.9.8.7/", "http://[::1]:80/", "http://localhost/"] {
            assert!(loopback(url), "{url}");
        }
        for url in [
            "http://127.0.0.1.example.invalid/",
            "http://127.evil.example/",
            "http://localhost.example/",
            "http://10.0.0.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://example.com/",
        ] {
            assert!(!loopback(url), "{url}");
        }
    }

    #[test]
    fn a_redirect_never_goes_from_https_to_http() {
        let https = Url::parse("https://registry.example/v2/a/blobs/x").unwrap();
        let http = Url::parse("http://127.0.0.1:5000/v2/").unwrap();
        let downgrade = redirect_target(&https, "http://cdn.example/blob").unwrap_err();
        assert!(matches!(downgrade, FetchError::Downgrade { .. }), "{downgrade}");
        assert!(downgrade.to_string().contains("https to plain http"), "{downgrade}");
        assert_eq!(redirect_target(&https, "/other").unwrap().as_str(), "https://registry.example/other");
        assert_eq!(
            redirect_target(&https, "https://cdn.example/b").unwrap().as_str(),
            "https://cdn.example/b"
        );
        assert_eq!(redirect_target(&http, "https://x.example/").unwrap().as_str(), "https://x.example/");
        assert!(redirect_target(&http, "file:///etc/passwd").unwrap_err().to_string().contains("file:"));
    }

    #[test]
    fn plain_http_to_another_machine_needs_a_digest_on_every_hop() {
        let url = |u: &str| Url::parse(u).unwrap();
        for check in [Check::Digest, Check::Transport] {
            assert!(transport_allowed(&url("https://cdn.example/b"), check).is_ok());
            assert!(transport_allowed(&url("http://127.0.0.1:5000/b"), check).is_ok());
            assert!(transport_allowed(&url("file:///etc/shadow"), check)
                .unwrap_err()
                .to_string()
                .contains("file:"));
        }
        assert!(transport_allowed(&url("http://cdn.example/b"), Check::Digest).is_ok());
        let err = transport_allowed(&url("http://cdn.example/b"), Check::Transport).unwrap_err();
        assert!(matches!(err, FetchError::PlainHttp { .. }), "{err}");
        let err = err.to_string();
        assert!(err.contains("refusing plain http to another machine (http://cdn.example/b)"), "{err}");
    }

    fn roots(config: &TlsConfig) -> usize {
        match config.root_certs() {
            RootCerts::Specific(certs) => certs.len(),
            other => panic!("not a given list: {other:?}"),
        }
    }

    #[test]
    fn the_ca_file_adds_its_certificates_to_the_web_roots() {
        let web = webpki_root_certs::TLS_SERVER_ROOT_CERTS.len();
        assert!(web > 100, "{web} web roots");
        assert_eq!(roots(&tls_config(None).unwrap()), web);

        let dir = tempfile::Builder::new().prefix("k3-").tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let out = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-days", "1", "-subj", "/CN=k3-ca", "-keyout"])
            .arg(dir.path().join("ca.key"))
            .arg("-out")
            .arg(&ca)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(roots(&tls_config(Some(&ca)).unwrap()), web + 1);
    }

    #[test]
    fn a_ca_file_without_a_usable_certificate_is_an_error_naming_it() {
        let dir = tempfile::Builder::new().prefix("k3-").tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = tls_config(Some(&empty)).unwrap_err().to_string();
        assert!(err.contains("empty.pem: no PEM certificate in it"), "{err}");

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
        let err = tls_config(Some(&garbage)).unwrap_err().to_string();
        assert!(err.contains("garbage.pem"), "{err}");

        let missing = dir.path().join("missing.pem");
        assert!(tls_config(Some(&missing)).unwrap_err().to_string().contains("missing.pem"));
    }
}
