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
//! - what is plain HTTP at all is decided by one rule, [`is_loopback`].

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{pem::PemObject, CertificateDer};

use url::{Host, Url};

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

/// The HTTP client of one fetch.
#[derive(Debug, Clone)]
pub struct Fetcher {
    agent: ureq::Agent,
    pub limits: FetchLimits,
}

impl Fetcher {
    /// A client with `limits` that trusts the usual web roots and, when given, the PEM
    /// certificates in `ca_file` too (a registry or image server with a private CA).
    pub fn new(limits: FetchLimits, ca_file: Option<&Path>) -> Result<Fetcher, String> {
        // Redirects are ours to follow (see the module's documentation).
        let mut agent = ureq::AgentBuilder::new().timeout(HTTP_TIMEOUT).redirects(0);
        if let Some(ca_file) = ca_file {
            agent = agent.tls_config(tls_with_ca(ca_file)?);
        }
        Ok(Fetcher { agent: agent.build(), limits })
    }

    /// GETs `url` with `headers`, following redirects under this module's policy. Every
    /// status comes back as a response (4xx and 5xx too): callers decide what they mean.
    /// An `Authorization` header goes only to the host it was given for.
    pub fn get(&self, url: &str, headers: &[(&str, &str)]) -> Result<ureq::Response, String> {
        let mut current = Url::parse(url).map_err(|err| format!("{url}: not a URL: {err}"))?;
        let origin = authority(&current);
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self.agent.request_url("GET", &current);
            for (name, value) in headers {
                if name.eq_ignore_ascii_case("authorization") && authority(&current) != origin {
                    continue;
                }
                request = request.set(name, value);
            }
            let response = match request.call() {
                Ok(response) => response,
                Err(ureq::Error::Status(_, response)) => response,
                Err(err) => return Err(format!("GET {current}: {err}")),
            };
            if !(300..400).contains(&response.status()) {
                return Ok(response);
            }
            let Some(location) = response.header("Location") else {
                return Ok(response);
            };
            current = redirect_target(&current, location)?;
        }
        Err(format!("GET {url}: more than {MAX_REDIRECTS} redirects"))
    }

    /// GETs `url` and fails unless the answer is a 2xx.
    pub fn get_ok(&self, url: &str, headers: &[(&str, &str)]) -> Result<ureq::Response, String> {
        let response = self.get(url, headers)?;
        check_status(url, response)
    }
}

/// ureq's own TLS configuration (ring, TLS 1.2 and 1.3, the web's roots) with the
/// certificates of `ca_file` added to the roots.
fn tls_with_ca(ca_file: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let shown = ca_file.display();
    let pem = std::fs::read(ca_file).map_err(|err| format!("CA file {shown}: {err}"))?;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|err| format!("CA file {shown}: {err}"))?;
        roots.add(cert).map_err(|err| format!("CA file {shown}: {err}"))?;
        added += 1;
    }
    if added == 0 {
        return Err(format!("CA file {shown}: no PEM certificate in it"));
    }
    let config = rustls::ClientConfig::builder_with_provider(rustls::crypto::ring::default_provider().into())
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .map_err(|err| format!("TLS configuration: {err}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A response, or an error naming its status when it is not a success.
pub fn check_status(url: &str, response: ureq::Response) -> Result<ureq::Response, String> {
    match response.status() {
        200..=299 => Ok(response),
        status => Err(format!("GET {url}: the server answered {status} {}", response.status_text())),
    }
}

/// Where a redirect from `from` to `location` leads, or why it is not followed: a
/// downgrade from https to http, or a scheme other than http(s).
pub fn redirect_target(from: &Url, location: &str) -> Result<Url, String> {
    let to = from.join(location).map_err(|err| format!("GET {from}: bad redirect {location:?}: {err}"))?;
    match (from.scheme(), to.scheme()) {
        (_, "https") | ("http", "http") => Ok(to),
        ("https", "http") => Err(format!(
            "GET {from}: refusing the redirect from https to plain http ({to}): it would give up the \
             server's authentication"
        )),
        (_, other) => Err(format!("GET {from}: refusing the redirect to a {other}: URL ({to})")),
    }
}

fn authority(url: &Url) -> (Option<String>, Option<u16>) {
    (url.host_str().map(str::to_string), url.port_or_known_default())
}

/// Reads a whole body into memory, within `bound`.
pub fn read_body(response: ureq::Response, bound: Bound, what: &str) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    copy_body(response, bound, &mut body, what)?;
    Ok(body)
}

/// Copies a body into `dest`, within `bound`: a declared length above it is refused
/// before reading, and the read stops one byte past it. Returns the length.
pub fn copy_body(
    response: ureq::Response,
    bound: Bound,
    dest: &mut impl Write,
    what: &str,
) -> Result<u64, String> {
    let declared = response.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(declared) = declared.filter(|&d| d > bound.max()) {
        return Err(format!("{what}: the server declares {declared} bytes, more than {}", bound.describe()));
    }
    // One byte more than allowed tells "too long" from "exactly the bound".
    let mut body = response.into_reader().take(bound.max().saturating_add(1));
    let copied = std::io::copy(&mut body, dest).map_err(|err| format!("{what}: {err}"))?;
    if copied > bound.max() {
        return Err(format!("{what}: the body is longer than {}", bound.describe()));
    }
    if let Bound::Exactly(size) = bound {
        if copied != size {
            return Err(format!(
                "{what}: the body ended after {copied} of the {size} bytes its descriptor declares"
            ));
        }
    }
    Ok(copied)
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
        assert!(redirect_target(&https, "http://cdn.example/blob")
            .unwrap_err()
            .contains("https to plain http"));
        assert_eq!(redirect_target(&https, "/other").unwrap().as_str(), "https://registry.example/other");
        assert_eq!(
            redirect_target(&https, "https://cdn.example/b").unwrap().as_str(),
            "https://cdn.example/b"
        );
        assert_eq!(redirect_target(&http, "https://x.example/").unwrap().as_str(), "https://x.example/");
        assert!(redirect_target(&http, "file:///etc/passwd").unwrap_err().contains("file:"));
    }
}
