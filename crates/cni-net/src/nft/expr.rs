//! nf_tables expressions: the instructions of a rule, encoded and decoded.

use super::attr::{Attr, AttrWriter};
pub use super::data::Verdict;
use super::data::{parse_data, parse_value, put_value, put_verdict, wire_enum, Data, Family};
use super::error::NftError;
use super::sys::*;

/// A data register. nf_tables has the verdict register, four 16-byte registers (1-4) and,
/// overlapping them, sixteen 4-byte registers (`NFT_REG32_00`.. = 8..) used for
/// concatenations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Register(pub u32);

impl Register {
    /// The verdict register.
    pub const VERDICT: Register = Register(0);
    /// 16-byte register 1 (the same storage as 4-byte register 0).
    pub const R1: Register = Register(1);
    /// 16-byte register 2.
    pub const R2: Register = Register(2);
    /// 16-byte register 3.
    pub const R3: Register = Register(3);
    /// 16-byte register 4.
    pub const R4: Register = Register(4);

    /// The 4-byte register `NFT_REG32_<index>` (index 0..=15).
    pub const fn reg32(index: u32) -> Register {
        Register(8 + index)
    }
}

wire_enum! {
    /// Comparison operator of a `cmp` expression.
    CmpOp { Eq = 0, Neq = 1, Lt = 2, Lte = 3, Gt = 4, Gte = 5 }
}

wire_enum! {
    /// Which header a `payload` offset counts from.
    PayloadBase {
        /// The link-layer (Ethernet) header.
        LinkLayer = 0,
        /// The network (IP) header.
        Network = 1,
        /// The transport (TCP/UDP/...) header.
        Transport = 2,
    }
}

wire_enum! {
    /// What a `meta` expression reads or writes.
    MetaKey {
        Len = 0, Protocol = 1, Priority = 2, Mark = 3, Iif = 4, Oif = 5, IifName = 6,
        OifName = 7, IifType = 8, OifType = 9, NfProto = 15, L4Proto = 16,
        BridgeIifName = 17, BridgeOifName = 18, PktType = 19,
    }
}

wire_enum! {
    /// What a `ct` expression reads.
    CtKey {
        State = 0, Direction = 1, Status = 2, Mark = 3, Expiration = 5, L3Protocol = 7,
        Src = 8, Dst = 9, Protocol = 10, ProtoSrc = 11, ProtoDst = 12, Zone = 17,
    }
}

wire_enum! {
    /// Source or destination NAT.
    NatKind { Snat = 0, Dnat = 1 }
}

wire_enum! {
    /// What a `fib` lookup returns.
    FibResult { Oif = 1, OifName = 2, AddrType = 3 }
}

/// `ct state` bits (`NF_CT_STATE_*_BIT`), compared in host byte order.
pub mod ct_state {
    /// Packet that conntrack could not classify.
    pub const INVALID: u32 = 1;
    /// Part of a connection that has seen traffic both ways.
    pub const ESTABLISHED: u32 = 1 << 1;
    /// Related to an existing connection (e.g. ICMP errors).
    pub const RELATED: u32 = 1 << 2;
    /// First packet of a connection.
    pub const NEW: u32 = 1 << 3;
    /// Not tracked.
    pub const UNTRACKED: u32 = 1 << 6;
}

/// `fib` flags (`NFTA_FIB_F_*`).
pub mod fib_flags {
    /// Look up the source address.
    pub const SADDR: u32 = 1;
    /// Look up the destination address.
    pub const DADDR: u32 = 2;
    /// Use the packet mark.
    pub const MARK: u32 = 4;
    /// Restrict to the input interface.
    pub const IIF: u32 = 8;
    /// Restrict to the output interface.
    pub const OIF: u32 = 16;
}

/// NAT range flags (`NF_NAT_RANGE_*`).
pub mod nat_flags {
    /// An address (range) is given.
    pub const MAP_IPS: u32 = 1;
    /// A port (range) is given.
    pub const PROTO_SPECIFIED: u32 = 2;
    /// Pick ports randomly.
    pub const PROTO_RANDOM: u32 = 4;
    /// Same mapping for a client across connections.
    pub const PERSISTENT: u32 = 8;
    /// Fully random port selection.
    pub const PROTO_RANDOM_FULLY: u32 = 16;
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Load `len` bytes at `offset` of a header into `dreg`.
    Payload { dreg: Register, base: PayloadBase, offset: u32, len: u32 },
    /// Load packet metadata into `dreg`.
    Meta { key: MetaKey, dreg: Register },
    /// Set packet metadata (e.g. the mark) from `sreg`.
    MetaSet { key: MetaKey, sreg: Register },
    /// Compare `sreg` with `data`; the rule stops here if the comparison is false.
    Cmp { sreg: Register, op: CmpOp, data: Vec<u8> },
    /// `dreg = (sreg & mask) ^ xor` over `len` bytes.
    Bitwise { sreg: Register, dreg: Register, len: u32, mask: Vec<u8>, xor: Vec<u8> },
    /// Load constant data into `dreg`.
    Immediate { dreg: Register, data: Vec<u8> },
    /// Set the verdict (an immediate into the verdict register).
    Verdict(Verdict),
    /// Look `sreg` up in a set; with `dreg` (maps) load the mapped value.
    Lookup { set: String, set_id: Option<u32>, sreg: Register, dreg: Option<Register>, invert: bool },
    /// Count packets and bytes.
    Counter { packets: u64, bytes: u64 },
    /// Load conntrack state into `dreg`; `direction` for per-direction keys
    /// (0 original, 1 reply).
    Ct { key: CtKey, dreg: Register, direction: Option<u8> },
    /// Source/destination NAT to the address/port held in registers.
    Nat {
        kind: NatKind,
        family: Family,
        addr_min: Option<Register>,
        addr_max: Option<Register>,
        proto_min: Option<Register>,
        proto_max: Option<Register>,
        flags: u32,
    },
    /// Masquerade (SNAT to the outgoing interface's address).
    Masquerade { flags: u32, proto_min: Option<Register>, proto_max: Option<Register> },
    /// Routing lookup, e.g. the address type of the destination.
    Fib { dreg: Register, result: FibResult, flags: u32 },
    /// An expression this crate does not model (kept byte-for-byte when decoding).
    Unknown { name: String, data: Vec<u8> },
}

impl Expr {
    /// The kernel's name of the expression type.
    pub fn name(&self) -> &str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::Lookup { .. } => "lookup",
            Expr::Counter { .. } => "counter",
            Expr::Ct { .. } => "ct",
            Expr::Nat { .. } => "nat",
            Expr::Masquerade { .. } => "masq",
            Expr::Fib { .. } => "fib",
            Expr::Unknown { name, .. } => name,
        }
    }

    /// Writes this expression as one `NFTA_LIST_ELEM` of a rule's expression list.
    pub(crate) fn encode(&self, w: &mut AttrWriter) {
        w.nest(NFTA_LIST_ELEM, |w| {
            w.put_str(NFTA_EXPR_NAME, self.name());
            if let Expr::Unknown { data, .. } = self {
                w.put(NFTA_EXPR_DATA, data);
                return;
            }
            w.nest(NFTA_EXPR_DATA, |w| self.encode_data(w));
        });
    }

    fn encode_data(&self, w: &mut AttrWriter) {
        match self {
            Expr::Payload { dreg, base, offset, len } => {
                w.put_u32(NFTA_PAYLOAD_DREG, dreg.0);
                w.put_u32(NFTA_PAYLOAD_BASE, base.to_raw());
                w.put_u32(NFTA_PAYLOAD_OFFSET, *offset);
                w.put_u32(NFTA_PAYLOAD_LEN, *len);
            }
            Expr::Meta { key, dreg } => {
                w.put_u32(NFTA_META_KEY, key.to_raw());
                w.put_u32(NFTA_META_DREG, dreg.0);
            }
            Expr::MetaSet { key, sreg } => {
                w.put_u32(NFTA_META_KEY, key.to_raw());
                w.put_u32(NFTA_META_SREG, sreg.0);
            }
            Expr::Cmp { sreg, op, data } => {
                w.put_u32(NFTA_CMP_SREG, sreg.0);
                w.put_u32(NFTA_CMP_OP, op.to_raw());
                put_value(w, NFTA_CMP_DATA, data);
            }
            Expr::Bitwise { sreg, dreg, len, mask, xor } => {
                w.put_u32(NFTA_BITWISE_SREG, sreg.0);
                w.put_u32(NFTA_BITWISE_DREG, dreg.0);
                w.put_u32(NFTA_BITWISE_LEN, *len);
                put_value(w, NFTA_BITWISE_MASK, mask);
                put_value(w, NFTA_BITWISE_XOR, xor);
            }
            Expr::Immediate { dreg, data } => {
                w.put_u32(NFTA_IMMEDIATE_DREG, dreg.0);
                put_value(w, NFTA_IMMEDIATE_DATA, data);
            }
            Expr::Verdict(verdict) => {
                w.put_u32(NFTA_IMMEDIATE_DREG, Register::VERDICT.0);
                put_verdict(w, NFTA_IMMEDIATE_DATA, verdict);
            }
            Expr::Lookup { set, set_id, sreg, dreg, invert } => {
                w.put_str(NFTA_LOOKUP_SET, set);
                w.put_u32(NFTA_LOOKUP_SREG, sreg.0);
                if let Some(dreg) = dreg {
                    w.put_u32(NFTA_LOOKUP_DREG, dreg.0);
                }
                if let Some(id) = set_id {
                    w.put_u32(NFTA_LOOKUP_SET_ID, *id);
                }
                if *invert {
                    w.put_u32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
                }
            }
            Expr::Counter { packets, bytes } => {
                w.put_u64(NFTA_COUNTER_BYTES, *bytes);
                w.put_u64(NFTA_COUNTER_PACKETS, *packets);
            }
            Expr::Ct { key, dreg, direction } => {
                w.put_u32(NFTA_CT_DREG, dreg.0);
                w.put_u32(NFTA_CT_KEY, key.to_raw());
                if let Some(dir) = direction {
                    w.put(NFTA_CT_DIRECTION, &[*dir]);
                }
            }
            Expr::Nat { kind, family, addr_min, addr_max, proto_min, proto_max, flags } => {
                w.put_u32(NFTA_NAT_TYPE, kind.to_raw());
                w.put_u32(NFTA_NAT_FAMILY, family.to_raw());
                put_reg(w, NFTA_NAT_REG_ADDR_MIN, addr_min);
                put_reg(w, NFTA_NAT_REG_ADDR_MAX, addr_max);
                put_reg(w, NFTA_NAT_REG_PROTO_MIN, proto_min);
                put_reg(w, NFTA_NAT_REG_PROTO_MAX, proto_max);
                if *flags != 0 {
                    w.put_u32(NFTA_NAT_FLAGS, *flags);
                }
            }
            Expr::Masquerade { flags, proto_min, proto_max } => {
                if *flags != 0 {
                    w.put_u32(NFTA_MASQ_FLAGS, *flags);
                }
                put_reg(w, NFTA_MASQ_REG_PROTO_MIN, proto_min);
                put_reg(w, NFTA_MASQ_REG_PROTO_MAX, proto_max);
            }
            Expr::Fib { dreg, result, flags } => {
                w.put_u32(NFTA_FIB_DREG, dreg.0);
                w.put_u32(NFTA_FIB_RESULT, result.to_raw());
                w.put_u32(NFTA_FIB_FLAGS, *flags);
            }
            Expr::Unknown { .. } => unreachable!("handled by encode"),
        }
    }

    /// Reads one `NFTA_LIST_ELEM` of a rule's expression list.
    pub(crate) fn decode(elem: &Attr<'_>) -> Result<Expr, NftError> {
        let mut name = None;
        let mut data: &[u8] = &[];
        for attr in elem.nested() {
            let attr = attr?;
            match attr.kind {
                NFTA_EXPR_NAME => name = Some(attr.string()?),
                NFTA_EXPR_DATA => data = attr.payload,
                _ => {}
            }
        }
        let name = name.ok_or_else(|| NftError::Malformed("expression without name".into()))?;
        // A form of a known expression this crate does not model (e.g. a payload write,
        // written by another tool into a shared chain) must not make the whole listing
        // fail: keep it as raw bytes instead.
        Ok(Self::decode_known(&name, data).unwrap_or(Expr::Unknown { name, data: data.to_vec() }))
    }

    /// `None` for names this crate does not know or forms it cannot parse.
    fn decode_known(name: &str, data: &[u8]) -> Option<Expr> {
        let fields = Fields::parse(data).ok()?;
        let parse = || -> Result<Option<Expr>, NftError> {
            Ok(Some(match name {
                "payload" => Expr::Payload {
                    dreg: fields.reg(NFTA_PAYLOAD_DREG)?,
                    base: PayloadBase::from_raw(fields.u32(NFTA_PAYLOAD_BASE)?),
                    offset: fields.u32(NFTA_PAYLOAD_OFFSET)?,
                    len: fields.u32(NFTA_PAYLOAD_LEN)?,
                },
                "meta" => {
                    let key = MetaKey::from_raw(fields.u32(NFTA_META_KEY)?);
                    match fields.opt_reg(NFTA_META_DREG)? {
                        Some(dreg) => Expr::Meta { key, dreg },
                        None => Expr::MetaSet { key, sreg: fields.reg(NFTA_META_SREG)? },
                    }
                }
                "cmp" => Expr::Cmp {
                    sreg: fields.reg(NFTA_CMP_SREG)?,
                    op: CmpOp::from_raw(fields.u32(NFTA_CMP_OP)?),
                    data: parse_value(&fields.get(NFTA_CMP_DATA)?)?,
                },
                "bitwise" => Expr::Bitwise {
                    sreg: fields.reg(NFTA_BITWISE_SREG)?,
                    dreg: fields.reg(NFTA_BITWISE_DREG)?,
                    len: fields.u32(NFTA_BITWISE_LEN)?,
                    mask: parse_value(&fields.get(NFTA_BITWISE_MASK)?)?,
                    xor: parse_value(&fields.get(NFTA_BITWISE_XOR)?)?,
                },
                "immediate" => {
                    let dreg = fields.reg(NFTA_IMMEDIATE_DREG)?;
                    match parse_data(&fields.get(NFTA_IMMEDIATE_DATA)?)? {
                        Data::Verdict(verdict) => Expr::Verdict(verdict),
                        Data::Value(data) => Expr::Immediate { dreg, data },
                    }
                }
                "lookup" => Expr::Lookup {
                    set: fields.get(NFTA_LOOKUP_SET)?.string()?,
                    set_id: fields.opt_u32(NFTA_LOOKUP_SET_ID)?,
                    sreg: fields.reg(NFTA_LOOKUP_SREG)?,
                    dreg: fields.opt_reg(NFTA_LOOKUP_DREG)?,
                    invert: fields.opt_u32(NFTA_LOOKUP_FLAGS)?.unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
                },
                "counter" => Expr::Counter {
                    packets: fields.opt_u64(NFTA_COUNTER_PACKETS)?.unwrap_or(0),
                    bytes: fields.opt_u64(NFTA_COUNTER_BYTES)?.unwrap_or(0),
                },
                "ct" => Expr::Ct {
                    key: CtKey::from_raw(fields.u32(NFTA_CT_KEY)?),
                    dreg: fields.reg(NFTA_CT_DREG)?,
                    direction: fields.find(NFTA_CT_DIRECTION).and_then(|a| a.payload.first().copied()),
                },
                "nat" => Expr::Nat {
                    kind: NatKind::from_raw(fields.u32(NFTA_NAT_TYPE)?),
                    family: Family::from_raw(fields.u32(NFTA_NAT_FAMILY)?),
                    addr_min: fields.opt_reg(NFTA_NAT_REG_ADDR_MIN)?,
                    addr_max: fields.opt_reg(NFTA_NAT_REG_ADDR_MAX)?,
                    proto_min: fields.opt_reg(NFTA_NAT_REG_PROTO_MIN)?,
                    proto_max: fields.opt_reg(NFTA_NAT_REG_PROTO_MAX)?,
                    flags: fields.opt_u32(NFTA_NAT_FLAGS)?.unwrap_or(0),
                },
                "masq" => Expr::Masquerade {
                    flags: fields.opt_u32(NFTA_MASQ_FLAGS)?.unwrap_or(0),
                    proto_min: fields.opt_reg(NFTA_MASQ_REG_PROTO_MIN)?,
                    proto_max: fields.opt_reg(NFTA_MASQ_REG_PROTO_MAX)?,
                },
                "fib" => Expr::Fib {
                    dreg: fields.reg(NFTA_FIB_DREG)?,
                    result: FibResult::from_raw(fields.u32(NFTA_FIB_RESULT)?),
                    flags: fields.u32(NFTA_FIB_FLAGS)?,
                },
                _ => return Ok(None),
            }))
        };
        parse().ok().flatten()
    }
}

fn put_reg(w: &mut AttrWriter, kind: u16, reg: &Option<Register>) {
    if let Some(reg) = reg {
        w.put_u32(kind, reg.0);
    }
}

/// The attributes of one expression's data, looked up by type.
struct Fields<'a> {
    attrs: Vec<Attr<'a>>,
}

impl<'a> Fields<'a> {
    fn parse(data: &'a [u8]) -> Result<Self, NftError> {
        let attrs = super::attr::AttrIter::new(data).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { attrs })
    }

    fn find(&self, kind: u16) -> Option<Attr<'a>> {
        self.attrs.iter().copied().find(|a| a.kind == kind)
    }

    fn get(&self, kind: u16) -> Result<Attr<'a>, NftError> {
        self.find(kind).ok_or_else(|| NftError::Malformed(format!("expression lacks attribute {kind}")))
    }

    fn u32(&self, kind: u16) -> Result<u32, NftError> {
        self.get(kind)?.u32()
    }

    fn opt_u32(&self, kind: u16) -> Result<Option<u32>, NftError> {
        self.find(kind).map(|a| a.u32()).transpose()
    }

    fn opt_u64(&self, kind: u16) -> Result<Option<u64>, NftError> {
        self.find(kind).map(|a| a.u64()).transpose()
    }

    fn reg(&self, kind: u16) -> Result<Register, NftError> {
        Ok(Register(self.u32(kind)?))
    }

    fn opt_reg(&self, kind: u16) -> Result<Option<Register>, NftError> {
        Ok(self.opt_u32(kind)?.map(Register))
    }
}
