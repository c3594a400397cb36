//! `NftClient::close_without_waiting`: the commit stands, the caller is left with no child
//! (no zombie), and the kernel still gets the socket back.

mod nft_support;

use cni_net::nft::{Batch, Family, NftClient, Table};
use nft_support::{in_fresh_netns, nft_text, require_root};

fn children_of_this_thread() -> String {
    std::fs::read_to_string("/proc/thread-self/children").unwrap_or_default()
}

#[test]
fn detached_close_keeps_the_commit_and_leaves_no_child() {
    require_root();
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
            assert_eq!(children_of_this_thread().trim(), "", "a child is left behind");
            let text = nft_text();
            assert!(text.contains(&name), "{text}");
            if round > 0 {
                assert!(!text.contains(&format!("cnf-close-{} ", round - 1)), "{text}");
            }
        }
        // A new client works after the detached closes.
        let mut nft = NftClient::new().unwrap();
        let mut cleanup = Batch::new();
        cleanup.delete_table(Family::Inet, "cnf-close-2");
        nft.commit(&cleanup).unwrap();
    });
}
