//! The `kurma-net` command: a restart of the host side between attach and detach, and bad
//! input that must start nothing.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{self, links_of, lo_and_mynet, reservations, setup_runs, Bed, ImageFiles, PREFIX};
use cni_testkit::ns::TestNetns;
use serde_json::{json, Value};

/// Runs `kurma-net` with the bed's state dir, host namespace and prefix.
fn kurma_net(bed: &Bed, config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kurma-net"))
        .arg("--state-dir")
        .arg(&bed.options.state_dir)
        .arg("--config")
        .arg(config)
        .arg("--host-netns")
        .arg(bed.options.host_netns.as_ref().unwrap())
        .args(["--prefix", &bed.options.container_prefix])
        .args(args)
        .output()
        .unwrap()
}

fn stdout_of(output: Output) -> String {
    assert!(output.status.success(), "kurma-net failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn write_config(bed: &Bed, config: &Value) -> std::path::PathBuf {
    let path = bed.tmp.path().join(format!("kurma-{:x}.json", config.to_string().len()));
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[test]
fn restart_between_attach_and_detach_reruns_setup_and_detach_works() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = lo_and_mynet(
        &images.file_uri("lo-net.aci"),
        &images.file_uri("mynet.oci.tar"),
        "kh-br-r",
        "10.209.40",
    );
    // A third network on the shell netplugin, whose setup counts its runs.
    let mut config = config;
    let probe = common::mynet_entry("probe", &images.file_uri("shell.aci"), "kh-br-rp", "10.209.41");
    config["container_networks"].as_array_mut().unwrap().push(probe);
    let config_path = write_config(&bed, &config);
    assert_eq!(
        stdout_of(kurma_net(&bed, &config_path, &["start-plugins"])),
        "lo: Started\nmynet: Started\nprobe: Started\n"
    );
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let netns = container.path().to_str().unwrap();
    let attached: Value =
        serde_json::from_str(&stdout_of(kurma_net(&bed, &config_path, &["attach", "kh-restart", netns])))
            .unwrap();
    assert_eq!(attached["networks"][1]["interface"], "eth0");
    assert_eq!(attached["networks"][2]["interface"], "eth1");
    assert_eq!(links_of(&container).len(), 3);

    // A new process of the host side: the plugin containers are re-adopted, setup runs again.
    assert_eq!(
        stdout_of(kurma_net(&bed, &config_path, &["start-plugins"])),
        "lo: Adopted\nmynet: Adopted\nprobe: Adopted\n"
    );
    let host = bed.host(&config);
    assert_eq!(setup_runs(&host, "probe"), 2);
    // The plugin containers vanish (as in a reboot) while the container stays attached:
    // new ones run on the old bundles, so mynet still knows the address it handed out.
    for network in ["lo", "mynet", "probe"] {
        let deleted = Command::new(&bed.options.runtime)
            .arg("--root")
            .arg(bed.options.state_dir.join("runtime"))
            .args(["delete", "--force", &host.container_id(network)])
            .status()
            .unwrap();
        assert!(deleted.success());
        assert_eq!(host.plugin_status(network), None);
    }
    assert_eq!(
        stdout_of(kurma_net(&bed, &config_path, &["start-plugins"])),
        "lo: Recreated\nmynet: Recreated\nprobe: Recreated\n"
    );
    assert_eq!(setup_runs(&host, "probe"), 3);
    assert_eq!(reservations(&host, "mynet").len(), 1);
    let status: Value = serde_json::from_str(&stdout_of(kurma_net(&bed, &config_path, &["status"]))).unwrap();
    assert_eq!(status["containers"][0]["uuid"], "kh-restart");
    assert_eq!(status["plugins"][1]["status"], "created");

    stdout_of(kurma_net(&bed, &config_path, &["detach", "kh-restart"]));
    assert_eq!(links_of(&container), ["lo"]);
    assert!(reservations(&host, "mynet").is_empty());
    stdout_of(kurma_net(&bed, &config_path, &["stop-plugins"]));
    assert_eq!(host.plugin_status("mynet"), None);
}

/// Nothing was started: no plugin container, no bundle.
fn assert_nothing_started(bed: &Bed) {
    let runtime = bed.options.state_dir.join("runtime");
    let containers: Vec<_> = std::fs::read_dir(&runtime).into_iter().flatten().flatten().collect();
    assert!(containers.is_empty(), "containers were created: {containers:?}");
    let plugins: Vec<_> = std::fs::read_dir(bed.options.state_dir.join("plugins"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("bundle").exists())
        .collect();
    assert!(plugins.is_empty(), "bundles were prepared: {plugins:?}");
}

#[test]
fn bad_input_is_a_clear_error_and_starts_nothing() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let lo = json!({ "name": "lo", "aci": images.file_uri("lo-net.aci") });
    let cases = [
        (json!([lo, { "aci": images.file_uri("shell.aci") }]), "container_networks[1]: \"name\" is missing"),
        (json!([lo, { "name": "mynet" }]), "container_networks[1] (\"mynet\"): \"aci\" is missing"),
        (json!([lo, lo]), "container_networks[1] (\"lo\"): the name is already used by container_networks[0]"),
        (
            json!([lo, { "name": "mynet", "aci": "ftp://example.com/x.aci" }]),
            "container_networks[1] (\"mynet\"): \"aci\": unknown URI scheme \"ftp\"",
        ),
        (
            json!([lo, { "name": "mynet", "aci": images.file_uri("shell.aci"), "containerInterface": "averyverylongname{n}" }]),
            "container_networks[1] (\"mynet\"): \"containerInterface\": template \"averyverylongname{n}\": renders \"averyverylongname0\", longer than 15 bytes",
        ),
        (
            json!([lo, { "name": "mynet", "aci": format!("file://{}/missing.aci", images.dir.display()) }]),
            "network \"mynet\": image file://",
        ),
    ];
    for (networks, expected) in cases {
        let config_path = write_config(&bed, &json!({ "container_networks": networks }));
        let output = kurma_net(&bed, &config_path, &["start-plugins"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{networks}: accepted");
        assert!(stderr.contains(expected), "{networks}: expected {expected:?} in {stderr:?}");
        assert_nothing_started(&bed);
    }
    // The missing image's error says what is missing.
    let config_path = write_config(
        &bed,
        &json!({ "container_networks": [lo, { "name": "mynet", "aci": format!("file://{}/missing.aci", images.dir.display()) }] }),
    );
    let stderr = String::from_utf8(kurma_net(&bed, &config_path, &["start-plugins"]).stderr).unwrap();
    assert!(stderr.contains("missing.aci: no such image file"), "{stderr}");
    // An image that is neither format, and one whose blob does not match its digest.
    std::fs::write(images.dir.join("junk.aci"), b"not a tar").unwrap();
    let mut oci = tar::Archive::new(std::fs::File::open(images.dir.join("shell.oci.tar")).unwrap());
    let tampered = images.dir.join("tampered");
    oci.unpack(&tampered).unwrap();
    std::fs::write(tampered.join("blobs/sha256").join(&images.shell_layer), b"tampered layer").unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_dir_all("", &tampered).unwrap();
    std::fs::write(images.dir.join("tampered.oci.tar"), builder.into_inner().unwrap()).unwrap();
    for (file, expected) in [("junk.aci", "junk.aci"), ("tampered.oci.tar", "blob sha256:")] {
        let config_path = write_config(
            &bed,
            &json!({ "container_networks": [lo, { "name": "mynet", "aci": images.file_uri(file) }] }),
        );
        let stderr = String::from_utf8(kurma_net(&bed, &config_path, &["start-plugins"]).stderr).unwrap();
        assert!(stderr.contains("network \"mynet\"") && stderr.contains(expected), "{file}: {stderr}");
        assert_nothing_started(&bed);
    }
}

#[test]
fn the_command_line_keeps_the_conventions() {
    cni_testkit::cli::assert_conventions(Path::new(env!("CARGO_BIN_EXE_kurma-net")), &[], "kurma-net");
}

#[test]
fn a_missing_required_flag_or_verb_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let binary = env!("CARGO_BIN_EXE_kurma-net");
    let refused = |args: &[&str], names: &str| {
        let output = Command::new(binary).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains(names), "{args:?}: {output:?}");
    };
    let state_arg = state.to_str().unwrap();
    refused(&["--config", "/nonexistent", "status"], "--state-dir");
    refused(&["--state-dir", state_arg, "status"], "--config");
    refused(&["--state-dir", state_arg, "--config", "/nonexistent"], "COMMAND");
    refused(
        &["--state-dir", state_arg, "--config", "/nonexistent", "--limit-secs", "1.5", "status"],
        "--limit-secs",
    );
    refused(&["--state-dir", state_arg, "--config", "/nonexistent", "detach"], "UUID");
    assert!(!state.exists(), "a refused call made the state directory");
}
