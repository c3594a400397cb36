//! A small Docker registry (v2 API) client: fetches an image's manifest and blobs by
//! digest into a blob directory laid out like an OCI image layout's (`sha256/<hex>`), for
//! [`crate::image::unpack_blobs`]. Anonymous bearer tokens (Docker Hub) are handled.

use std::cell::RefCell;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::image::{blob_path, choose_manifest, verify_digest};
use crate::source::DockerRef;

/// The manifest types accepted, most specific first.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

struct Registry<'a> {
    agent: &'a ureq::Agent,
    image: &'a DockerRef,
    token: RefCell<Option<String>>,
}

/// Pulls `image` into `blobs` and returns its (verified) image manifest.
pub fn pull(agent: &ureq::Agent, image: &DockerRef, blobs: &Path) -> Result<Value, String> {
    std::fs::create_dir_all(blobs.join("sha256")).map_err(|err| format!("{}: {err}", blobs.display()))?;
    let registry = Registry { agent, image, token: RefCell::new(None) };
    let top = registry.manifest(&image.reference)?;
    let manifest = choose_manifest(&top, &|digest| registry.manifest(digest))?;
    let mut digests: Vec<&str> = Vec::new();
    if let Some(config) = manifest.get("config").and_then(|c| c.get("digest")).and_then(Value::as_str) {
        digests.push(config);
    }
    for layer in manifest.get("layers").and_then(Value::as_array).into_iter().flatten() {
        digests.push(layer.get("digest").and_then(Value::as_str).ok_or("a layer has no \"digest\"")?);
    }
    for digest in digests {
        let path = blob_path(blobs, digest)?;
        let url = format!("{}/v2/{}/blobs/{digest}", image.base_url(), image.repository);
        let response =
            registry.with_auth(|token| authorized(agent.get(&url), token).call().map_err(Box::new))?;
        let mut file = std::fs::File::create(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        std::io::copy(&mut response.into_reader(), &mut file).map_err(|err| format!("GET {url}: {err}"))?;
        verify_digest(&path, digest)?;
    }
    Ok(manifest)
}

fn authorized(request: ureq::Request, token: Option<&str>) -> ureq::Request {
    match token {
        Some(token) => request.set("Authorization", &format!("Bearer {token}")),
        None => request,
    }
}

impl Registry<'_> {
    /// The manifest (or index) for a tag or digest; a digest reference is checked against
    /// the body, a tag against the registry's `Docker-Content-Digest` when it sends one.
    fn manifest(&self, reference: &str) -> Result<Value, String> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.image.base_url(), self.image.repository);
        let response = self.with_auth(|token| {
            authorized(self.agent.get(&url).set("Accept", MANIFEST_ACCEPT), token).call().map_err(Box::new)
        })?;
        let header_digest = response.header("Docker-Content-Digest").map(str::to_string);
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut response.into_reader(), &mut body)
            .map_err(|err| format!("GET {url}: {err}"))?;
        let actual = format!("sha256:{:x}", Sha256::digest(&body));
        let expected =
            if reference.starts_with("sha256:") { Some(reference.to_string()) } else { header_digest };
        if let Some(expected) = expected {
            if expected.starts_with("sha256:") && expected != actual {
                return Err(format!(
                    "manifest {reference}: digest mismatch, expected {expected}, content hashes to {actual}"
                ));
            }
        }
        serde_json::from_slice(&body).map_err(|err| format!("manifest {reference}: not JSON: {err}"))
    }

    /// Runs `call`; on a 401 with a bearer challenge, fetches an anonymous token and
    /// runs it again.
    fn with_auth(
        &self,
        call: impl Fn(Option<&str>) -> Result<ureq::Response, Box<ureq::Error>>,
    ) -> Result<ureq::Response, String> {
        let first = call(self.token.borrow().as_deref());
        let challenge = match first {
            Ok(response) => return Ok(response),
            Err(err) => match *err {
                ureq::Error::Status(401, response) => response.header("WWW-Authenticate").map(str::to_string),
                err => return Err(err.to_string()),
            },
        };
        let challenge = challenge.ok_or("the registry answered 401 without a WWW-Authenticate challenge")?;
        let token = self.fetch_token(&challenge)?;
        *self.token.borrow_mut() = Some(token);
        call(self.token.borrow().as_deref()).map_err(|err| err.to_string())
    }

    fn fetch_token(&self, challenge: &str) -> Result<String, String> {
        let params = challenge
            .strip_prefix("Bearer ")
            .ok_or_else(|| format!("unsupported auth challenge {challenge:?}"))?;
        let mut realm = None;
        let mut query = Vec::new();
        for part in params.split(',') {
            let Some((key, value)) = part.trim().split_once('=') else { continue };
            let value = value.trim_matches('"');
            match key {
                "realm" => realm = Some(value.to_string()),
                "service" | "scope" => query.push((key.to_string(), value.to_string())),
                _ => {}
            }
        }
        let realm = realm.ok_or("the auth challenge has no realm")?;
        let mut request = self.agent.get(&realm);
        for (key, value) in &query {
            request = request.query(key, value);
        }
        let response = request.call().map_err(|err| format!("token from {realm}: {err}"))?;
        let body: Value = serde_json::from_reader(response.into_reader())
            .map_err(|err| format!("token from {realm}: {err}"))?;
        body.get("token")
            .or_else(|| body.get("access_token"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("token from {realm}: no \"token\" in the answer"))
    }
}
