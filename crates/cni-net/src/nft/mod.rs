//! nftables over nfnetlink: no `nft` or `iptables` process at runtime.
//!
//! [`NftClient`] opens a `NETLINK_NETFILTER` socket in the calling thread's network
//! namespace (a socket stays bound to the namespace it was created in, so create the
//! client from a thread inside the namespace to program, then use it from anywhere).
//! Changes go in a [`Batch`], which the kernel applies atomically. Rules are built from
//! [`Expr`]essions, most easily with [`RuleBuilder`]; rules carry a comment (userdata
//! that `nft list` shows) so a plugin can find and delete exactly its own rules with
//! [`NftClient::list_rules`] on one chain.
//!
//! Keeping per-container cost flat: the plugins give each attachment its own regular
//! chain, reached from shared base chains through a verdict map keyed by the attachment
//! (`cni-plugins`' `common::nft_attach`), so ADD and DEL add or delete one chain and its
//! map elements without listing anyone else's rules. Plain sets and maps (e.g.
//! `ip saddr @masq masquerade`, [`RuleBuilder::dnat_map`]) are the other flat-cost shape;
//! a commit that adds a jump makes the kernel re-validate the chains reachable from it,
//! which cni-bench's W4 (2,000 held attachments) measures as flat so far.
//!
//! [`conntrack::ConntrackClient`] removes stale conntrack entries (e.g. UDP to a host
//! port whose mapping changed). `destroy_*` operations need Linux 6.3 or newer.
//!
//! ```no_run
//! use cni_net::nft::{Batch, Chain, ChainType, Family, Hook, NftClient, RuleBuilder, Table};
//! # fn main() -> Result<(), cni_net::nft::NftError> {
//! let mut nft = NftClient::new()?;
//! let mut batch = Batch::with_rule_handles();
//! batch.add_table(&Table::new(Family::Inet, "cni-demo"));
//! batch.add_chain(&Chain::base(Family::Inet, "cni-demo", "postrouting", ChainType::Nat,
//!     Hook::Postrouting, cni_net::nft::priority::SRCNAT));
//! let masq = RuleBuilder::new(Family::Inet, "cni-demo", "postrouting")
//!     .saddr("10.88.0.0/16".parse().unwrap())
//!     .daddr_not("224.0.0.0/4".parse().unwrap())
//!     .masquerade()
//!     .comment("ctr-1234")
//!     .build()?;
//! let op = batch.add_rule(&masq);
//! let handle = nft.commit(&batch)?.rule_handle(op);
//! # let _ = handle; Ok(()) }
//! ```

pub(crate) mod attr;
mod batch;
mod builder;
mod chain;
mod client;
pub mod conntrack;
mod data;
mod error;
mod expr;
mod msg;
mod rule;
mod set;
mod socket;
mod sys;
mod table;
mod udata;
pub mod xt;

#[cfg(test)]
mod golden_tests;

pub use batch::Batch;
pub use builder::{proto, Field, RuleBuilder};
pub use chain::{priority, BaseChain, Chain, ChainInfo, ChainPolicy, ChainType, Hook};
pub use client::{CommitOutcome, NftClient};
pub use error::NftError;
pub use expr::{
    ct_state, fib_flags, nat_flags, CmpOp, CtKey, Expr, FibResult, MetaKey, NatKind, PayloadBase, Register,
    Verdict,
};
pub(crate) use msg::Incoming;
pub use rule::{ListedRule, Rule};
pub use set::{
    concat_key, ifname_bytes, set_flags, ElementData, KeyType, KeyValue, MapData, Set, SetElement, SetRef,
};
pub use table::{Family, Table, TableInfo};
pub use udata::MAX_COMMENT_LEN;
