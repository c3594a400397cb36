//! Where a netplugin image comes from (`aci` URIs) and fetching it to a local file.
//!
//! - `file:///path/to/image.aci` — an image on the host's filesystem.
//! - `https://…` and `http://…` — an image downloaded with a GET. A `#sha256=<64 hex>`
//!   fragment pins the image file's digest: the download is refused unless it matches.
//!   Plain `http://` to anything but this machine's loopback needs that pin (nothing else
//!   would tell the image from one an attacker on the path put in its place).
//! - `docker:///user/name:tag` (Docker Hub) or `docker://host[:port]/user/name[:tag|@digest]`
//!   — a registry speaking the v2 API; see [`crate::registry`].
//!
//! A file or download may be an ACI (a tar with `manifest` and `rootfs/`) or an OCI image
//! archive (a tar of an image layout); [`kurma_model::image`] tells them apart by
//! their content. Every request goes through [`crate::fetch`] (bounded bodies, no
//! downgrading redirect, one loopback rule).

use std::path::{Path, PathBuf};

use kurma_model::image::oci::{self, Digest};
use kurma_model::image::ImageError;
use url::Url;

use crate::fetch::{self, Bound, Check, FetchError, Fetcher};

/// Why an `aci` URI is refused; each message names the URI.
#[derive(Debug, thiserror::Error)]
pub enum UriError {
    #[error("{uri:?} is not a URI (expected file://, http://, https:// or docker://)")]
    NotAUri { uri: String },
    #[error("{uri:?}: a file:// URI needs an absolute path (file:///path)")]
    RelativeFile { uri: String },
    #[error("unknown URI scheme {scheme:?} in {uri:?} (known: file://, http://, https://, docker://)")]
    UnknownScheme { scheme: String, uri: String },
    #[error("{uri:?}: not a URL: {reason}")]
    NotAUrl { uri: String, reason: url::ParseError },
    #[error("{uri:?}: no host")]
    NoHost { uri: String },
    #[error("{uri:?}: the only fragment an image URI may have is its pin, #sha256=<64 hex digits>")]
    Fragment { uri: String },
    #[error("{uri:?}: the pin: {reason}")]
    Pin { uri: String, reason: ImageError },
    /// Plain http to another machine without a pin (see the module's documentation).
    #[error(
        "{uri:?}: a plain http:// image from another machine must be pinned: add \
         #sha256=<the image file's sha256> (or use https://)"
    )]
    Unpinned { uri: String },
    #[error("{uri:?}: expected docker:///name:tag or docker://host/name:tag")]
    DockerShape { uri: String },
    #[error("{uri:?}: empty repository or tag")]
    EmptyName { uri: String },
    #[error("{uri:?}: registry {host:?}: {reason}")]
    RegistryNotAUrl { uri: String, host: String, reason: url::ParseError },
    #[error("{uri:?}: registry {host:?} is not a host[:port]")]
    RegistryNotAHost { uri: String, host: String },
}

/// Why an image could not be fetched to a local file or layout.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The image (or a blob, or a manifest's digest) is not what it should be.
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("{}: {source}", path.display())]
    File { path: PathBuf, source: std::io::Error },
    #[error("{}: no such image file", path.display())]
    NoSuchFile { path: PathBuf },
    /// The downloaded image is not the one its URI pins.
    #[error("GET {url}: the image's digest is {actual}, the URI pins {pin}")]
    PinMismatch { url: String, actual: Digest, pin: Digest },
    #[error("the image has no /opt/network/{executable}")]
    NoExecutable { executable: &'static str },
    #[error("the image manifest has no \"{field}\"")]
    ManifestField { field: &'static str },
    #[error("manifest {reference}: not JSON: {reason}")]
    ManifestNotJson { reference: String, reason: serde_json::Error },
    #[error("manifest {reference}: {reason}")]
    Manifest { reference: String, reason: ImageError },
    #[error("the image's config and layers declare {declared} bytes, more than the limit of {limit} bytes")]
    TooLarge { declared: u64, limit: u64 },
    #[error("the registry answered 401 without a WWW-Authenticate challenge")]
    NoChallenge,
    #[error("unsupported auth challenge {challenge:?}")]
    Challenge { challenge: String },
    #[error("the auth challenge has no realm")]
    NoRealm,
    #[error("auth realm {realm:?}: {reason}")]
    RealmNotAUrl { realm: String, reason: url::ParseError },
    /// A token realm the transport rules refuse (`refused` says which).
    #[error("auth realm {realm:?}: a token is fetched over https only: {refused}")]
    RealmTransport { realm: String, refused: FetchError },
    #[error("token from {realm}: {reason}")]
    TokenNotJson { realm: String, reason: serde_json::Error },
    #[error("token from {realm}: no \"token\" in the answer")]
    NoToken { realm: String },
}

impl PullError {
    /// An I/O error on `path`.
    pub fn file(path: &Path) -> impl FnOnce(std::io::Error) -> PullError + '_ {
        move |source| PullError::File { path: path.to_path_buf(), source }
    }
}

/// A parsed `aci` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    File(PathBuf),
    Http(HttpImage),
    Docker(DockerRef),
}

/// An `http(s)://` image: where to GET it and, when pinned, the digest it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpImage {
    /// The URL without the pin (a fragment is never sent anyway).
    pub url: Url,
    pub pin: Option<Digest>,
}

/// A `docker://` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerRef {
    /// `host[:port]`, or `None` for Docker Hub.
    pub registry: Option<String>,
    /// e.g. `user/plugin-name` (Docker Hub's one-word names get `library/`).
    pub repository: String,
    /// A tag or a `sha256:…` digest.
    pub reference: String,
}

impl ImageSource {
    /// Parses an `aci` value; the error names the problem.
    pub fn parse(uri: &str) -> Result<ImageSource, UriError> {
        let Some((scheme, rest)) = uri.split_once("://") else {
            return Err(UriError::NotAUri { uri: uri.to_string() });
        };
        match scheme {
            "file" => {
                let path = Path::new(rest);
                if !path.is_absolute() {
                    return Err(UriError::RelativeFile { uri: uri.to_string() });
                }
                Ok(ImageSource::File(path.to_path_buf()))
            }
            "http" | "https" => HttpImage::parse(uri).map(ImageSource::Http),
            "docker" => DockerRef::parse(uri, rest).map(ImageSource::Docker),
            other => Err(UriError::UnknownScheme { scheme: other.to_string(), uri: uri.to_string() }),
        }
    }
}

impl HttpImage {
    fn parse(uri: &str) -> Result<HttpImage, UriError> {
        let uri_ = || uri.to_string();
        let mut url = Url::parse(uri).map_err(|reason| UriError::NotAUrl { uri: uri_(), reason })?;
        if url.host().is_none() {
            return Err(UriError::NoHost { uri: uri_() });
        }
        let pin = match url.fragment() {
            None => None,
            Some(fragment) => {
                let hex =
                    fragment.strip_prefix("sha256=").ok_or_else(|| UriError::Fragment { uri: uri_() })?;
                let pin = Digest::parse(&format!("sha256:{hex}"))
                    .map_err(|reason| UriError::Pin { uri: uri_(), reason })?;
                Some(pin)
            }
        };
        url.set_fragment(None);
        // The fetch applies the same rule to every hop; refusing here says so at parse time.
        let check = if pin.is_some() { Check::Digest } else { Check::Transport };
        if url.scheme() == "http" && fetch::transport_allowed(&url, check).is_err() {
            return Err(UriError::Unpinned { uri: uri_() });
        }
        Ok(HttpImage { url, pin })
    }

    /// Downloads the image into the file `dest` (within the fetcher's image cap) and
    /// checks the pin.
    pub fn download(&self, fetcher: &Fetcher, dest: &Path) -> Result<(), PullError> {
        let url = self.url.as_str();
        let check = if self.pin.is_some() { Check::Digest } else { Check::Transport };
        let response = fetcher.get_ok(url, &[], check)?;
        let mut file = std::fs::File::create(dest).map_err(PullError::file(dest))?;
        fetch::copy_body(response, Bound::AtMost(fetcher.limits.image), &mut file, &format!("GET {url}"))?;
        if let Some(pin) = &self.pin {
            let (actual, _) = oci::digest_file(dest)?;
            if &actual != pin {
                return Err(PullError::PinMismatch { url: url.to_string(), actual, pin: pin.clone() });
            }
        }
        Ok(())
    }
}

impl DockerRef {
    /// `rest`: what follows `docker://` in `uri`.
    fn parse(uri: &str, rest: &str) -> Result<DockerRef, UriError> {
        let (registry, path) = match rest.strip_prefix('/') {
            Some(path) => (None, path),
            None => match rest.split_once('/') {
                Some((host, path)) if !host.is_empty() => (Some(registry_host(uri, host)?), path),
                _ => return Err(UriError::DockerShape { uri: uri.to_string() }),
            },
        };
        let (repository, reference) = if let Some((repo, digest)) = path.split_once('@') {
            (repo, digest.to_string())
        } else {
            match path.rsplit_once(':') {
                Some((repo, tag)) if !tag.contains('/') => (repo, tag.to_string()),
                _ => (path, "latest".to_string()),
            }
        };
        if repository.is_empty() || reference.is_empty() {
            return Err(UriError::EmptyName { uri: uri.to_string() });
        }
        let repository = if registry.is_none() && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository.to_string()
        };
        Ok(DockerRef { registry, repository, reference })
    }

    /// The registry's base URL. Loopback registries ([`fetch::is_loopback`]) are spoken
    /// to over plain HTTP (as Docker does for `localhost`), every other one over HTTPS.
    pub fn base_url(&self) -> String {
        match &self.registry {
            None => "https://registry-1.docker.io".into(),
            Some(host) => {
                let https = Url::parse(&format!("https://{host}/")).expect("checked when parsed");
                if fetch::plain_http_allowed(&https) {
                    format!("http://{host}")
                } else {
                    format!("https://{host}")
                }
            }
        }
    }
}

/// Checks a registry's `host[:port]` (of `uri`): nothing else (no user, no path) may hide
/// in it.
fn registry_host(uri: &str, host: &str) -> Result<String, UriError> {
    let url = Url::parse(&format!("https://{host}/")).map_err(|reason| UriError::RegistryNotAUrl {
        uri: uri.to_string(),
        host: host.to_string(),
        reason,
    })?;
    let plain = url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    if !plain || url.host().is_none() {
        return Err(UriError::RegistryNotAHost { uri: uri.to_string(), host: host.to_string() });
    }
    Ok(host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(registry: Option<&str>, repository: &str, reference: &str) -> ImageSource {
        ImageSource::Docker(DockerRef {
            registry: registry.map(str::to_string),
            repository: repository.into(),
            reference: reference.into(),
        })
    }

    #[test]
    fn uris_parse() {
        assert_eq!(ImageSource::parse("file:///a/b.aci").unwrap(), ImageSource::File("/a/b.aci".into()));
        assert_eq!(
            ImageSource::parse("https://x/y.aci").unwrap(),
            ImageSource::Http(HttpImage { url: Url::parse("https://x/y.aci").unwrap(), pin: None })
        );
        assert_eq!(ImageSource::parse("docker:///user/p:v1").unwrap(), docker(None, "user/p", "v1"));
        assert_eq!(
            ImageSource::parse("docker:///busybox").unwrap(),
            docker(None, "library/busybox", "latest")
        );
        assert_eq!(
            ImageSource::parse("docker://127.0.0.1:5000/kurma/lo:1").unwrap(),
            docker(Some("127.0.0.1:5000"), "kurma/lo", "1")
        );
        assert_eq!(
            ImageSource::parse("docker://reg:5000/a/b@sha256:00").unwrap(),
            docker(Some("reg:5000"), "a/b", "sha256:00")
        );
        assert_eq!(
            ImageSource::parse("docker://reg:5000/a/b").unwrap(),
            docker(Some("reg:5000"), "a/b", "latest")
        );
    }

    #[test]
    fn bad_uris_say_why() {
        assert!(ImageSource::parse("ftp://x")
            .unwrap_err()
            .to_string()
            .contains("unknown URI scheme \"ftp\""));
        assert!(ImageSource::parse("/images/lo.aci").unwrap_err().to_string().contains("not a URI"));
        assert!(ImageSource::parse("file://relative/x").unwrap_err().to_string().contains("absolute path"));
    }

    #[test]
    fn loopback_registries_use_plain_http() {
        let base = |s: &str| match ImageSource::parse(s).unwrap() {
            ImageSource::Docker(r) => r.base_url(),
            _ => unreachable!(),
        };
        assert_eq!(base("docker://127.0.0.1:5000/a/b"), "http://127.0.0.1:5000");
        assert_eq!(base("docker://localhost/a/b"), "http://localhost");
        assert_eq!(base("docker://[::1]:5000/a/b"), "http://[::1]:5000");
        assert_eq!(base("docker://127.3.2.1/a/b"), "http://127.3.2.1");
        assert_eq!(base("docker://quay.io/a/b"), "https://quay.io");
        // A DNS name that only starts like a loopback address is not one.
        assert_eq!(base("docker://127.0.0.1.example.invalid/a/b"), "https://127.0.0.1.example.invalid");
        assert_eq!(
            base("docker://127.0.0.1.example.invalid:5000/a/b"),
            "https://127.0.0.1.example.invalid:5000"
        );
        assert_eq!(base("docker://localhost.example/a/b"), "https://localhost.example");
        assert!(ImageSource::parse("docker://user@127.0.0.1/a/b")
            .unwrap_err()
            .to_string()
            .contains("not a host[:port]"));
        assert_eq!(base("docker:///a/b"), "https://registry-1.docker.io");
    }

    #[test]
    fn http_images_are_pinned_by_a_sha256_fragment_and_plain_http_elsewhere_must_be() {
        let hex = "a".repeat(64);
        let pinned = |uri: &str| match ImageSource::parse(uri) {
            Ok(ImageSource::Http(image)) => Ok(image),
            Ok(other) => panic!("{other:?}"),
            Err(err) => Err(err.to_string()),
        };
        let image = pinned(&format!("http://images.example/lo.aci#sha256={hex}")).unwrap();
        assert_eq!(image.url.as_str(), "http://images.example/lo.aci", "the pin is not part of the request");
        assert_eq!(image.pin.unwrap().hex(), hex);
        assert_eq!(pinned("https://images.example/lo.aci").unwrap().pin, None);
        assert_eq!(pinned("http://127.0.0.1:8080/lo.aci").unwrap().pin, None);
        assert_eq!(pinned("http://localhost/lo.aci").unwrap().pin, None);
        let err = pinned("http://images.example/lo.aci").unwrap_err();
        assert!(err.contains("must be pinned: add #sha256="), "{err}");
        let err = pinned("http://127.0.0.1.example.invalid/lo.aci").unwrap_err();
        assert!(err.contains("must be pinned"), "{err}");
        assert!(pinned("https://x.example/a#sha256=abc").unwrap_err().to_string().contains("the pin"));
        assert!(pinned("https://x.example/a#latest")
            .unwrap_err()
            .to_string()
            .contains("#sha256=<64 hex digits>"));
    }
}
