//! The state tree as another local user sees it: a hostile image ships a setuid-root
//! program and an `/opt/network/add` owned by an unprivileged uid; `nobody` must reach
//! neither (the tree is 0700), and neither keeps what the image asked for (files are
//! root's, setuid/setgid stripped). A state directory another user owns is refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::common::{self, images, mynet_entry, Bed};
use cni_testkit::unprivileged::{as_nobody, NOBODY};
use kurma_net::{Host, HostOptions, NetworkConfig};
use serde_json::json;

const PREFIX: &str = "kmt";

/// The shell netplugin as an ACI, retouched as a hostile image would be: `/opt/probe/id`
/// is the host's `id` with the setuid bit, owned by root; `/opt/network/add` belongs to
/// nobody (who could then rewrite what root runs at the next attach).
fn hostile_aci(dir: &Path) -> std::path::PathBuf {
    let scripts = images::Scripts {
        setup: common::scripts::shell_setup(),
        add: common::scripts::shell_add(),
        del: common::scripts::shell_del(),
    };
    let mut rootfs = images::shell_rootfs(&scripts);
    rootfs.file("opt/probe/id", 0o755, std::fs::read("/usr/bin/id").unwrap());
    images::write_both(dir, "plain", "kmt/hostile", &rootfs);
    let mut original = tar::Archive::new(std::fs::File::open(dir.join("plain.aci")).unwrap());
    let mut builder = tar::Builder::new(Vec::new());
    for entry in original.entries().unwrap() {
        let entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut header = entry.header().clone();
        match path.as_str() {
            "rootfs/opt/probe/id" => header.set_mode(0o4755),
            "rootfs/opt/network/add" => {
                header.set_uid(NOBODY.into());
                header.set_gid(NOBODY.into());
            }
            _ => {}
        }
        header.set_cksum();
        builder.append(&header, entry).unwrap();
    }
    let path = dir.join("hostile.aci");
    std::fs::write(&path, builder.into_inner().unwrap()).unwrap();
    path
}

#[test]
fn nobody_reaches_no_part_of_the_state_tree_and_image_files_keep_no_foreign_owner_or_setuid() {
    let bed = Bed::with_prefix(PREFIX);
    // The state directory's parent is world-searchable, as /var/lib is: only the tree's
    // own modes stand between a local user and the plugins' files.
    std::fs::set_permissions(bed.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = hostile_aci(bed.tmp.path());
    let config = json!({ "container_networks": [
        mynet_entry("hostile", &format!("file://{}", image.display()), "kmt-br-h", "10.211.2"),
    ]});
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let rootfs = host.plugin_rootfs("hostile");
    let (id, add) = (rootfs.join("opt/probe/id"), rootfs.join("opt/network/add"));

    // As nobody: the setuid program cannot be run, `add` cannot be rewritten, the tree
    // cannot be listed.
    let ran = as_nobody(&format!("exec {} -u", id.display()));
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(!ran.status.success(), "nobody ran the image's setuid id, which printed euid {stdout}");
    assert!(String::from_utf8_lossy(&ran.stderr).contains("Permission denied"), "{ran:?}");
    let wrote = as_nobody(&format!("echo 'id > /tmp/pwned' >> {}", add.display()));
    assert!(!wrote.status.success(), "nobody appended to /opt/network/add");
    let listed = as_nobody(&format!("ls {}", bed.options.state_dir.display()));
    assert!(!listed.status.success(), "nobody listed the state directory");

    // Every directory from the state directory down to the bundle is root's and 0700.
    let state = &bed.options.state_dir;
    for dir in [
        state.clone(),
        state.join("plugins"),
        state.join("plugins/hostile"),
        state.join("plugins/hostile/bundle"),
    ] {
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o700, 0), "{}", dir.display());
    }
    for sub in ["containers", "locks", "runtime", "scratch"] {
        assert_eq!(std::fs::metadata(state.join(sub)).unwrap().mode() & 0o7777, 0o700, "{sub}");
    }
    // And what the image asked for is not kept: no setuid, no foreign owner.
    let id_meta = std::fs::metadata(&id).unwrap();
    assert_eq!((id_meta.mode() & 0o7777, id_meta.uid()), (0o755, 0), "the setuid bit is stripped");
    let add_meta = std::fs::symlink_metadata(&add).unwrap();
    assert_eq!((add_meta.uid(), add_meta.gid()), (0, 0), "/opt/network/add is root's");
    let record = std::fs::metadata(state.join("plugins/hostile/plugin.json")).unwrap();
    assert_eq!(record.mode() & 0o777, 0o600);
    host.stop_plugins().unwrap();
}

#[test]
fn a_state_directory_of_another_user_or_a_link_is_refused_and_a_wide_one_tightened() {
    let tmp = tempfile::Builder::new().prefix("kmt-").tempdir().unwrap();
    let config = NetworkConfig::from_value(&json!({ "container_networks": [] })).unwrap();
    let open = |dir: &Path| Host::new(config.clone(), HostOptions::new(dir));

    // Made by nobody beforehand: whoever owns it could swap bundles and records under us.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(NOBODY), Some(NOBODY)).unwrap();
    let err = open(&foreign).unwrap_err().to_string();
    assert!(err.contains("owned by uid 65534") && err.contains("refusing to use it"), "{err}");
    assert!(std::fs::read_dir(&foreign).unwrap().next().is_none(), "nothing was created in it");

    // A link in its place, even to a directory of ours.
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = open(&link).unwrap_err().to_string();
    assert!(err.contains("not a directory"), "{err}");

    // An older install's 0755 tree is tightened, subdirectories included.
    let old = tmp.path().join("old");
    for sub in ["", "plugins", "containers"] {
        std::fs::create_dir_all(old.join(sub)).unwrap();
        std::fs::set_permissions(old.join(sub), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    open(&old).unwrap();
    for sub in ["", "plugins", "containers"] {
        assert_eq!(std::fs::metadata(old.join(sub)).unwrap().mode() & 0o7777, 0o700, "{sub:?}");
    }
}
