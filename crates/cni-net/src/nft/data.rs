//! `nft_data`: the nested value-or-verdict payload shared by expressions and set elements,
//! plus the small wire enums used across the module.

use super::attr::{Attr, AttrWriter};
use super::error::NftError;
use super::sys::*;

/// Declares an enum that maps to a kernel number and keeps unknown numbers as `Other`.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A number this crate has no name for (kept so decoding never loses it).
            Other(u32),
        }

        impl $name {
            /// The kernel's number for this value.
            pub fn to_raw(self) -> u32 {
                match self {
                    $(Self::$variant => $value,)*
                    Self::Other(raw) => raw,
                }
            }

            /// The value for a kernel number.
            pub fn from_raw(raw: u32) -> Self {
                $(if raw == $value { return Self::$variant; })*
                Self::Other(raw)
            }
        }
    };
}
pub(crate) use wire_enum;

/// A verdict: what happens to the packet, or where evaluation continues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Let the packet through (ends evaluation in this hook).
    Accept,
    /// Discard the packet.
    Drop,
    /// Return to the calling chain.
    Return,
    /// Continue with the next rule (what an empty verdict means).
    Continue,
    /// Stop evaluating this rule.
    Break,
    /// Call a chain, coming back afterwards.
    Jump(String),
    /// Go to a chain without coming back.
    Goto(String),
}

impl Verdict {
    fn code(&self) -> i32 {
        match self {
            Verdict::Accept => NF_ACCEPT,
            Verdict::Drop => NF_DROP,
            Verdict::Return => NFT_RETURN,
            Verdict::Continue => NFT_CONTINUE,
            Verdict::Break => NFT_BREAK,
            Verdict::Jump(_) => NFT_JUMP,
            Verdict::Goto(_) => NFT_GOTO,
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            Verdict::Jump(chain) | Verdict::Goto(chain) => Some(chain),
            _ => None,
        }
    }

    pub(crate) fn encode(&self, w: &mut AttrWriter) {
        w.nest(NFTA_DATA_VERDICT, |w| {
            w.put_u32(NFTA_VERDICT_CODE, self.code() as u32);
            if let Some(chain) = self.target() {
                w.put_str(NFTA_VERDICT_CHAIN, chain);
            }
        });
    }

    fn decode(attr: &Attr<'_>) -> Result<Self, NftError> {
        let mut code = None;
        let mut chain = None;
        for inner in attr.nested() {
            let inner = inner?;
            match inner.kind {
                NFTA_VERDICT_CODE => code = Some(inner.u32()? as i32),
                NFTA_VERDICT_CHAIN => chain = Some(inner.string()?),
                _ => {}
            }
        }
        let code = code.ok_or_else(|| NftError::Malformed("verdict without code".into()))?;
        let need_chain =
            || chain.clone().ok_or_else(|| NftError::Malformed("jump/goto without chain".into()));
        Ok(match code {
            NF_ACCEPT => Verdict::Accept,
            NF_DROP => Verdict::Drop,
            NFT_RETURN => Verdict::Return,
            NFT_CONTINUE => Verdict::Continue,
            NFT_BREAK => Verdict::Break,
            NFT_JUMP => Verdict::Jump(need_chain()?),
            NFT_GOTO => Verdict::Goto(need_chain()?),
            other => return Err(NftError::Malformed(format!("unknown verdict code {other}"))),
        })
    }
}

/// The content of an `nft_data` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Data {
    Value(Vec<u8>),
    Verdict(Verdict),
}

/// Writes `kind` as a nest holding `NFTA_DATA_VALUE`.
pub(crate) fn put_value(w: &mut AttrWriter, kind: u16, value: &[u8]) {
    w.nest(kind, |w| w.put(NFTA_DATA_VALUE, value));
}

/// Writes `kind` as a nest holding `NFTA_DATA_VERDICT`.
pub(crate) fn put_verdict(w: &mut AttrWriter, kind: u16, verdict: &Verdict) {
    w.nest(kind, |w| verdict.encode(w));
}

/// Reads an `nft_data` nest.
pub(crate) fn parse_data(attr: &Attr<'_>) -> Result<Data, NftError> {
    for inner in attr.nested() {
        let inner = inner?;
        match inner.kind {
            NFTA_DATA_VALUE => return Ok(Data::Value(inner.payload.to_vec())),
            NFTA_DATA_VERDICT => return Ok(Data::Verdict(Verdict::decode(&inner)?)),
            _ => {}
        }
    }
    Err(NftError::Malformed("empty nft_data".into()))
}

/// Reads an `nft_data` nest that must hold a value.
pub(crate) fn parse_value(attr: &Attr<'_>) -> Result<Vec<u8>, NftError> {
    match parse_data(attr)? {
        Data::Value(v) => Ok(v),
        Data::Verdict(_) => Err(NftError::Malformed("verdict where a value belongs".into())),
    }
}

wire_enum! {
    /// An address family (`NFPROTO_*`) as nf_tables uses it for tables.
    Family {
        /// IPv4 and IPv6 together.
        Inet = 1,
        /// IPv4 only (`ip`).
        Ipv4 = 2,
        /// ARP.
        Arp = 3,
        /// Ingress/egress of one device.
        Netdev = 5,
        /// Bridged (layer 2) traffic.
        Bridge = 7,
        /// IPv6 only (`ip6`).
        Ipv6 = 10,
    }
}

impl Family {
    /// The nfgenmsg family byte.
    pub(crate) fn byte(self) -> u8 {
        self.to_raw() as u8
    }

    /// The name `nft` uses for this family.
    pub fn nft_name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ipv4 => "ip",
            Family::Ipv6 => "ip6",
            Family::Arp => "arp",
            Family::Netdev => "netdev",
            Family::Bridge => "bridge",
            Family::Other(_) => "unknown",
        }
    }
}
