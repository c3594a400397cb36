//! Chains: base chains attached to a netfilter hook, and regular chains reached by jumps.

use super::attr::AttrWriter;
use super::data::{wire_enum, Family};
use super::error::NftError;
use super::msg::Incoming;
use super::sys::*;
use super::udata;

wire_enum! {
    /// The netfilter hook a base chain attaches to.
    Hook { Prerouting = 0, Input = 1, Forward = 2, Output = 3, Postrouting = 4 }
}

/// Well-known hook priorities (lower runs first).
pub mod priority {
    /// Connection-tracking bypass (`raw`).
    pub const RAW: i32 = -300;
    /// Bridge-family filtering (`filter` in the bridge family).
    pub const BRIDGE_FILTER: i32 = -200;
    /// Packet mangling (`mangle`).
    pub const MANGLE: i32 = -150;
    /// Destination NAT (`dstnat`).
    pub const DSTNAT: i32 = -100;
    /// Filtering (`filter`).
    pub const FILTER: i32 = 0;
    /// Source NAT (`srcnat`).
    pub const SRCNAT: i32 = 100;
}

/// The type of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainType {
    /// Filtering.
    Filter,
    /// Address translation (sees only the first packet of a connection).
    Nat,
    /// Rerouting after mark/address changes (output hook).
    Route,
}

impl ChainType {
    fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
            ChainType::Route => "route",
        }
    }
}

/// The default verdict of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainPolicy {
    /// Let packets through that no rule decided on.
    Accept,
    /// Drop packets that no rule accepted.
    Drop,
}

/// How a base chain attaches to its hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    /// The hook.
    pub hook: Hook,
    /// Priority at the hook.
    pub priority: i32,
    /// Chain type.
    pub chain_type: ChainType,
    /// Default verdict (`None` leaves the kernel default, accept).
    pub policy: Option<ChainPolicy>,
}

/// A chain to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Family of the table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Chain name.
    pub name: String,
    /// Set for base chains.
    pub base: Option<BaseChain>,
    /// Comment stored as userdata (`nft list` shows it).
    pub comment: Option<String>,
}

impl Chain {
    /// A regular chain (only reached by jump/goto).
    pub fn regular(family: Family, table: impl Into<String>, name: impl Into<String>) -> Self {
        Self { family, table: table.into(), name: name.into(), base: None, comment: None }
    }

    /// A base chain attached to `hook`.
    pub fn base(
        family: Family,
        table: impl Into<String>,
        name: impl Into<String>,
        chain_type: ChainType,
        hook: Hook,
        priority: i32,
    ) -> Self {
        Self {
            base: Some(BaseChain { hook, priority, chain_type, policy: None }),
            ..Self::regular(family, table, name)
        }
    }

    /// Sets the default verdict of a base chain (no effect on a regular chain).
    pub fn with_policy(mut self, policy: ChainPolicy) -> Self {
        if let Some(base) = &mut self.base {
            base.policy = Some(policy);
        }
        self
    }

    /// Adds a comment.
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.comment = Some(comment.into());
        self
    }

    pub(crate) fn encode(&self, w: &mut AttrWriter) {
        w.put_str(NFTA_CHAIN_TABLE, &self.table);
        w.put_str(NFTA_CHAIN_NAME, &self.name);
        // Attribute order as `nft` sends it, so its debug output can serve as a golden.
        if let Some(base) = &self.base {
            w.put_str(NFTA_CHAIN_TYPE, base.chain_type.name());
            if let Some(policy) = base.policy {
                let code = match policy {
                    ChainPolicy::Accept => NF_ACCEPT,
                    ChainPolicy::Drop => NF_DROP,
                };
                w.put_u32(NFTA_CHAIN_POLICY, code as u32);
            }
            w.nest(NFTA_CHAIN_HOOK, |w| {
                w.put_u32(NFTA_HOOK_HOOKNUM, base.hook.to_raw());
                w.put_u32(NFTA_HOOK_PRIORITY, base.priority as u32);
            });
        }
        if let Some(comment) = &self.comment {
            w.put(NFTA_CHAIN_USERDATA, &udata::encode_comment(NFTNL_UDATA_CHAIN_COMMENT, comment));
        }
    }
}

/// Encodes the attributes that name a chain (for delete/flush/list).
pub(crate) fn encode_chain_name(w: &mut AttrWriter, table: &str, chain: &str) {
    w.put_str(NFTA_CHAIN_TABLE, table);
    w.put_str(NFTA_CHAIN_NAME, chain);
}

/// A chain as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    /// Family of the table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Chain name.
    pub name: String,
    /// Kernel handle.
    pub handle: u64,
    /// Hook and priority, for base chains.
    pub hook: Option<(Hook, i32)>,
    /// Chain type name (`filter`, `nat`, `route`), for base chains.
    pub chain_type: Option<String>,
    /// Comment from the chain's userdata.
    pub comment: Option<String>,
    /// Default verdict, for base chains.
    pub policy: Option<ChainPolicy>,
}

impl ChainInfo {
    pub(crate) fn decode(msg: &Incoming<'_>) -> Result<Self, NftError> {
        let mut info = ChainInfo {
            family: Family::from_raw(u32::from(msg.family())),
            table: String::new(),
            name: String::new(),
            handle: 0,
            hook: None,
            chain_type: None,
            comment: None,
            policy: None,
        };
        for attr in msg.attrs() {
            let attr = attr?;
            match attr.kind {
                NFTA_CHAIN_TABLE => info.table = attr.string()?,
                NFTA_CHAIN_NAME => info.name = attr.string()?,
                NFTA_CHAIN_HANDLE => info.handle = attr.u64()?,
                NFTA_CHAIN_TYPE => info.chain_type = Some(attr.string()?),
                NFTA_CHAIN_POLICY => {
                    info.policy = Some(if attr.u32()? == NF_DROP as u32 {
                        ChainPolicy::Drop
                    } else {
                        ChainPolicy::Accept
                    })
                }
                NFTA_CHAIN_USERDATA => {
                    info.comment = udata::find_string(attr.payload, NFTNL_UDATA_CHAIN_COMMENT);
                }
                NFTA_CHAIN_HOOK => {
                    let (mut hook, mut prio) = (None, 0i32);
                    for inner in attr.nested() {
                        let inner = inner?;
                        match inner.kind {
                            NFTA_HOOK_HOOKNUM => hook = Some(Hook::from_raw(inner.u32()?)),
                            NFTA_HOOK_PRIORITY => prio = inner.u32()? as i32,
                            _ => {}
                        }
                    }
                    info.hook = hook.map(|h| (h, prio));
                }
                _ => {}
            }
        }
        Ok(info)
    }
}
