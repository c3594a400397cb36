//! Writing and reading both formats, digest checks, and refusing hostile archives.

use crate::image::oci::*;
use crate::image::{aci, tree::Tree, ImageError};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn sample() -> Tree {
    let mut tree = Tree::new();
    tree.file("opt/network/kurma-netplugin", 0o755, b"#!binary".to_vec());
    tree.symlink("opt/network/add", "kurma-netplugin");
    tree.dir("tmp", 0o1777);
    tree
}

const SPEC: ImageSpec = ImageSpec {
    tag: "latest",
    entrypoint: &["/opt/network/kurma-netplugin", "pause"],
    labels: &[("a", "b")],
    gzip_level: GZIP_BEST,
};

fn check_sample_rootfs(root: &Path) {
    let bin = root.join("opt/network/kurma-netplugin");
    assert_eq!(std::fs::read(&bin).unwrap(), b"#!binary");
    assert_eq!(std::fs::metadata(&bin).unwrap().permissions().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read_link(root.join("opt/network/add")).unwrap(), Path::new("kurma-netplugin"));
    assert_eq!(std::fs::metadata(root.join("tmp")).unwrap().permissions().mode() & 0o7777, 0o1777);
}

/// Every entry of a tar: (path, mtime, uid, gid, user name).
fn entries(bytes: &[u8]) -> Vec<(String, u64, u64, u64, String)> {
    let mut archive = tar::Archive::new(bytes);
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let h = e.header();
            let user = h.username().unwrap().unwrap_or_default().to_string();
            (
                e.path().unwrap().display().to_string(),
                h.mtime().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap(),
                user,
            )
        })
        .collect()
}

#[test]
fn an_aci_is_manifest_then_rootfs_in_order_and_unpacks_to_the_same_files() {
    let manifest = aci::manifest("cni-rs/test", &[("os", "linux"), ("arch", "amd64")], &["/x", "pause"]);
    let mut bytes = Vec::new();
    aci::write(&manifest, &sample(), 7, &mut bytes).unwrap();
    let mut again = Vec::new();
    aci::write(&manifest, &sample(), 7, &mut again).unwrap();
    assert_eq!(bytes, again, "the same inputs give the same bytes");
    let listed = entries(&bytes);
    let paths: Vec<&str> = listed.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        paths,
        [
            "manifest",
            "rootfs/",
            "rootfs/opt/",
            "rootfs/opt/network/",
            "rootfs/opt/network/add",
            "rootfs/opt/network/kurma-netplugin",
            "rootfs/tmp/"
        ]
    );
    assert!(listed.iter().all(|e| e.1 == 7 && e.2 == 0 && e.3 == 0 && e.4.is_empty()), "{listed:?}");

    let dir = tempfile::tempdir().unwrap();
    let read = aci::unpack(bytes.as_slice(), dir.path()).unwrap();
    assert_eq!(read, manifest);
    assert_eq!(read["labels"][0], serde_json::json!({"name": "os", "value": "linux"}));
    assert_eq!(aci::exec(&read), ["/x", "pause"]);
    check_sample_rootfs(&dir.path().join("rootfs"));
}

#[test]
fn an_oci_archive_has_correct_digests_and_unpacks_to_the_same_files() {
    let mut bytes = Vec::new();
    let blobs = write_archive(&SPEC, &sample(), 0, &mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let image = unpack_archive(bytes.as_slice(), &layout, Some("latest")).unwrap();
    assert_eq!(image.manifest_descriptor, blobs.manifest.0);
    assert_eq!(image.layers, vec![blobs.layer.0.clone()]);
    assert_eq!(image.layers[0].media_type, MEDIA_LAYER_GZIP);
    assert_eq!(image.command(), ["/opt/network/kurma-netplugin", "pause"]);
    // The config names the uncompressed layer's digest.
    let diff_id = image.config["rootfs"]["diff_ids"][0].as_str().unwrap();
    assert_eq!(diff_id, Digest::of(&sample().to_tar(0)).to_string());
    for (desc, content) in [&blobs.config, &blobs.layer, &blobs.manifest] {
        assert_eq!(desc.digest.hex(), crate::image::sha256_hex(content));
        verify_blob(&layout.join(desc.digest.blob_path()), desc).unwrap();
    }
    let rootfs = dir.path().join("rootfs");
    unpack_rootfs(&image, &rootfs).unwrap();
    check_sample_rootfs(&rootfs);
    assert!(
        matches!(read_layout(&layout, Some("v9")), Err(ImageError::Format(m)) if m.contains("no image tagged \"v9\""))
    );
}

#[test]
fn a_changed_blob_is_refused_before_use() {
    let mut bytes = Vec::new();
    let blobs = write_archive(&SPEC, &sample(), 0, &mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let image = unpack_archive(bytes.as_slice(), &layout, None).unwrap();
    let layer_path = layout.join(blobs.layer.0.digest.blob_path());
    let mut layer = std::fs::read(&layer_path).unwrap();
    let last = layer.len() - 1;
    layer[last] ^= 1;
    std::fs::write(&layer_path, &layer).unwrap();
    let rootfs = dir.path().join("rootfs");
    let err = unpack_rootfs(&image, &rootfs).unwrap_err();
    assert!(
        matches!(&err, ImageError::Digest { reason, .. } if reason.contains("the content's digest is")),
        "{err}"
    );
    assert!(!rootfs.join("opt").exists(), "nothing of a bad layer is applied");
    // A changed config is caught when the layout is read.
    let config_path = layout.join(blobs.config.0.digest.blob_path());
    std::fs::write(&config_path, b"{}").unwrap();
    assert!(matches!(read_layout(&layout, None), Err(ImageError::Digest { .. })));
}

#[test]
fn digests_are_strict() {
    assert!(Digest::parse(&format!("sha256:{}", "a".repeat(64))).is_ok());
    for bad in ["sha256:../../etc/passwd", "sha512:abc", &format!("sha256:{}", "A".repeat(64)), "sha256:"] {
        assert!(Digest::parse(bad).is_err(), "{bad}");
    }
}

fn tar_of(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, data, link) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        // set_path refuses `..`; write the raw name as a hostile archive would.
        let name = &mut header.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(target) = link {
            header.set_link_name(target).unwrap();
        }
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

#[test]
fn hostile_archives_write_nothing_outside() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest");
    let escape = tar_of(&[
        ("manifest", tar::EntryType::Regular, b"{}", None),
        ("rootfs/../../evil", tar::EntryType::Regular, b"x", None),
    ]);
    assert!(aci::unpack(escape.as_slice(), &dest).is_err());
    assert!(!dir.path().join("evil").exists());
    let stray = tar_of(&[("etc/passwd", tar::EntryType::Regular, b"x", None)]);
    let err = aci::unpack(stray.as_slice(), &dest).unwrap_err();
    assert!(err.to_string().contains("neither manifest nor below rootfs/"), "{err}");
    // A symlink to outside, then a file through it.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let through = tar_of(&[
        ("link", tar::EntryType::Symlink, b"", Some(outside.to_str().unwrap())),
        ("link/planted", tar::EntryType::Regular, b"x", None),
    ]);
    let rootfs = dir.path().join("rootfs");
    assert!(apply_layer(through.as_slice(), MEDIA_LAYER_TAR, &rootfs).is_err());
    assert!(!outside.join("planted").exists());
}

#[test]
fn whiteouts_remove_what_lower_layers_had() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path();
    let mut lower = Tree::new();
    lower.file("a/keep", 0o644, b"1".to_vec()).file("a/gone", 0o644, b"2".to_vec()).file(
        "b/x",
        0o644,
        b"3".to_vec(),
    );
    apply_layer(lower.to_tar(0).as_slice(), MEDIA_LAYER_TAR, rootfs).unwrap();
    let mut upper = Tree::new();
    upper.file("a/.wh.gone", 0o644, Vec::new()).file("b/.wh..wh..opq", 0o644, Vec::new()).file(
        "b/new",
        0o644,
        b"4".to_vec(),
    );
    apply_layer(upper.to_tar(0).as_slice(), MEDIA_LAYER_TAR, rootfs).unwrap();
    assert!(rootfs.join("a/keep").exists());
    assert!(!rootfs.join("a/gone").exists() && !rootfs.join("a/.wh.gone").exists());
    assert!(!rootfs.join("b/x").exists() && rootfs.join("b/new").exists());
    assert!(apply_layer(&b""[..], "application/vnd.oci.image.layer.v1.tar+zstd", rootfs).is_err());
}

#[test]
fn an_image_file_of_either_format_plain_or_gzip_is_told_apart_and_unpacked() {
    use crate::image::{kind_of, unpack_file, ImageKind};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let manifest = aci::manifest("cni-rs/test", &[], &["/x"]);
    let mut aci_bytes = Vec::new();
    aci::write(&manifest, &sample(), 0, &mut aci_bytes).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&aci_bytes).unwrap();
    let mut oci_bytes = Vec::new();
    write_archive(&SPEC, &sample(), 0, &mut oci_bytes).unwrap();
    let cases = [("a.aci", aci_bytes, ImageKind::Aci), ("a.aci.gz", gz.finish().unwrap(), ImageKind::Aci)];
    for (name, bytes, kind) in cases.into_iter().chain([("a.oci.tar", oci_bytes, ImageKind::Oci)]) {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(kind_of(&path).unwrap(), kind, "{name}");
        let rootfs = dir.path().join(format!("{name}-root/rootfs"));
        assert_eq!(unpack_file(&path, &dir.path().join(format!("{name}-scratch")), &rootfs).unwrap(), kind);
        check_sample_rootfs(&rootfs);
    }
    let mut other = Tree::new();
    other.file("etc/hostname", 0o644, b"x".to_vec());
    let path = dir.path().join("other.tar");
    std::fs::write(&path, other.to_tar(0)).unwrap();
    let err = kind_of(&path).unwrap_err().to_string();
    assert!(err.contains("neither an ACI") && err.contains("other.tar"), "{err}");
}

/// A tar of one layer whose entries have the given (path, mode, uid) and kind.
fn owned_tar(entries: &[(&str, tar::EntryType, u32, u64)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, mode, uid) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(*kind);
        header.set_mode(*mode);
        header.set_uid(*uid);
        header.set_gid(*uid);
        let data: &[u8] = if *kind == tar::EntryType::Regular { b"#!/bin/sh\n" } else { b"" };
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, path, data).unwrap();
    }
    builder.into_inner().unwrap()
}

#[test]
fn whiteouts_of_dot_dotdot_or_nothing_are_refused_and_remove_nothing() {
    // `.wh...` names `..`: applied as a whiteout it removed the rootfs's parent.
    for name in [".wh...", ".wh..", ".wh.", "sub/.wh...", ".wh..wh.plnk"] {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("bundle");
        let rootfs = parent.join("rootfs");
        std::fs::create_dir_all(rootfs.join("sub")).unwrap();
        std::fs::write(parent.join("config.json"), "precious").unwrap();
        std::fs::write(rootfs.join("sub/file"), "kept").unwrap();
        let layer = tar_of(&[(name, tar::EntryType::Regular, b"", None)]);
        let err = apply_layer(layer.as_slice(), MEDIA_LAYER_TAR, &rootfs).unwrap_err();
        assert!(err.to_string().contains(&format!("entry {name:?}")), "{name}: {err}");
        assert_eq!(std::fs::read(parent.join("config.json")).unwrap(), b"precious", "{name}");
        assert_eq!(std::fs::read(rootfs.join("sub/file")).unwrap(), b"kept", "{name}");
    }
    // An ACI has no whiteouts: the same names are refused there by the same check.
    let dir = tempfile::tempdir().unwrap();
    let aci = tar_of(&[
        ("manifest", tar::EntryType::Regular, b"{}", None),
        ("rootfs/.wh...", tar::EntryType::Regular, b"", None),
    ]);
    let err = aci::unpack(aci.as_slice(), &dir.path().join("dest")).unwrap_err();
    assert!(err.to_string().contains("rootfs/.wh..."), "{err}");
}

#[test]
fn unpacked_files_are_the_unpackers_and_lose_setuid_and_setgid() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let layer = owned_tar(&[
        ("opt/network", tar::EntryType::Directory, 0o2777, 65534),
        ("opt/network/add", tar::EntryType::Regular, 0o4755, 65534),
        ("usr/bin/su", tar::EntryType::Regular, 0o6755, 0),
        ("tmp", tar::EntryType::Directory, 0o1777, 0),
    ]);
    // The test's own temporary directory is owned by whoever runs it: the unpacker.
    let ours = std::fs::metadata(dir.path()).unwrap();
    let (me, my_group) = (ours.uid(), ours.gid());
    let check = |root: &Path| {
        for (path, mode) in
            [("opt/network", 0o777), ("opt/network/add", 0o755), ("usr/bin/su", 0o755), ("tmp", 0o1777)]
        {
            let meta = std::fs::symlink_metadata(root.join(path)).unwrap();
            assert_eq!(meta.mode() & 0o7777, mode, "{path}: setuid/setgid stripped, the rest kept");
            assert_eq!((meta.uid(), meta.gid()), (me, my_group), "{path}: owned by the unpacker");
        }
    };
    let rootfs = dir.path().join("oci");
    std::fs::create_dir(&rootfs).unwrap();
    apply_layer(layer.as_slice(), MEDIA_LAYER_TAR, &rootfs).unwrap();
    check(&rootfs);
    // The ACI path is the same unpacker.
    let mut aci_tar = tar::Builder::new(Vec::new());
    let manifest = serde_json::to_vec(&aci::manifest("t/x", &[], &[])).unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_size(manifest.len() as u64);
    header.set_mode(0o644);
    aci_tar.append_data(&mut header, "manifest", manifest.as_slice()).unwrap();
    let mut archive = tar::Archive::new(layer.as_slice());
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let mut header = entry.header().clone();
        let path = format!("rootfs/{}", entry.path().unwrap().display());
        aci_tar.append_data(&mut header, path, entry).unwrap();
    }
    let bytes = aci_tar.into_inner().unwrap();
    let dest = dir.path().join("aci");
    aci::unpack(bytes.as_slice(), &dest).unwrap();
    check(&dest.join("rootfs"));
}
