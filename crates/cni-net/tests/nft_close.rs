//! `NftClient::close_without_waiting`: the commit stands, the helper that closes the socket
//! is reaped (no zombies pile up), and the kernel still gets the socket back.

mod nft_support;

use cni_net::nft::{Batch, Family, NftClient, Table};
use cni_testkit::children;
use nft_support::{in_fresh_netns, nft_text, require_root};
use std::time::Duration;

#[test]
fn detached_close_keeps_the_commit_and_its_helper_is_reaped() {
    require_root();
    // The only test in this file (binary): the opt-in, for the whole process, reaches no
    // other test.
    assert!(
        cni_net::detach::enable_helper_processes(),
        "helpers are on unless CNI_RS_NO_HELPER_PROCESSES is set"
    );
    in_fresh_netns(|| {
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
    });
}
