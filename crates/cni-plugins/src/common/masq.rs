//! `ipMasq` for bridge and ptp: traffic from a container's address to anywhere outside its
//! subnet (and not multicast) leaves with the host's address.
//!
//! Table `inet cni_plugins_masquerade` (the reference's name): a nat base chain at
//! srcnat returns for multicast, then dispatches on the source address through maps
//! `masq4`/`masq6` to the attachment's chain, which masquerades unless the destination is
//! in that address's subnet.

use super::nft_attach::{self, DispatchTable, TablePart};
use super::reference_state;
use cni_net::nft::{
    priority, Batch, Chain, ChainType, Family, Field, Hook, KeyType, KeyValue, MapData, RuleBuilder, Set,
    SetElement, SetRef, Verdict,
};
use cni_sdk::{Attachment, CniError, CniResult, GcErrors, Request};
use std::net::IpAddr;

pub struct Masquerade;

const TABLE: &str = "cni_plugins_masquerade";

impl DispatchTable for Masquerade {
    const FAMILY: Family = Family::Inet;
    const TABLE: &'static str = TABLE;

    fn bootstrap(batch: &mut Batch) {
        let masq4 = batch.add_set(
            &Set::named(Family::Inet, TABLE, "masq4", &[KeyType::Ipv4Addr]).map_to(MapData::Verdict),
        );
        let masq6 = batch.add_set(
            &Set::named(Family::Inet, TABLE, "masq6", &[KeyType::Ipv6Addr]).map_to(MapData::Verdict),
        );
        batch.add_chain(&Chain::base(
            Family::Inet,
            TABLE,
            "postrouting",
            ChainType::Nat,
            Hook::Postrouting,
            priority::SRCNAT,
        ));
        let rule = |r: RuleBuilder| r.build().expect("static masquerade rules are valid");
        let base = || RuleBuilder::new(Family::Inet, TABLE, "postrouting");
        batch.add_rule(&rule(base().daddr("224.0.0.0/4".parse().expect("valid")).ret()));
        batch.add_rule(&rule(base().daddr("ff00::/8".parse().expect("valid")).ret()));
        batch.add_rule(&rule(base().load_key(&[Field::IpSaddr]).vmap(&masq4)));
        batch.add_rule(&rule(base().load_key(&[Field::Ip6Saddr]).vmap(&masq6)));
    }

    fn elements(key: &str, chain: &str) -> Result<Vec<(SetRef, SetElement)>, CniError> {
        let ip: IpAddr =
            key.parse().map_err(|_| CniError::internal(format!("bad masquerade key {key:?}")))?;
        let (map, value) = match ip {
            IpAddr::V4(a) => ("masq4", KeyValue::Ipv4(a)),
            IpAddr::V6(a) => ("masq6", KeyValue::Ipv6(a)),
        };
        Ok(vec![(
            SetRef::named(Family::Inet, TABLE, map),
            SetElement::new(&[value]).with_verdict(Verdict::Goto(chain.to_string())),
        )])
    }
}

/// Masquerades the container interface's addresses of `result` (interface `iface`).
pub fn add(req: &Request, result: &CniResult, iface: usize) -> Result<(), CniError> {
    let who = req.attachment();
    nft_attach::attach_all(
        &mut *nft_attach::client()?,
        &req.conf.name,
        &who,
        &[part(req, &who, result, iface)?],
    )
}

/// What [`add`] adds, as one table's part of an attachment's batch.
pub fn part<'a>(
    req: &Request,
    who: &'a Attachment,
    result: &CniResult,
    iface: usize,
) -> Result<TablePart<'a>, CniError> {
    let ips: Vec<_> = result.ips_of(Some(iface)).map(|ip| ip.address).collect();
    let keys: Vec<String> = ips.iter().map(|net| net.addr().to_string()).collect();
    TablePart::new::<Masquerade>(&req.conf.name, who, &keys, |chain| {
        ips.iter()
            .map(|net| {
                let host = ipnet::IpNet::new(net.addr(), net.max_prefix_len()).expect("full prefix");
                RuleBuilder::new(Family::Inet, TABLE, chain).saddr(host).daddr_not(net.trunc()).masquerade()
            })
            .collect()
    })
}

/// Removes the attachment's masquerade state; addresses from prevResult when known.
pub fn del(req: &Request, prev: Option<&CniResult>) -> Result<(), CniError> {
    let keys: Option<Vec<String>> =
        prev.map(|r| r.ips.iter().map(|ip| ip.address.addr().to_string()).collect());
    let mut nft = nft_attach::client()?;
    let ours = nft_attach::detach::<Masquerade>(&mut nft, &req.conf.name, &req.attachment(), keys.as_deref());
    // What the reference plugins made for this attachment on a node swapped to ours.
    let reference = reference_state::remove_masquerade(&mut nft, &req.conf.name, &req.container_id);
    ours.and(reference)
}

pub fn check(req: &Request) -> Result<(), CniError> {
    nft_attach::check_request::<Masquerade>(&mut *nft_attach::client()?, req, "masquerade")
}

/// Removes the masquerade state of `network`'s attachments not in `valid`.
pub fn gc(network: &str, valid: &[Attachment]) -> Result<(), GcErrors> {
    let mut errors = GcErrors::new();
    errors.merge(nft_attach::gc_table::<Masquerade>(network, valid));
    let reference =
        nft_attach::client().and_then(|mut nft| reference_state::gc_masquerade(&mut nft, network, valid));
    errors.record("the reference plugins' masquerade chains", reference);
    errors.into_result()
}
