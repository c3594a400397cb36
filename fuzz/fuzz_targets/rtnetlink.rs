//! rtnetlink datagrams through the decoders of cni-net's dumps (links, addresses, routes,
//! rules, neighbours, qdiscs, filters) and its ack/error reading.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = cni_net::fuzzing::rtnetlink_datagram(data);
    assert!(decoded <= data.len() / 16, "more messages than a datagram can hold");
});
