//! A small Docker registry (v2 API) client: pulls an image's manifest and blobs by digest
//! into an OCI image layout directory, which [`kurma_model::image::oci`] then reads
//! and unpacks like any other layout (the same digest checks). Anonymous bearer tokens
//! (Docker Hub) are handled. The registry is not trusted: every body is bounded
//! ([`crate::fetch`]): a manifest, an index or a token answer by the document cap, a blob
//! by exactly its descriptor's size, and the image as a whole (config and layers, as the
//! manifest declares them) by the image cap before any blob is fetched.

use std::cell::RefCell;
use std::path::Path;

use url::Url;

use kurma_model::image::oci::{self, Descriptor, Digest};
use serde_json::{json, Value};

use crate::fetch::{self, Bound, Check, Fetcher};
use crate::source::{DockerRef, PullError};

/// The manifest types accepted, most specific first.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

struct Registry<'a> {
    fetcher: &'a Fetcher,
    image: &'a DockerRef,
    layout: &'a Path,
    token: RefCell<Option<String>>,
}

/// Pulls `image` into the OCI layout directory `layout` (`oci-layout`, `index.json`
/// naming the pulled manifest or index, `blobs/sha256/...`); every blob is checked
/// against its digest as it arrives, and again when the layout is read.
pub fn pull(fetcher: &Fetcher, image: &DockerRef, layout: &Path) -> Result<(), PullError> {
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(PullError::file(&blobs))?;
    let registry = Registry { fetcher, image, layout, token: RefCell::new(None) };
    let (top, mut doc) = registry.manifest(&image.reference)?;
    let index = json!({"schemaVersion": 2, "manifests": [top.to_json()]});
    write(&layout.join("index.json"), index.to_string().as_bytes())?;
    write(&layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    // An index (multi-platform image) is followed to our platform, as the layout reader
    // will follow it.
    for _ in 0..3 {
        let Some(manifests) = doc.get("manifests").and_then(Value::as_array) else { break };
        let chosen = Descriptor::from_json(oci::choose_manifest(manifests, None)?)?;
        doc = registry.manifest(&chosen.digest.to_string())?.1;
    }
    let config = doc.get("config").ok_or(PullError::ManifestField { field: "config" })?;
    let layers =
        doc.get("layers").and_then(Value::as_array).ok_or(PullError::ManifestField { field: "layers" })?;
    let blobs =
        std::iter::once(config).chain(layers).map(Descriptor::from_json).collect::<Result<Vec<_>, _>>()?;
    let declared = blobs.iter().fold(0u64, |sum, blob| sum.saturating_add(blob.size));
    if declared > fetcher.limits.image {
        return Err(PullError::TooLarge { declared, limit: fetcher.limits.image });
    }
    for blob in &blobs {
        registry.blob(blob)?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), PullError> {
    std::fs::write(path, bytes).map_err(PullError::file(path))
}

fn bearer(token: Option<&str>) -> Option<String> {
    token.map(|token| format!("Bearer {token}"))
}

impl Registry<'_> {
    /// The manifest (or index) for a tag or digest, stored as a blob of the layout, with
    /// its descriptor. A digest reference is checked against the body, a tag against the
    /// registry's `Docker-Content-Digest` when it sends one.
    fn manifest(&self, reference: &str) -> Result<(Descriptor, Value), PullError> {
        let url = format!("{}/v2/{}/manifests/{reference}", self.image.base_url(), self.image.repository);
        // A manifest by digest is checked against it; one by tag is only as good as its
        // transport (the registry's own Docker-Content-Digest comes over the same one).
        let check = if reference.starts_with("sha256:") { Check::Digest } else { Check::Transport };
        let response = self.with_auth(&url, &[("Accept", MANIFEST_ACCEPT)], check)?;
        let header_digest = fetch::header(&response, "Docker-Content-Digest").map(str::to_string);
        // A missing Content-Type counts as text, as HTTP says.
        let content_type = response.body().mime_type().unwrap_or("text/plain").to_string();
        let body =
            fetch::read_body(response, Bound::AtMost(self.fetcher.limits.document), &format!("GET {url}"))?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|reason| PullError::ManifestNotJson { reference: reference.to_string(), reason })?;
        let media_type = value.get("mediaType").and_then(Value::as_str).unwrap_or(&content_type);
        let descriptor = Descriptor::of(media_type, &body);
        let expected =
            if reference.starts_with("sha256:") { Some(reference) } else { header_digest.as_deref() };
        if let Some(expected) = expected.filter(|e| e.starts_with("sha256:")) {
            let refused = |reason| PullError::Manifest { reference: reference.to_string(), reason };
            let expected =
                Descriptor { digest: Digest::parse(expected).map_err(refused)?, ..descriptor.clone() };
            oci::verify_bytes(&body, &expected).map_err(refused)?;
        }
        write(&self.layout.join(descriptor.digest.blob_path()), &body)?;
        Ok((descriptor, value))
    }

    /// Downloads a blob into the layout and checks it against its descriptor.
    fn blob(&self, descriptor: &Descriptor) -> Result<(), PullError> {
        let path = self.layout.join(descriptor.digest.blob_path());
        let url =
            format!("{}/v2/{}/blobs/{}", self.image.base_url(), self.image.repository, descriptor.digest);
        let response = self.with_auth(&url, &[], Check::Digest)?;
        let mut file = std::fs::File::create(&path).map_err(PullError::file(&path))?;
        fetch::copy_body(response, Bound::Exactly(descriptor.size), &mut file, &format!("GET {url}"))?;
        Ok(oci::verify_blob(&path, descriptor)?)
    }

    /// GETs `url` with `headers` (and the token, once there is one); on a 401 with a
    /// bearer challenge, fetches an anonymous token and asks again. Fails unless the
    /// answer is a 2xx.
    fn with_auth(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        check: Check,
    ) -> Result<fetch::Response, PullError> {
        let call = |token: Option<String>| {
            let mut all = headers.to_vec();
            if let Some(value) = &token {
                all.push(("Authorization", value));
            }
            self.fetcher.get(url, &all, check)
        };
        let first = call(bearer(self.token.borrow().as_deref()))?;
        if first.status() != 401 {
            return Ok(fetch::check_status(url, first)?);
        }
        let challenge = fetch::header(&first, "WWW-Authenticate").ok_or(PullError::NoChallenge)?.to_string();
        let token = self.fetch_token(&challenge)?;
        *self.token.borrow_mut() = Some(token);
        Ok(fetch::check_status(url, call(bearer(self.token.borrow().as_deref()))?)?)
    }

    fn fetch_token(&self, challenge: &str) -> Result<String, PullError> {
        let params = challenge
            .strip_prefix("Bearer ")
            .ok_or_else(|| PullError::Challenge { challenge: challenge.to_string() })?;
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
        let realm = realm.ok_or(PullError::NoRealm)?;
        let mut realm_url =
            Url::parse(&realm).map_err(|reason| PullError::RealmNotAUrl { realm: realm.clone(), reason })?;
        // A token goes over https, or stays on this machine (the rule every hop follows).
        fetch::transport_allowed(&realm_url, Check::Transport)
            .map_err(|refused| PullError::RealmTransport { realm: realm.clone(), refused })?;
        realm_url.query_pairs_mut().extend_pairs(&query);
        let response = self.fetcher.get_ok(realm_url.as_str(), &[], Check::Transport)?;
        let body = fetch::read_body(
            response,
            Bound::AtMost(self.fetcher.limits.document),
            &format!("token from {realm}"),
        )?;
        let body: Value = serde_json::from_slice(&body)
            .map_err(|reason| PullError::TokenNotJson { realm: realm.clone(), reason })?;
        body.get("token")
            .or_else(|| body.get("access_token"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(PullError::NoToken { realm })
    }
}
