//! Namespace handling on the real kernel. Needs root.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni_net::netns::{create_named, remove_named, OwnedNamedNs, THREAD_SELF_NETNS};
use cni_net::{NetNs, Netlink};
use cni_testkit::ns::{require_root, TestNetns};

fn thread_netns_inode() -> u64 {
    std::fs::metadata(THREAD_SELF_NETNS).unwrap().ino()
}

#[test]
fn run_enters_the_namespace_and_panics_leave_the_caller_where_it_was() {
    let test_ns = TestNetns::new().unwrap();
    let before = thread_netns_inode();
    let (_, target_inode) = test_ns.netns().id().unwrap();

    let inside = test_ns.run(thread_netns_inode).unwrap();
    assert_eq!(inside, target_inode, "closure must run inside the namespace");
    assert_ne!(inside, before);
    assert_eq!(thread_netns_inode(), before);

    // Nested: back home for a while, then inside again, then home.
    let home = NetNs::current().unwrap();
    let (nested, after_nested) =
        test_ns.run(|| (home.run(thread_netns_inode).unwrap(), thread_netns_inode())).unwrap();
    assert_eq!((nested, after_nested), (before, target_inode));
    assert_eq!(thread_netns_inode(), before);

    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        test_ns.run(|| -> () { panic!("closure failed inside namespace") }).unwrap();
    }));
    assert!(caught.is_err(), "the panic must reach the caller");
    assert_eq!(thread_netns_inode(), before, "caller thread must still be in its original namespace");
    assert!(!test_ns.netns().is_current().unwrap());
    assert!(NetNs::current().unwrap().is_current().unwrap());
}

#[test]
fn named_namespace_is_created_bound_and_removed() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("cnt-named-{}", std::process::id());
    let ns = create_named(dir.path(), &name).unwrap();
    let path = dir.path().join(&name);
    assert_eq!(ns.path(), path);
    // A fresh namespace has only a (down) loopback device.
    let mut netlink = Netlink::in_ns(&ns).unwrap();
    let links = netlink.links().unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].name, "lo");
    assert!(!links[0].up);
    // A second namespace of the same name is refused.
    let again = create_named(dir.path(), &name).unwrap_err();
    assert!(again.is_already_exists(), "{again}");

    drop(netlink);
    drop(ns);
    remove_named(&path).unwrap();
    assert!(!Path::new(&path).exists());
    // Removing twice is fine (DEL must be idempotent).
    remove_named(&path).unwrap();
    // A caller-chosen directory is not turned into a mount point (only /run/netns is).
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir_text = dir.path().to_str().unwrap();
    assert!(!mounts.lines().any(|line| line.contains(dir_text)), "{dir_text} left mounted");
}

#[test]
fn an_owned_namespace_has_its_loopback_up_on_request_and_goes_when_dropped() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("cnt-owned-{}", std::process::id());
    let owned = OwnedNamedNs::create(dir.path(), &name).unwrap();
    assert_eq!((owned.path(), owned.name().as_ref()), (dir.path().join(&name).as_path(), name.as_str()));
    let lo_up = |ns: &NetNs| Netlink::in_ns(ns).unwrap().require_link("lo").unwrap().up;
    assert!(!lo_up(owned.netns()));
    owned.bring_loopback_up().unwrap();
    assert!(lo_up(owned.netns()));
    let path = owned.path().to_path_buf();
    drop(owned);
    assert!(!path.exists(), "the namespace file outlived its owner");
}

#[test]
fn opening_something_else_than_a_namespace_fails() {
    require_root();
    let err = NetNs::open("/proc/self/ns/does-not-exist").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = NetNs::open("/proc/self/ns/mnt").unwrap_err();
    assert!(err.to_string().contains("not a network namespace"), "{err}");
    NetNs::open("/proc/self/ns/net").unwrap();
}
