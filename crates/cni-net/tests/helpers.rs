//! With helper processes enabled (as the plugin binary enables them), a background link
//! deletion goes to a helper that is reaped afterwards. Every test in this file (binary)
//! opts in first: the opt-in is for the whole process. Needs root.

use cni_net::netlink::{LinkSpec, VethSpec};
use cni_testkit::children;
use cni_testkit::ns::TestNetns;
use std::time::{Duration, Instant};

#[test]
fn a_link_deleted_in_the_background_goes_and_its_helper_is_reaped() {
    assert!(
        cni_net::detach::enable_helper_processes(),
        "helpers are on unless CNI_RS_NO_HELPER_PROCESSES is set"
    );
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    for round in 0..3 {
        let veth = nl
            .add_veth(&VethSpec { link: LinkSpec::new("cntbg0"), peer: LinkSpec::new("cntbg0p") })
            .unwrap()
            .unwrap();
        nl.delete_link_in_background(veth.index).unwrap();
        // The hand-off reaped the previous round's helper (finished, see below): only this
        // round's is our child.
        let helpers = children::of_this_thread();
        assert_eq!(helpers.len(), 1, "round {round}: children {helpers:?}");
        let deadline = Instant::now() + Duration::from_secs(2);
        while nl.link_by_name("cntbg0").unwrap().is_some() || nl.link_by_name("cntbg0p").unwrap().is_some() {
            assert!(Instant::now() < deadline, "round {round}: the pair is still there after 2 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        children::wait_until_exited(helpers[0], Duration::from_secs(2));
    }
    // The socket the request went out on still works.
    assert!(nl.link_by_name("lo").unwrap().is_some());
}
