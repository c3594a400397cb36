//! `macspoofchk`: frames entering the bridge from a container's port must carry the
//! container's MAC as source, or they are dropped.
//!
//! Table `bridge cni_macspoofchk`: a filter chain at the bridge prerouting hook dispatches
//! on the input port through map `ports` to the attachment's chain, which returns for the
//! expected source MAC and drops the rest.

use crate::common::nft_attach::{self, DispatchTable, TablePart};
use cni_net::nft::{
    Batch, Chain, ChainType, Family, Field, Hook, KeyType, KeyValue, MapData, RuleBuilder, Set, SetElement,
    SetRef, Verdict,
};
use cni_net::MacAddr;
use cni_sdk::{Attachment, CniError, GcErrors, Request};

pub struct SpoofCheck;

const TABLE: &str = "cni_macspoofchk";

impl DispatchTable for SpoofCheck {
    const FAMILY: Family = Family::Bridge;
    const TABLE: &'static str = TABLE;

    fn bootstrap(batch: &mut Batch) {
        let ports = batch.add_set(
            &Set::named(Family::Bridge, TABLE, "ports", &[KeyType::IfName]).map_to(MapData::Verdict),
        );
        // Before anything else on the bridge looks at the frame.
        batch.add_chain(&Chain::base(
            Family::Bridge,
            TABLE,
            "prerouting",
            ChainType::Filter,
            Hook::Prerouting,
            -300,
        ));
        let dispatch =
            RuleBuilder::new(Family::Bridge, TABLE, "prerouting").load_key(&[Field::IifName]).vmap(&ports);
        batch.add_rule(&dispatch.build().expect("static spoof-check rule is valid"));
    }

    fn elements(key: &str, chain: &str) -> Result<Vec<(SetRef, SetElement)>, CniError> {
        Ok(vec![(
            SetRef::named(Family::Bridge, TABLE, "ports"),
            SetElement::new(&[KeyValue::IfName(key.to_string())])
                .with_verdict(Verdict::Goto(chain.to_string())),
        )])
    }
}

/// Frames from `host_port` must come from `mac`: one table's part of the attachment's
/// batch.
pub fn part<'a>(
    req: &Request,
    who: &'a Attachment,
    host_port: &str,
    mac: MacAddr,
) -> Result<TablePart<'a>, CniError> {
    TablePart::new::<SpoofCheck>(&req.conf.name, who, &[host_port.to_string()], |chain| {
        vec![
            RuleBuilder::new(Family::Bridge, TABLE, chain).ether_saddr(mac.0).ret(),
            RuleBuilder::new(Family::Bridge, TABLE, chain).drop(),
        ]
    })
}

pub fn del(req: &Request, host_port: Option<&str>) -> Result<(), CniError> {
    let keys = host_port.map(|p| vec![p.to_string()]);
    nft_attach::detach::<SpoofCheck>(
        &mut *nft_attach::client()?,
        &req.conf.name,
        &req.attachment(),
        keys.as_deref(),
    )
}

pub fn check(req: &Request) -> Result<(), CniError> {
    nft_attach::check_request::<SpoofCheck>(&mut *nft_attach::client()?, req, "MAC spoof check")
}

/// Removes the spoof-check state of `network`'s attachments not in `valid`.
pub fn gc(network: &str, valid: &[Attachment]) -> Result<(), GcErrors> {
    nft_attach::gc_table::<SpoofCheck>(network, valid)
}
