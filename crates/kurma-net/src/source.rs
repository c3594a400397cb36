//! Where a netplugin image comes from (`aci` URIs) and fetching it to a local file.
//!
//! - `file:///path/to/image.aci` — an image on the host's filesystem.
//! - `http://…` and `https://…` — an image downloaded with a GET.
//! - `docker:///user/name:tag` (Docker Hub) or `docker://host[:port]/user/name[:tag|@digest]`
//!   — a registry speaking the v2 API; see [`crate::registry`].
//!
//! A file or download may be an ACI (a tar with `manifest` and `rootfs/`) or an OCI image
//! archive (a tar of an image layout); [`crate::image`] tells them apart by their content.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one HTTP request may take before the fetch fails.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(120);

/// A parsed `aci` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    File(PathBuf),
    Http(String),
    Docker(DockerRef),
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
    pub fn parse(uri: &str) -> Result<ImageSource, String> {
        let Some((scheme, rest)) = uri.split_once("://") else {
            return Err(format!("{uri:?} is not a URI (expected file://, http://, https:// or docker://)"));
        };
        match scheme {
            "file" => {
                let path = Path::new(rest);
                if !path.is_absolute() {
                    return Err(format!("{uri:?}: a file:// URI needs an absolute path (file:///path)"));
                }
                Ok(ImageSource::File(path.to_path_buf()))
            }
            "http" | "https" if rest.is_empty() => Err(format!("{uri:?}: no host")),
            "http" | "https" => Ok(ImageSource::Http(uri.to_string())),
            "docker" => {
                DockerRef::parse(rest).map(ImageSource::Docker).map_err(|why| format!("{uri:?}: {why}"))
            }
            other => Err(format!(
                "unknown URI scheme {other:?} in {uri:?} (known: file://, http://, https://, docker://)"
            )),
        }
    }
}

impl DockerRef {
    fn parse(rest: &str) -> Result<DockerRef, String> {
        let (registry, path) = match rest.strip_prefix('/') {
            Some(path) => (None, path),
            None => match rest.split_once('/') {
                Some((host, path)) if !host.is_empty() => (Some(host.to_string()), path),
                _ => return Err("expected docker:///name:tag or docker://host/name:tag".into()),
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
            return Err("empty repository or tag".into());
        }
        let repository = if registry.is_none() && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository.to_string()
        };
        Ok(DockerRef { registry, repository, reference })
    }

    /// The registry's base URL. Loopback registries are spoken to over plain HTTP (as
    /// Docker does for `localhost`), every other one over HTTPS.
    pub fn base_url(&self) -> String {
        match &self.registry {
            None => "https://registry-1.docker.io".into(),
            Some(host) if is_loopback_host(host) => format!("http://{host}"),
            Some(host) => format!("https://{host}"),
        }
    }
}

fn is_loopback_host(host_port: &str) -> bool {
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => host_port,
    };
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

/// A shared HTTP agent with the fetch timeout.
pub fn http_agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(HTTP_TIMEOUT).build()
}

/// Downloads `url` into the file `dest`.
pub fn download(agent: &ureq::Agent, url: &str, dest: &Path) -> Result<(), String> {
    let response = agent.get(url).call().map_err(|err| format!("GET {url}: {err}"))?;
    let mut file = std::fs::File::create(dest).map_err(|err| format!("{}: {err}", dest.display()))?;
    std::io::copy(&mut response.into_reader(), &mut file).map_err(|err| format!("GET {url}: {err}"))?;
    file.flush().map_err(|err| format!("{}: {err}", dest.display()))
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
            ImageSource::Http("https://x/y.aci".into())
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
        assert!(ImageSource::parse("ftp://x").unwrap_err().contains("unknown URI scheme \"ftp\""));
        assert!(ImageSource::parse("/images/lo.aci").unwrap_err().contains("not a URI"));
        assert!(ImageSource::parse("file://relative/x").unwrap_err().contains("absolute path"));
    }

    #[test]
    fn loopback_registries_use_plain_http() {
        let base = |s: &str| match ImageSource::parse(s).unwrap() {
            ImageSource::Docker(r) => r.base_url(),
            _ => unreachable!(),
        };
        assert_eq!(base("docker://127.0.0.1:5000/a/b"), "http://127.0.0.1:5000");
        assert_eq!(base("docker://localhost/a/b"), "http://localhost");
        assert_eq!(base("docker://quay.io/a/b"), "https://quay.io");
        assert_eq!(base("docker:///a/b"), "https://registry-1.docker.io");
    }
}
