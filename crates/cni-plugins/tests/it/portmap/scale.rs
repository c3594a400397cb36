//! `portmap` at scale: 200 containers each get their mapping, and after DEL nothing of
//! theirs is left (nor after GC anything of the plugin's). The plugin only needs container
//! addresses, so it gets a made-up prevResult instead of real interfaces. Whether the cost
//! of ADD and DEL stays flat in the number of containers is measured by cni-bench (W6).

use super::support;
use crate::common;

use cni_testkit::ns::TestNetns;
use common::{call, ok};
use serde_json::json;
use support::{conf, per_container_parts, prev_result};

const PREFIX: &str = "cnm";

#[test]
fn two_hundred_containers_get_their_mapping_and_leave_nothing_behind() {
    const N: usize = 200;
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    let before = host.nft_json();

    let run = |command: &str, i: usize| {
        let address = format!("10.201.{}.{}/16", i / 200, i % 200 + 2);
        let c = conf("1.0.0", 20000 + i as u16, Some(prev_result(&ctr, &address)));
        ok(call("portmap", command, &host, Some(&ctr), &c).container_id(&format!("ctr-{i}")).run());
    };
    for i in 0..N {
        run("ADD", i);
    }
    // One attachment chain and one map element per container.
    assert_eq!(per_container_parts(&host), (N, N));
    for i in 0..N {
        run("DEL", i);
    }
    assert_eq!(per_container_parts(&host), (0, 0), "per-container rules or elements remain");

    let gc =
        json!({"cniVersion": "1.1.0", "name": "pmscale", "type": "portmap", "cni.dev/valid-attachments": []});
    ok(call("portmap", "GC", &host, None, &gc).run());
    assert_eq!(host.nft_json(), before);
}
