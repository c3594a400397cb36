//! Without the opt-in, or with it overridden by `CNI_RS_NO_HELPER_PROCESSES`, work that
//! the plugin binary hands to a helper process is done by the caller. Needs root.

use cni_net::netlink::{LinkSpec, VethSpec};
use cni_os::detach::{enable_helper_processes, helper_processes_enabled, NO_HELPERS_VAR};
use cni_testkit::children;
use cni_testkit::ns::{require_root, TestNetns};

#[test]
fn by_default_a_background_deletion_is_done_at_once() {
    require_root();
    // Nothing in this binary opts in (the tests that do have the `helpers` binary) but the
    // child below, in a process of its own.
    assert!(!helper_processes_enabled());
    deletes_at_once();
}

#[test]
fn the_variable_overrides_the_opt_in() {
    require_root();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_helpers::opted_in_with_the_variable_set",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(NO_HELPERS_VAR, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {}\n{stdout}\n{stderr}", out.status);
    // A filter that matched nothing would pass too.
    assert!(stdout.contains("1 passed"), "the child ran no test:\n{stdout}\n{stderr}");
}

#[test]
#[ignore = "the child half of the_variable_overrides_the_opt_in, which runs it"]
fn opted_in_with_the_variable_set() {
    assert!(std::env::var_os(NO_HELPERS_VAR).is_some(), "run by the_variable_overrides_the_opt_in");
    assert!(!enable_helper_processes(), "the variable did not keep helpers off");
    deletes_at_once();
}

/// A background deletion starts no helper and the pair is gone when it returns.
fn deletes_at_once() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let veth = nl
        .add_veth(&VethSpec { link: LinkSpec::new("cntsy0"), peer: LinkSpec::new("cntsy0p") })
        .unwrap()
        .unwrap();
    nl.delete_link_in_background(veth.index).unwrap();
    assert_eq!(children::of_this_thread(), Vec::<u32>::new(), "a helper was started");
    assert!(nl.link_by_name("cntsy0").unwrap().is_none());
    assert!(nl.link_by_name("cntsy0p").unwrap().is_none());
}
