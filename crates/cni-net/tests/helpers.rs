//! A binary of its own: its tests opt in to helper processes, and the opt-in is for the
//! whole process (the `it` binary's tests run without helpers; its `no_helpers` checks so).
//!
//! With helper processes enabled (as the plugin binary enables them), work handed to a
//! helper is done there and the helper is reaped: a background link deletion goes, and
//! `NftClient::close_without_waiting` keeps the commit (the kernel still gets the socket
//! back). Every test opts in first. Needs root.

use cni_net::netlink::{LinkSpec, VethSpec};
use cni_net::nft::{Batch, Family, NftClient, Table};
use cni_testkit::children;
use cni_testkit::ns::TestNetns;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_link_deleted_in_the_background_goes_and_its_helper_is_reaped() {
    assert!(
        cni_os::detach::enable_helper_processes(),
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

#[test]
fn detached_close_keeps_the_commit_and_its_helper_is_reaped() {
    assert!(
        cni_os::detach::enable_helper_processes(),
        "helpers are on unless CNI_RS_NO_HELPER_PROCESSES is set"
    );
    let ns = TestNetns::new().unwrap();
    ns.run(|| {
        for round in 0..3 {
            let mut nft = NftClient::new().unwrap();
            let mut batch = Batch::new();
            let name = format!("cnf-close-{round}");
            batch.add_table(&Table::new(Family::Inet, name.clone()));
            nft.commit(&batch).unwrap();
            let mut delete = Batch::new();
            if round > 0 {
                delete.delete_table(Family::Inet, &format!("cnf-close-{}", round - 1));
                nft.commit(&delete).unwrap();
            }
            nft.close_without_waiting();
            // The previous round's helper (finished, see below) was reaped: only this one's.
            let helpers = children::of_this_thread();
            assert_eq!(helpers.len(), 1, "round {round}: children {helpers:?}");
            let text = nft_text();
            assert!(text.contains(&name), "{text}");
            if round > 0 {
                assert!(!text.contains(&format!("cnf-close-{} ", round - 1)), "{text}");
            }
            // A deleting client's helper closes at the next 100 ms tick; the limit only
            // catches one that never does (generous: a loaded machine must not fail it).
            children::wait_until_exited(helpers[0], Duration::from_secs(20));
        }
        // A new client works after the detached closes.
        let mut nft = NftClient::new().unwrap();
        let mut cleanup = Batch::new();
        cleanup.delete_table(Family::Inet, "cnf-close-2");
        nft.commit(&cleanup).unwrap();
    })
    .unwrap();
}

/// `nft list ruleset` of the calling thread's namespace, as text.
fn nft_text() -> String {
    let out = Command::new("nft").args(["list", "ruleset"]).output().expect("run nft");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
