//! Image sources that lie: a registry and a web server on 127.0.0.1 (tests/it/common/hostile.rs)
//! whose bodies run past what they declare, never end, or redirect; and image URIs whose
//! transport or pin is not good enough. Each fetch must stop at its bound, the error must
//! say why, and nothing may be started.

use crate::common::hostile::{HostileServer, Reply, TlsServer};
use crate::common::servers::Registry;
use crate::common::{self, images, Bed};
use kurma_model::image::oci::{Descriptor, MEDIA_CONFIG, MEDIA_LAYER_TAR, MEDIA_MANIFEST};
use kurma_model::image::MAX_DOCUMENT_BYTES;
use kurma_net::fetch::{FetchError, Fetcher};
use kurma_net::registry;
use kurma_net::source::{ImageSource, PullError};
use kurma_net::{FetchLimits, Host, HostOptions, NetworkConfig};
use serde_json::json;

const PREFIX: &str = "kmt";
const MIB: u64 = 1 << 20;

/// A host side with a fresh state directory and `limits`; fetch failures start nothing,
/// so no namespace is needed.
fn host_for(tmp: &tempfile::TempDir, aci: &str, limits: FetchLimits) -> Host {
    let mut options = HostOptions::new(tmp.path().join("state"));
    options.container_prefix = format!("{PREFIX}-src");
    options.fetch_limits = limits;
    let config = json!({ "container_networks": [{ "name": "hostile", "aci": aci }] });
    Host::new(NetworkConfig::from_value(&config).unwrap(), options).unwrap()
}

fn start_error(host: &Host) -> String {
    let err = host.start_plugins().unwrap_err().to_string();
    assert!(!host.plugin_rootfs("hostile").exists(), "a bundle was left: {err}");
    assert_eq!(host.plugin_status("hostile"), None);
    err
}

/// A registry serving one image under `/v2/kmt/<repo>/`: a real config, and a layer
/// declared as 10 bytes whose blob is answered by `layer`.
fn lying_registry(layer_size: u64, layer: impl Fn() -> Reply + Send + Sync + 'static) -> HostileServer {
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let config_desc = Descriptor::of(MEDIA_CONFIG, &config);
    let mut layer_desc = Descriptor::of(MEDIA_LAYER_TAR, b"0123456789");
    layer_desc.size = layer_size;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
        "config": config_desc.to_json(), "layers": [layer_desc.to_json()],
    }))
    .unwrap();
    let (config_path, layer_path) =
        (format!("/blobs/{}", config_desc.digest), format!("/blobs/{}", layer_desc.digest));
    HostileServer::start(move |path| {
        if path.ends_with("/manifests/1") {
            Reply::ok(manifest.clone()).header("Content-Type", MEDIA_MANIFEST)
        } else if path.ends_with(&config_path) {
            Reply::ok(config.clone())
        } else if path.ends_with(&layer_path) {
            layer()
        } else {
            Reply::not_found()
        }
    })
}

#[test]
fn a_layer_longer_than_its_descriptor_is_cut_off_at_the_declared_size() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    // No Content-Length: the body ends when the server closes, 300 MiB later.
    let server = lying_registry(10, || Reply::stream(b"", 300 * MIB));
    let host =
        host_for(&tmp, &format!("docker://127.0.0.1:{}/kmt/endless:1", server.port), FetchLimits::default());
    let err = start_error(&host);
    assert!(err.contains("the body is longer than the 10 bytes its descriptor declares"), "{err}");
    // The client hung up at 11 bytes; what the server got out is what the socket buffers
    // took before it noticed, not the 300 MiB.
    let sent = server.sent_when_idle();
    assert!(sent < 32 * MIB, "the client took {sent} bytes of a 10-byte layer");

    // A Content-Length above the descriptor's size is refused before any of it is read.
    let server = lying_registry(10, || Reply::declaring(300 * MIB, 300 * MIB));
    let host =
        host_for(&tmp, &format!("docker://127.0.0.1:{}/kmt/declared:1", server.port), FetchLimits::default());
    let err = start_error(&host);
    assert!(
        err.contains("declares 314572800 bytes, more than the 10 bytes its descriptor declares"),
        "{err}"
    );
    assert!(server.sent_when_idle() < 32 * MIB);
}

#[test]
fn a_manifest_declaring_more_than_the_image_cap_fetches_no_blob() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let server = lying_registry(2 << 30, || Reply::stream(b"", 300 * MIB));
    let host =
        host_for(&tmp, &format!("docker://127.0.0.1:{}/kmt/huge:1", server.port), FetchLimits::default());
    let err = start_error(&host);
    assert!(err.contains("more than the limit of 1073741824 bytes"), "{err}");
    assert!(!server.requests().iter().any(|p| p.contains("/blobs/")), "{:?}", server.requests());
}

#[test]
fn an_endless_manifest_is_cut_off_at_the_document_cap() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    // "Endless" within reason: 64 MiB, sixteen times the cap, with no length.
    let server = HostileServer::start(|path| {
        if path.contains("/manifests/") {
            Reply::stream(br#"{"schemaVersion":2,"padding":""#, 64 * MIB)
        } else {
            Reply::not_found()
        }
    });
    let host =
        host_for(&tmp, &format!("docker://127.0.0.1:{}/kmt/manifest:1", server.port), FetchLimits::default());
    let err = start_error(&host);
    assert!(
        err.contains(&format!("the body is longer than the limit of {MAX_DOCUMENT_BYTES} bytes")),
        "{err}"
    );
    let sent = server.sent_when_idle();
    assert!(sent < 48 * MIB, "the client read {sent} bytes of an endless manifest");
}

#[test]
fn an_http_image_is_bounded_by_the_image_cap() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    // The production cap is 1 GiB; the same code with a 1 MiB cap plays it in a moment.
    let limits = FetchLimits { image: MIB, ..FetchLimits::default() };
    let server = HostileServer::start(|path| match path {
        "/endless.aci" => Reply::stream(b"", 64 * MIB),
        "/declared.aci" => Reply::declaring(2 * MIB, 2 * MIB),
        _ => Reply::not_found(),
    });
    let err = start_error(&host_for(&tmp, &server.url("/endless.aci"), limits));
    assert!(err.contains("the body is longer than the limit of 1048576 bytes"), "{err}");
    assert!(server.sent_when_idle() < 48 * MIB);
    let err = start_error(&host_for(&tmp, &server.url("/declared.aci"), limits));
    assert!(err.contains("declares 2097152 bytes, more than the limit of 1048576 bytes"), "{err}");
}

#[test]
fn a_redirect_to_another_scheme_is_not_followed() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let server = HostileServer::start(|path| match path {
        "/image.aci" => Reply::redirect("file:///etc/shadow"),
        "/loop.aci" => Reply::redirect("/loop.aci"),
        _ => Reply::not_found(),
    });
    let err = start_error(&host_for(&tmp, &server.url("/image.aci"), FetchLimits::default()));
    assert!(err.contains("refusing the redirect to a file: URL"), "{err}");
    let err = start_error(&host_for(&tmp, &server.url("/loop.aci"), FetchLimits::default()));
    assert!(err.contains("more than 5 redirects"), "{err}");
}

#[test]
fn a_redirect_from_https_to_plain_http_is_refused() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let plain = HostileServer::start(|_| Reply::ok(b"an image nobody authenticated".to_vec()));
    let redirect = format!(
        "HTTP/1.1 302 Found\r\nLocation: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        plain.url("/image.aci")
    );
    let tls = TlsServer::start(tmp.path(), &redirect);
    let mut options = HostOptions::new(tmp.path().join("state"));
    options.container_prefix = format!("{PREFIX}-tls");
    options.ca_file = Some(tls.ca.clone());
    let aci = format!("https://127.0.0.1:{}/image.aci", tls.port);
    let config = json!({ "container_networks": [{ "name": "hostile", "aci": aci }] });
    let host = Host::new(NetworkConfig::from_value(&config).unwrap(), options).unwrap();
    let err = start_error(&host);
    assert!(err.contains("refusing the redirect from https to plain http"), "{err}");
    assert!(plain.requests().is_empty(), "the plain http server was asked: {:?}", plain.requests());
}

/// Where a hop off this machine would go: 192.0.2.1 is TEST-NET-1 (RFC 5737), an address
/// nothing may answer on. The assertions prove the hop was refused by rule, before any
/// connection (a connection attempt would fail with a network error instead).
const OFF_MACHINE: &str = "http://192.0.2.1:5000";

#[test]
fn a_loopback_server_cannot_redirect_plain_http_off_the_machine() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    // An unpinned image: the second loopback hop is fine, the third leaves the machine.
    let second = HostileServer::start(|_| Reply::redirect(&format!("{OFF_MACHINE}/image.aci")));
    let second_url = second.url("/image.aci");
    let first = HostileServer::start(move |_| Reply::redirect(&second_url));
    let err = start_error(&host_for(&tmp, &first.url("/image.aci"), FetchLimits::default()));
    assert!(
        err.contains(&format!("refusing plain http to another machine ({OFF_MACHINE}/image.aci)")),
        "{err}"
    );
    assert_eq!(second.requests().len(), 1, "{:?}", second.requests());

    // A manifest by tag from a loopback registry: only its transport vouches for it.
    let registry = HostileServer::start(|path| {
        Reply::redirect(&format!("{OFF_MACHINE}{path}")).header("Content-Type", "text/plain")
    });
    let host =
        host_for(&tmp, &format!("docker://127.0.0.1:{}/kmt/tagged:1", registry.port), FetchLimits::default());
    let err = start_error(&host);
    assert!(
        err.contains(
            "refusing plain http to another machine (http://192.0.2.1:5000/v2/kmt/tagged/manifests/1)"
        ),
        "{err}"
    );
}

/// The shell netplugin as an ACI, its bytes and its sha256.
fn shell_aci(dir: &std::path::Path) -> (Vec<u8>, String) {
    let scripts = images::Scripts {
        setup: common::scripts::shell_setup(),
        add: common::scripts::shell_add(),
        del: common::scripts::shell_del(),
    };
    images::write_both(dir, "shell", "kmt/shell-netplugin", &images::shell_rootfs(&scripts));
    let bytes = std::fs::read(dir.join("shell.aci")).unwrap();
    let hex = kurma_model::image::sha256_hex(&bytes);
    (bytes, hex)
}

#[test]
fn an_http_image_must_match_its_pin() {
    let bed = Bed::with_prefix(PREFIX);
    let (aci, hex) = shell_aci(bed.tmp.path());
    let server = HostileServer::start(move |path| match path {
        "/shell.aci" => Reply::ok(aci.clone()),
        "/swapped.aci" => Reply::ok(b"an image someone put in its place".to_vec()),
        _ => Reply::not_found(),
    });
    let entry = |path: &str| {
        let uri = format!("{}#sha256={hex}", server.url(path));
        json!({ "container_networks": [common::mynet_entry("pinned", &uri, "kmt-br-p", "10.211.1")] })
    };
    let host = bed.host(&entry("/swapped.aci"));
    let err = host.start_plugins().unwrap_err().to_string();
    assert!(err.contains(&format!("the URI pins sha256:{hex}")), "{err}");
    assert_eq!(host.plugin_status("pinned"), None);
    assert!(!host.plugin_rootfs("pinned").exists());
    // The image it pins is fetched, unpacked and started.
    let host = bed.host(&entry("/shell.aci"));
    host.start_plugins().unwrap();
    assert_eq!(host.plugin_status("pinned").as_deref(), Some("created"));
    host.stop_plugins().unwrap();
}

#[test]
fn plain_http_from_another_machine_needs_a_pin_and_127_prefixed_names_are_not_loopback() {
    let config = |aci: &str| {
        NetworkConfig::from_value(&json!({ "container_networks": [{ "name": "n", "aci": aci }] }))
    };
    for aci in ["http://images.example/lo.aci", "http://127.0.0.1.example.invalid/lo.aci"] {
        let err = config(aci).unwrap_err().to_string();
        assert!(err.contains("must be pinned: add #sha256="), "{aci}: {err}");
    }
    let hex = "0".repeat(64);
    config(&format!("http://images.example/lo.aci#sha256={hex}")).unwrap();
    config("https://images.example/lo.aci").unwrap();
    config("http://127.0.0.1:8080/lo.aci").unwrap();

    // A registry whose name only starts with "127." is spoken to over https.
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let err = start_error(&host_for(
        &tmp,
        "docker://127.0.0.1.example.invalid:5000/kmt/x:1",
        FetchLimits::default(),
    ));
    assert!(err.contains("GET https://127.0.0.1.example.invalid:5000/v2/kmt/x/manifests/1"), "{err}");
}

/// `--ca-file` adds a private CA to the web's roots: an https registry whose certificate
/// that CA signed is trusted with it, and refused without it. The registry listens on a
/// non-loopback address (only loopback registries are spoken to over plain HTTP), inside
/// a namespace of the test's own.
#[test]
fn a_registry_signed_by_the_ca_file_is_trusted_and_refused_without_it() {
    cni_testkit::ns::require_root();
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let ns = cni_testkit::ns::TestNetns::with_prefix(PREFIX).unwrap();
    let ip = "10.213.7.1";
    for args in [&["link", "set", "lo", "up"][..], &["addr", "add", &format!("{ip}/32"), "dev", "lo"]] {
        assert!(ns.command("ip").args(args).status().unwrap().success(), "ip {args:?}");
    }
    let cert = common::tls::TestCert::issue(tmp.path(), ip);
    let registry = Registry::start_tls(&tmp.path().join("registry"), &ns, ip, &cert);
    let rootfs = images::shell_rootfs(&images::Scripts {
        setup: "#!/bin/sh\n".into(),
        add: "#!/bin/sh\n".into(),
        del: "#!/bin/sh\n".into(),
    });
    let blobs = images::write_both(tmp.path(), "shell", "kmt/shell", &rootfs);
    let ImageSource::Docker(image) = ImageSource::parse(&format!("docker://{ip}:5000/kmt/shell:1")).unwrap()
    else {
        panic!("a docker:// reference")
    };
    assert!(image.base_url().starts_with("https://"), "{}", image.base_url());
    let pull = |ca_file: Option<&std::path::Path>, layout: &str| {
        let fetcher = Fetcher::new(FetchLimits::default(), ca_file).unwrap();
        let layout = tmp.path().join(layout);
        ns.run(|| registry::pull(&fetcher, &image, &layout)).unwrap().map(|()| layout)
    };
    ns.run(|| registry.push_archive("kmt/shell", "1", &tmp.path().join("shell.oci.tar"))).unwrap();

    let err = pull(None, "untrusted").unwrap_err();
    assert!(matches!(err, PullError::Fetch(FetchError::Request { .. })), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");

    let layout = pull(Some(&cert.ca), "trusted").unwrap();
    let layer = &blobs.layer.0.digest;
    assert!(layout.join(layer.blob_path()).is_file(), "the layer {layer} was not pulled");
}
