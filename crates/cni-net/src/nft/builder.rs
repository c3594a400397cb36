//! A small builder for the rules CNI plugins write: address/port/interface/MAC matches,
//! conntrack and fib checks, and accept/drop/jump/NAT/mark actions. It emits the same
//! expressions `nft` would, so `nft list` shows the rule the way an operator would write it.

use std::net::IpAddr;

use ipnet::IpNet;

use super::data::Family;
use super::error::NftError;
use super::expr::{
    fib_flags, CmpOp, CtKey, Expr, FibResult, MetaKey, NatKind, PayloadBase, Register, Verdict,
};
use super::rule::Rule;
use super::set::{ifname_bytes, SetRef};

/// IP protocol numbers for [`RuleBuilder::l4proto`] and [`RuleBuilder::dport`].
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// `RTN_LOCAL`: the address type of an address assigned to this host.
const RTN_LOCAL: u32 = 2;
/// `ARPHRD_ETHER`.
const ARPHRD_ETHER: u16 = 1;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// A packet field that can be loaded into registers (for set lookups and concatenations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// IPv4 source address.
    IpSaddr,
    /// IPv4 destination address.
    IpDaddr,
    /// IPv6 source address.
    Ip6Saddr,
    /// IPv6 destination address.
    Ip6Daddr,
    /// Layer-4 protocol number.
    L4Proto,
    /// Transport source port.
    SrcPort,
    /// Transport destination port.
    DstPort,
    /// Input interface name.
    IifName,
    /// Output interface name.
    OifName,
    /// Ethernet source address.
    EtherSaddr,
    /// Packet mark.
    Mark,
}

impl Field {
    fn len(self) -> u32 {
        match self {
            Field::IpSaddr | Field::IpDaddr | Field::Mark => 4,
            Field::Ip6Saddr | Field::Ip6Daddr | Field::IifName | Field::OifName => 16,
            Field::L4Proto => 1,
            Field::SrcPort | Field::DstPort => 2,
            Field::EtherSaddr => 6,
        }
    }

    fn load(self, dreg: Register) -> Expr {
        let payload = |base, offset, len| Expr::Payload { dreg, base, offset, len };
        match self {
            Field::IpSaddr => payload(PayloadBase::Network, 12, 4),
            Field::IpDaddr => payload(PayloadBase::Network, 16, 4),
            Field::Ip6Saddr => payload(PayloadBase::Network, 8, 16),
            Field::Ip6Daddr => payload(PayloadBase::Network, 24, 16),
            Field::SrcPort => payload(PayloadBase::Transport, 0, 2),
            Field::DstPort => payload(PayloadBase::Transport, 2, 2),
            Field::EtherSaddr => payload(PayloadBase::LinkLayer, 6, 6),
            Field::L4Proto => Expr::Meta { key: MetaKey::L4Proto, dreg },
            Field::IifName => Expr::Meta { key: MetaKey::IifName, dreg },
            Field::OifName => Expr::Meta { key: MetaKey::OifName, dreg },
            Field::Mark => Expr::Meta { key: MetaKey::Mark, dreg },
        }
    }
}

/// Builds a [`Rule`] from common matches and actions, in the order they are called.
#[derive(Debug, Clone)]
pub struct RuleBuilder {
    rule: Rule,
    error: Option<String>,
    /// The IP version already checked by this rule (`Some(true)` for IPv6), so the check
    /// is emitted once, as `nft` does.
    ip_version: Option<bool>,
}

impl RuleBuilder {
    /// Starts a rule for `family table chain`.
    pub fn new(family: Family, table: impl Into<String>, chain: impl Into<String>) -> Self {
        Self { rule: Rule::new(family, table, chain), error: None, ip_version: None }
    }

    /// Tags the rule with a comment (shown by `nft list`, returned by `list_rules`).
    pub fn comment(mut self, comment: impl Into<String>) -> Self {
        self.rule.comment = Some(comment.into());
        self
    }

    /// Appends a raw expression.
    pub fn expr(mut self, expr: Expr) -> Self {
        self.rule.exprs.push(expr);
        self
    }

    fn cmp(self, op: CmpOp, data: Vec<u8>) -> Self {
        self.expr(Expr::Cmp { sreg: Register::R1, op, data })
    }

    fn fail(mut self, why: String) -> Self {
        self.error.get_or_insert(why);
        self
    }

    /// In tables that see several protocols, first check the packet's protocol so that
    /// an IPv4 address is never compared with IPv6 header bytes (what `nft` does too).
    fn require_ip_version(mut self, v6: bool) -> Self {
        match self.ip_version {
            Some(checked) if checked == v6 => return self,
            Some(_) => return self.fail("rule matches both IPv4 and IPv6 fields".into()),
            None => self.ip_version = Some(v6),
        }
        match (self.rule.family, v6) {
            (Family::Inet, _) => {
                let nfproto = if v6 { Family::Ipv6 } else { Family::Ipv4 };
                self.expr(Expr::Meta { key: MetaKey::NfProto, dreg: Register::R1 })
                    .cmp(CmpOp::Eq, vec![nfproto.byte()])
            }
            (Family::Bridge | Family::Netdev, _) => {
                let ethertype = if v6 { ETH_P_IPV6 } else { ETH_P_IP };
                self.expr(Expr::Payload {
                    dreg: Register::R1,
                    base: PayloadBase::LinkLayer,
                    offset: 12,
                    len: 2,
                })
                .cmp(CmpOp::Eq, ethertype.to_be_bytes().to_vec())
            }
            (Family::Ipv4, false) | (Family::Ipv6, true) => self,
            (family, _) => {
                let version = if v6 { "IPv6" } else { "IPv4" };
                self.fail(format!("{version} match in a {} table", family.nft_name()))
            }
        }
    }

    fn addr(self, net: IpNet, source: bool, op: CmpOp) -> Self {
        let v6 = matches!(net, IpNet::V6(_));
        let field = match (v6, source) {
            (false, true) => Field::IpSaddr,
            (false, false) => Field::IpDaddr,
            (true, true) => Field::Ip6Saddr,
            (true, false) => Field::Ip6Daddr,
        };
        let mut b = self.require_ip_version(v6);
        let network = match net.trunc().network() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mask = match net.netmask() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let prefix = usize::from(net.prefix_len());
        let Expr::Payload { base, offset, len, .. } = field.load(Register::R1) else {
            unreachable!("addresses are payload fields")
        };
        if prefix % 8 == 0 {
            // Byte-aligned prefix: load only the significant bytes, as nft does.
            let bytes = prefix / 8;
            if bytes == 0 {
                return b; // /0 matches every address of this version
            }
            b = b.expr(Expr::Payload { dreg: Register::R1, base, offset, len: bytes as u32 });
            return b.cmp(op, network[..bytes].to_vec());
        }
        b = b.expr(Expr::Payload { dreg: Register::R1, base, offset, len });
        b = b.expr(Expr::Bitwise {
            sreg: Register::R1,
            dreg: Register::R1,
            len,
            mask,
            xor: vec![0; len as usize],
        });
        b.cmp(op, network)
    }

    /// `ip saddr <net>` / `ip6 saddr <net>`.
    pub fn saddr(self, net: IpNet) -> Self {
        self.addr(net, true, CmpOp::Eq)
    }

    /// `ip saddr != <net>`.
    pub fn saddr_not(self, net: IpNet) -> Self {
        self.addr(net, true, CmpOp::Neq)
    }

    /// `ip daddr <net>` / `ip6 daddr <net>`.
    pub fn daddr(self, net: IpNet) -> Self {
        self.addr(net, false, CmpOp::Eq)
    }

    /// `ip daddr != <net>`.
    pub fn daddr_not(self, net: IpNet) -> Self {
        self.addr(net, false, CmpOp::Neq)
    }

    /// `meta l4proto <proto>`.
    pub fn l4proto(self, proto: u8) -> Self {
        self.expr(Field::L4Proto.load(Register::R1)).cmp(CmpOp::Eq, vec![proto])
    }

    /// `<tcp|udp|sctp> dport <port>`.
    pub fn dport(self, proto: u8, port: u16) -> Self {
        self.l4proto(proto)
            .expr(Field::DstPort.load(Register::R1))
            .cmp(CmpOp::Eq, port.to_be_bytes().to_vec())
    }

    /// `<tcp|udp|sctp> sport <port>`.
    pub fn sport(self, proto: u8, port: u16) -> Self {
        self.l4proto(proto)
            .expr(Field::SrcPort.load(Register::R1))
            .cmp(CmpOp::Eq, port.to_be_bytes().to_vec())
    }

    fn ifname(self, field: Field, name: &str, op: CmpOp) -> Self {
        if name.is_empty() || name.len() > 15 {
            return self.fail(format!("invalid interface name {name:?}"));
        }
        self.expr(field.load(Register::R1)).cmp(op, ifname_bytes(name).to_vec())
    }

    /// `iifname "<name>"`.
    pub fn iifname(self, name: &str) -> Self {
        self.ifname(Field::IifName, name, CmpOp::Eq)
    }

    /// `iifname != "<name>"`.
    pub fn iifname_not(self, name: &str) -> Self {
        self.ifname(Field::IifName, name, CmpOp::Neq)
    }

    /// `oifname "<name>"`.
    pub fn oifname(self, name: &str) -> Self {
        self.ifname(Field::OifName, name, CmpOp::Eq)
    }

    /// `oifname != "<name>"`.
    pub fn oifname_not(self, name: &str) -> Self {
        self.ifname(Field::OifName, name, CmpOp::Neq)
    }

    fn ether_saddr_cmp(self, mac: [u8; 6], op: CmpOp) -> Self {
        let b = match self.rule.family {
            Family::Bridge | Family::Netdev => self,
            // Elsewhere the link-layer header is only meaningful on Ethernet devices.
            _ => self
                .expr(Expr::Meta { key: MetaKey::IifType, dreg: Register::R1 })
                .cmp(CmpOp::Eq, ARPHRD_ETHER.to_ne_bytes().to_vec()),
        };
        b.expr(Field::EtherSaddr.load(Register::R1)).cmp(op, mac.to_vec())
    }

    /// `ether saddr <mac>`.
    pub fn ether_saddr(self, mac: [u8; 6]) -> Self {
        self.ether_saddr_cmp(mac, CmpOp::Eq)
    }

    /// `ether saddr != <mac>` (the MAC-spoofing check).
    pub fn ether_saddr_not(self, mac: [u8; 6]) -> Self {
        self.ether_saddr_cmp(mac, CmpOp::Neq)
    }

    /// `fib daddr type local`: the destination is an address of this host.
    pub fn fib_daddr_local(self) -> Self {
        self.expr(Expr::Fib { dreg: Register::R1, result: FibResult::AddrType, flags: fib_flags::DADDR })
            .cmp(CmpOp::Eq, RTN_LOCAL.to_ne_bytes().to_vec())
    }

    /// `ct state <states>` with bits from [`ct_state`] (any of them matches).
    pub fn ct_state(self, states: u32) -> Self {
        self.expr(Expr::Ct { key: CtKey::State, dreg: Register::R1, direction: None }).mask_nonzero(states)
    }

    /// `meta mark & <bits> != 0`.
    pub fn mark_any(self, bits: u32) -> Self {
        self.expr(Field::Mark.load(Register::R1)).mask_nonzero(bits)
    }

    fn mask_nonzero(self, bits: u32) -> Self {
        self.expr(Expr::Bitwise {
            sreg: Register::R1,
            dreg: Register::R1,
            len: 4,
            mask: bits.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        })
        .cmp(CmpOp::Neq, vec![0; 4])
    }

    /// Loads `fields` into consecutive 4-byte registers starting at register 1, ready for
    /// [`in_set`](Self::in_set) or [`vmap`](Self::vmap) (several fields make a
    /// concatenation key). IP fields get their protocol check first.
    pub fn load_key(mut self, fields: &[Field]) -> Self {
        for field in fields {
            match field {
                Field::IpSaddr | Field::IpDaddr => self = self.require_ip_version(false),
                Field::Ip6Saddr | Field::Ip6Daddr => self = self.require_ip_version(true),
                _ => {}
            }
        }
        let mut reg32 = 0;
        for field in fields {
            self = self.expr(field.load(Register::reg32(reg32)));
            reg32 += field.len().div_ceil(4);
        }
        if reg32 > 16 {
            return self.fail("key longer than the 64 bytes of registers".into());
        }
        self
    }

    fn lookup(self, set: &SetRef, dreg: Option<Register>, invert: bool) -> Self {
        self.expr(Expr::Lookup { set: set.name.clone(), set_id: set.id, sreg: Register::R1, dreg, invert })
    }

    /// Matches if the loaded key is in `set`.
    pub fn in_set(self, set: &SetRef) -> Self {
        self.lookup(set, None, false)
    }

    /// Matches if the loaded key is not in `set`.
    pub fn not_in_set(self, set: &SetRef) -> Self {
        self.lookup(set, None, true)
    }

    /// Takes the verdict from verdict map `set` for the loaded key.
    pub fn vmap(self, set: &SetRef) -> Self {
        self.lookup(set, Some(Register::VERDICT), false)
    }

    /// `counter`.
    pub fn counter(self) -> Self {
        self.expr(Expr::Counter { packets: 0, bytes: 0 })
    }

    /// Ends with a verdict.
    pub fn verdict(self, verdict: Verdict) -> Self {
        self.expr(Expr::Verdict(verdict))
    }

    /// `accept`.
    pub fn accept(self) -> Self {
        self.verdict(Verdict::Accept)
    }

    /// `drop`.
    pub fn drop(self) -> Self {
        self.verdict(Verdict::Drop)
    }

    /// `return`.
    pub fn ret(self) -> Self {
        self.verdict(Verdict::Return)
    }

    /// `jump <chain>`.
    pub fn jump(self, chain: impl Into<String>) -> Self {
        self.verdict(Verdict::Jump(chain.into()))
    }

    /// `goto <chain>`.
    pub fn goto(self, chain: impl Into<String>) -> Self {
        self.verdict(Verdict::Goto(chain.into()))
    }

    /// `meta mark set <value>`.
    pub fn set_mark(self, value: u32) -> Self {
        self.expr(Expr::Immediate { dreg: Register::R1, data: value.to_ne_bytes().to_vec() })
            .expr(Expr::MetaSet { key: MetaKey::Mark, sreg: Register::R1 })
    }

    /// `meta mark set meta mark | <bits>`.
    pub fn or_mark(self, bits: u32) -> Self {
        self.expr(Field::Mark.load(Register::R1))
            .expr(Expr::Bitwise {
                sreg: Register::R1,
                dreg: Register::R1,
                len: 4,
                mask: (!bits).to_ne_bytes().to_vec(),
                xor: bits.to_ne_bytes().to_vec(),
            })
            .expr(Expr::MetaSet { key: MetaKey::Mark, sreg: Register::R1 })
    }

    /// `masquerade`.
    pub fn masquerade(self) -> Self {
        self.expr(Expr::Masquerade { flags: 0, proto_min: None, proto_max: None })
    }

    /// `masquerade to :<min>-<max>`.
    pub fn masquerade_ports(self, min: u16, max: u16) -> Self {
        self.expr(Expr::Immediate { dreg: Register::R1, data: min.to_be_bytes().to_vec() })
            .expr(Expr::Immediate { dreg: Register::R2, data: max.to_be_bytes().to_vec() })
            .expr(Expr::Masquerade { flags: 0, proto_min: Some(Register::R1), proto_max: Some(Register::R2) })
    }

    fn nat(self, kind: NatKind, addr: IpAddr, port: Option<u16>) -> Self {
        let (family, bytes) = match addr {
            IpAddr::V4(a) => (Family::Ipv4, a.octets().to_vec()),
            IpAddr::V6(a) => (Family::Ipv6, a.octets().to_vec()),
        };
        let table_ok = matches!(
            (self.rule.family, family),
            (Family::Inet, _) | (Family::Ipv4, Family::Ipv4) | (Family::Ipv6, Family::Ipv6)
        );
        if !table_ok {
            let table = self.rule.family.nft_name();
            return self.fail(format!("cannot NAT to {addr} in a {table} table"));
        }
        let mut b = self.expr(Expr::Immediate { dreg: Register::R1, data: bytes });
        if let Some(port) = port {
            b = b.expr(Expr::Immediate { dreg: Register::R2, data: port.to_be_bytes().to_vec() });
        }
        b.expr(Expr::Nat {
            kind,
            family,
            addr_min: Some(Register::R1),
            addr_max: None,
            proto_min: port.map(|_| Register::R2),
            proto_max: None,
            flags: 0,
        })
    }

    /// `dnat ip to <loaded key> map @set` (or `ip6`): the map's values are
    /// `ipv4_addr . inet_service` (`ipv6_addr . inet_service` for IPv6), so one rule and
    /// one element per port mapping replace a rule per mapping.
    pub fn dnat_map(self, set: &SetRef, ipv6: bool) -> Self {
        let (family, addr_regs) = if ipv6 { (Family::Ipv6, 4) } else { (Family::Ipv4, 1) };
        let table_ok = matches!(
            (self.rule.family, family),
            (Family::Inet, _) | (Family::Ipv4, Family::Ipv4) | (Family::Ipv6, Family::Ipv6)
        );
        if !table_ok {
            let table = self.rule.family.nft_name();
            return self.fail(format!("cannot NAT to {} in a {table} table", family.nft_name()));
        }
        self.lookup(set, Some(Register::R1), false).expr(Expr::Nat {
            kind: NatKind::Dnat,
            family,
            addr_min: Some(Register::R1),
            addr_max: None,
            proto_min: Some(Register::reg32(addr_regs)),
            proto_max: None,
            flags: 0,
        })
    }

    /// `snat to <addr>[:<port>]`.
    pub fn snat(self, addr: IpAddr, port: Option<u16>) -> Self {
        self.nat(NatKind::Snat, addr, port)
    }

    /// `dnat to <addr>[:<port>]`.
    pub fn dnat(self, addr: IpAddr, port: Option<u16>) -> Self {
        self.nat(NatKind::Dnat, addr, port)
    }

    /// The finished rule, or the first problem found while building it.
    pub fn build(self) -> Result<Rule, NftError> {
        match self.error {
            Some(why) => Err(NftError::Invalid(why)),
            None => Ok(self.rule),
        }
    }
}
