//! With `CNI_RS_NO_HELPER_PROCESSES` set, work that is normally handed to a helper process
//! is done by the caller. Needs root.

use cni_net::netlink::{LinkSpec, VethSpec};
use cni_testkit::children;
use cni_testkit::ns::TestNetns;

#[test]
fn without_helper_processes_a_background_deletion_is_done_at_once() {
    // The only test in this file (binary): the variable reaches no other test.
    std::env::set_var(cni_net::NO_HELPERS_VAR, "1");
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
