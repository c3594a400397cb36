//! cni-net's integration tests, one binary: each former test file is a module,
//! `nft_support` what the nftables ones share. Nothing here opts in to helper processes
//! (that is for the whole process; those tests are in the `helpers` binary).

mod addresses_routes;
mod bridge_traffic;
mod fdb;
mod links;
mod netns;
mod nft_conntrack;
mod nft_ruleset;
mod nft_scale;
mod nft_support;
mod nft_traffic;
mod no_helpers;
mod tc;
