//! The netplugin images: the same bytes when built twice, the files each holds, and both
//! formats readable by the host side's functions (digests checked).

use crate::common::{build_images, inputs, PREFIX};
use kurma_model::image::{aci, oci};
use std::collections::BTreeSet;
use std::path::Path;

/// Every path below `root` with its kind (`d`, `f`, `l -> target`), sorted.
fn listing(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                found.insert(format!("{rel} -> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                found.insert(format!("{rel}/"));
                stack.push(path);
            } else {
                found.insert(rel);
            }
        }
    }
    found
}

fn expected(plugins: &[&str], own_binaries: &[&str], defaults: bool) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = [
        "dev/",
        "proc/",
        "sys/",
        "run/",
        "tmp/",
        "var/",
        "var/lib/",
        "var/lib/kurma-netplugin/",
        "opt/",
        "opt/cni/",
        "opt/cni/bin/",
        "opt/cni/bin/cni-plugins",
        "opt/network/",
        "opt/network/kurma-netplugin",
        "opt/network/setup -> kurma-netplugin",
        "opt/network/add -> kurma-netplugin",
        "opt/network/del -> kurma-netplugin",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    paths.extend(plugins.iter().map(|p| format!("opt/cni/bin/{p} -> cni-plugins")));
    // Plugins with a binary of their own are files beside the multi-call binary.
    paths.extend(own_binaries.iter().map(|p| format!("opt/cni/bin/{p}")));
    if defaults {
        paths.insert("opt/network/defaults.json".into());
    }
    paths
}

#[test]
fn images_are_reproducible_hold_only_our_files_and_read_back_in_both_formats() {
    let dir = tempfile::Builder::new().prefix(PREFIX).tempdir().unwrap();
    let first = build_images(&dir.path().join("a"));
    let second = build_images(&dir.path().join("b"));
    let names: Vec<String> =
        first.iter().map(|w| w.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["cni-netplugin.aci", "cni-netplugin.oci.tar", "lo-netplugin.aci", "lo-netplugin.oci.tar"]
    );
    let sums =
        |w: &[kurma_model::image::build::Written]| w.iter().map(|w| w.sha256.clone()).collect::<Vec<_>>();
    assert_eq!(sums(&first), sums(&second), "two builds gave different bytes");
    let sums_file = std::fs::read_to_string(dir.path().join("a/SHA256SUMS")).unwrap();
    for (name, w) in names.iter().zip(&first) {
        assert!(sums_file.contains(&format!("{}  {name}", w.sha256)), "{sums_file}");
        assert_eq!(w.sha256, kurma_model::image::sha256_hex(&std::fs::read(&w.path).unwrap()));
    }

    let (_, _, plugin_names) = inputs();
    let all: Vec<&str> = plugin_names.iter().map(String::as_str).collect();
    for (image, plugins, own_binaries, defaults) in [
        ("cni-netplugin", all.clone(), vec!["dhcp"], false),
        ("lo-netplugin", vec!["loopback"], vec![], true),
    ] {
        let out = dir.path().join("a");
        let aci_dir = dir.path().join(format!("{image}-aci"));
        let manifest =
            aci::unpack(std::fs::File::open(out.join(format!("{image}.aci"))).unwrap(), &aci_dir).unwrap();
        assert_eq!(manifest["name"], format!("cni-rs/{image}"));
        assert_eq!(manifest["labels"][1], serde_json::json!({"name": "os", "value": "linux"}));
        assert_eq!(manifest["labels"][2], serde_json::json!({"name": "arch", "value": "amd64"}));
        assert_eq!(aci::exec(&manifest), ["/opt/network/kurma-netplugin", "pause"]);
        assert_eq!(
            listing(&aci_dir.join("rootfs")),
            expected(&plugins, &own_binaries, defaults),
            "{image}.aci"
        );

        let oci_dir = dir.path().join(format!("{image}-oci"));
        let archive = std::fs::File::open(out.join(format!("{image}.oci.tar"))).unwrap();
        let read = oci::unpack_archive(archive, &oci_dir.join("layout"), Some("latest")).unwrap();
        assert_eq!(read.command(), ["/opt/network/kurma-netplugin", "pause"]);
        assert_eq!(read.config["os"], "linux");
        assert_eq!(read.config["architecture"], "amd64");
        oci::unpack_rootfs(&read, &oci_dir.join("rootfs")).unwrap();
        assert_eq!(
            listing(&oci_dir.join("rootfs")),
            expected(&plugins, &own_binaries, defaults),
            "{image}.oci.tar"
        );
        // Same file contents in both formats.
        for file in ["opt/cni/bin/cni-plugins", "opt/network/kurma-netplugin"] {
            let (a, b) = (
                std::fs::read(aci_dir.join("rootfs").join(file)),
                std::fs::read(oci_dir.join("rootfs").join(file)),
            );
            assert!(a.unwrap() == b.unwrap(), "{file} differs between the ACI and the OCI image of {image}");
        }
    }
}

#[test]
fn the_image_builder_keeps_the_command_line_conventions() {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_kurma-netplugin-images"));
    cni_testkit::cli::assert_conventions(binary, &[], "kurma-netplugin-images");
}
