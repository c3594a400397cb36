//! nfnetlink datagrams through cni-net's nf_tables and ctnetlink decoders (tables, chains,
//! rules with their expressions, conntrack entries) and its ack/error reading.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = cni_net::fuzzing::nfnetlink_datagram(data);
    assert!(decoded <= 4 * (data.len() / 16), "more decodings than a datagram can hold");
});
