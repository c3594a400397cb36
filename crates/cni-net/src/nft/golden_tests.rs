//! Encoding checked against bytes `nft` 1.0.6 itself sends (captured with
//! `nft --debug=mnl`, attributes after the nfgenmsg header), and every expression type
//! encoded then decoded back. Attribute headers are host-endian: the goldens are for
//! little-endian machines.

use super::attr::{AttrIter, AttrWriter};
use super::*;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn only_op_attrs(batch: &Batch) -> String {
    assert_eq!(batch.ops.len(), 1);
    hex(&batch.ops[0].attrs)
}

#[cfg(target_endian = "little")]
#[test]
fn table_matches_nft() {
    let mut b = Batch::new();
    b.add_table(&Table::new(Family::Inet, "cni"));
    // NAME "cni\0", FLAGS 0
    assert_eq!(only_op_attrs(&b), "08000100636e69000800020000000000");
}

#[cfg(target_endian = "little")]
#[test]
fn base_chain_matches_nft() {
    let mut b = Batch::new();
    let chain = Chain::base(Family::Inet, "t", "post", ChainType::Nat, Hook::Postrouting, priority::SRCNAT)
        .with_policy(ChainPolicy::Accept);
    b.add_chain(&chain);
    // `nft add chain inet t post { type nat hook postrouting priority srcnat; policy accept; }`
    assert_eq!(
        only_op_attrs(&b),
        "060001007400000009000300706f737400000000080007006e61740008000500000000011400048008000100000000040800020000000064"
    );
}

#[cfg(target_endian = "little")]
#[test]
fn rule_with_comment_matches_nft() {
    // `nft add rule inet t c meta l4proto tcp accept comment "x"`
    let rule =
        RuleBuilder::new(Family::Inet, "t", "c").l4proto(proto::TCP).accept().comment("x").build().unwrap();
    let mut b = Batch::new();
    b.add_rule(&rule);
    assert_eq!(
        only_op_attrs(&b),
        concat!(
            "0600010074000000",
            "0600020063000000", // table "t", chain "c"
            "84000480",         // expressions
            "24000180",
            "090001006d65746100000000", // meta
            "1400028008000200000000100800010000000001",
            "2c000180",
            "08000100636d7000", // cmp eq reg 1 0x06
            "20000280080001000000000108000200000000000c0003800500010006000000",
            "30000180",
            "0e000100696d6d6564696174650000",
            "00", // immediate accept
            "1c0002800800010000000000100002800c0002800800010000000001",
            "0800070000027800" // userdata: comment "x"
        )
    );
}

#[cfg(target_endian = "little")]
#[test]
fn masquerade_rule_matches_nft() {
    // `nft add rule inet t c ip saddr 10.88.0.0/16 ip daddr != 224.0.0.0/4 masquerade`
    let rule = RuleBuilder::new(Family::Inet, "t", "c")
        .saddr("10.88.0.0/16".parse().unwrap())
        .daddr_not("224.0.0.0/4".parse().unwrap())
        .masquerade()
        .build()
        .unwrap();
    let mut b = Batch::new();
    b.add_rule(&rule);
    let want = "060001007400000006000200630000006c01048024000180090001006d6574610000000014000280080002000000000f08000100000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800500010002000000340001800c0001007061796c6f6164002400028008000100000000010800020000000001080003000000000c08000400000000022c00018008000100636d700020000280080001000000000108000200000000000c000380060001000a580000340001800c0001007061796c6f616400240002800800010000000001080002000000000108000300000000100800040000000004440001800c0001006269747769736500340002800800010000000001080002000000000108000300000000040c00048008000100f00000000c00058008000100000000002c00018008000100636d700020000280080001000000000108000200000000010c00038008000100e000000014000180090001006d6173710000000004000280";
    assert_eq!(only_op_attrs(&b), want);
}

#[test]
fn batch_frames_operations_between_begin_and_end() {
    let mut b = Batch::new();
    b.add_table(&Table::new(Family::Inet, "cni"));
    let bytes = b.encode(100);
    let msgs = msg::split_messages(&bytes).unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[0].kind, 0x10);
    assert_eq!(msgs[0].seq, 100);
    // res_id of begin/end is the nf_tables subsystem, big-endian.
    assert_eq!(&msgs[0].payload()[..4], &[0, 0, 0, 10]);
    assert_eq!(msgs[1].kind, 10 << 8);
    assert_eq!(msgs[1].seq, 101);
    // REQUEST | ACK | CREATE
    assert_eq!(msgs[1].flags, 0x1 | 0x4 | 0x400);
    assert_eq!(msgs[1].payload()[0], 1, "inet family");
    assert_eq!(msgs[2].kind, 0x11);
    assert_eq!(msgs[2].seq, 102);
}

fn round_trip(expr: Expr) {
    let mut w = AttrWriter::new();
    expr.encode(&mut w);
    let attrs: Vec<_> = AttrIter::new(&w.buf).collect::<Result<_, _>>().unwrap();
    assert_eq!(attrs.len(), 1);
    let decoded = Expr::decode(&attrs[0]).unwrap();
    assert_eq!(decoded, expr);
}

#[test]
fn every_expression_type_round_trips() {
    let r1 = Register::R1;
    let exprs = vec![
        Expr::Payload { dreg: r1, base: PayloadBase::Network, offset: 12, len: 4 },
        Expr::Payload { dreg: Register::reg32(2), base: PayloadBase::Transport, offset: 2, len: 2 },
        Expr::Payload { dreg: r1, base: PayloadBase::LinkLayer, offset: 6, len: 6 },
        Expr::Meta { key: MetaKey::IifName, dreg: r1 },
        Expr::Meta { key: MetaKey::Other(99), dreg: r1 },
        Expr::MetaSet { key: MetaKey::Mark, sreg: Register::R2 },
        Expr::Cmp { sreg: r1, op: CmpOp::Gte, data: vec![1, 2, 3] },
        Expr::Bitwise {
            sreg: r1,
            dreg: Register::R3,
            len: 4,
            mask: vec![255, 0, 0, 0],
            xor: vec![0, 0, 0, 1],
        },
        Expr::Immediate { dreg: Register::R2, data: vec![0, 80] },
        Expr::Verdict(Verdict::Accept),
        Expr::Verdict(Verdict::Drop),
        Expr::Verdict(Verdict::Return),
        Expr::Verdict(Verdict::Continue),
        Expr::Verdict(Verdict::Break),
        Expr::Verdict(Verdict::Jump("CNI-1".into())),
        Expr::Verdict(Verdict::Goto("CNI-2".into())),
        Expr::Lookup { set: "s".into(), set_id: Some(3), sreg: r1, dreg: None, invert: true },
        Expr::Lookup {
            set: "m".into(),
            set_id: None,
            sreg: r1,
            dreg: Some(Register::VERDICT),
            invert: false,
        },
        Expr::Counter { packets: 7, bytes: 900 },
        Expr::Ct { key: CtKey::State, dreg: r1, direction: None },
        Expr::Ct { key: CtKey::ProtoDst, dreg: r1, direction: Some(1) },
        Expr::Nat {
            kind: NatKind::Dnat,
            family: Family::Ipv6,
            addr_min: Some(r1),
            addr_max: Some(Register::R2),
            proto_min: Some(Register::R3),
            proto_max: Some(Register::R4),
            flags: nat_flags::PERSISTENT,
        },
        Expr::Nat {
            kind: NatKind::Snat,
            family: Family::Ipv4,
            addr_min: Some(r1),
            addr_max: None,
            proto_min: None,
            proto_max: None,
            flags: 0,
        },
        Expr::Masquerade {
            flags: nat_flags::PROTO_RANDOM_FULLY,
            proto_min: Some(r1),
            proto_max: Some(Register::R2),
        },
        Expr::Masquerade { flags: 0, proto_min: None, proto_max: None },
        Expr::Fib { dreg: r1, result: FibResult::AddrType, flags: fib_flags::DADDR },
        Expr::Unknown { name: "limit".into(), data: vec![8, 0, 1, 0, 0, 0, 0, 5] },
    ];
    for expr in exprs {
        round_trip(expr);
    }
}

#[test]
fn listed_rule_decodes_handle_comment_and_exprs() {
    let rule = RuleBuilder::new(Family::Inet, "t", "c")
        .iifname("eth0")
        .ct_state(ct_state::NEW)
        .jump("x")
        .comment("ctr 42")
        .build()
        .unwrap();
    let mut w = AttrWriter::new();
    rule.encode(&mut w, None);
    w.put_u64(3, 77); // NFTA_RULE_HANDLE, as the kernel adds it
    let mut bytes = Vec::new();
    msg::put_message(&mut bytes, msg::nft_type(6), 0, 1, Family::Inet.byte(), 0, &w.buf);
    let msgs = msg::split_messages(&bytes).unwrap();
    let listed = ListedRule::decode(&msgs[0].into()).unwrap();
    assert_eq!(listed.handle, 77);
    assert_eq!(listed.rule, rule);
}

#[test]
fn builder_rejects_what_cannot_work() {
    let v6_in_ip = RuleBuilder::new(Family::Ipv4, "t", "c").saddr("fd00::/8".parse().unwrap()).build();
    assert!(matches!(v6_in_ip, Err(NftError::Invalid(_))));
    let both_versions = RuleBuilder::new(Family::Inet, "t", "c")
        .saddr("10.0.0.0/8".parse().unwrap())
        .daddr("fd00::/8".parse().unwrap())
        .build();
    assert!(both_versions.is_err());
    let long_name = RuleBuilder::new(Family::Inet, "t", "c").iifname("a-very-long-interface").build();
    assert!(long_name.is_err());
    let nat_in_bridge =
        RuleBuilder::new(Family::Bridge, "t", "c").dnat("10.0.0.1".parse().unwrap(), None).build();
    assert!(nat_in_bridge.is_err());
}

#[test]
fn prefixes_load_only_what_they_need() {
    let rule = |net: &str| {
        RuleBuilder::new(Family::Ipv4, "t", "c").daddr(net.parse().unwrap()).build().unwrap().exprs
    };
    let payload_len = |exprs: &[Expr]| match exprs[0] {
        Expr::Payload { len, .. } => len,
        _ => panic!("payload first"),
    };
    assert_eq!(payload_len(&rule("10.0.0.0/8")), 1);
    assert_eq!(rule("10.0.0.0/8").len(), 2);
    assert_eq!(payload_len(&rule("10.1.2.3/32")), 4);
    let odd = rule("10.64.0.0/10");
    assert_eq!(payload_len(&odd), 4);
    assert!(matches!(&odd[1], Expr::Bitwise { mask, .. } if mask == &[255, 192, 0, 0]));
    assert!(rule("0.0.0.0/0").is_empty());
}

#[test]
fn unmodelled_form_of_a_known_expression_decodes_as_unknown() {
    // A payload *write* (sreg instead of dreg), as another tool might put in a chain.
    let mut data = AttrWriter::new();
    data.put_u32(5, 1); // NFTA_PAYLOAD_SREG
    data.put_u32(2, 1);
    data.put_u32(3, 12);
    data.put_u32(4, 4);
    let mut w = AttrWriter::new();
    w.nest(1, |w| {
        w.put_str(1, "payload");
        w.nest(2, |w| w.buf.extend_from_slice(&data.buf));
    });
    let attr = AttrIter::new(&w.buf).next().unwrap().unwrap();
    match Expr::decode(&attr).unwrap() {
        Expr::Unknown { name, data: raw } => {
            assert_eq!(name, "payload");
            assert_eq!(raw, data.buf);
        }
        other => panic!("decoded as {other:?}"),
    }
}
