//! A match-all filter that redirects every packet to another device (`mirred egress
//! redirect`), the way traffic received on a device is sent through an IFB to be shaped.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionMirrorOption, TcActionOption, TcActionType, TcAttribute,
    TcFilterU32Option, TcHeader, TcMessage, TcMirror, TcMirrorActionType, TcOption, TcU32Key, TcU32Selector,
    TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{header_index, TcHandle, ETH_P_ALL};
use crate::error::Result;
use crate::netlink::{context, Netlink};

/// "Redirect everything arriving at `parent` of device `index` to `target_index`".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectFilter {
    pub index: u32,
    /// Usually [`TcHandle::INGRESS_HOOK`].
    pub parent: TcHandle,
    /// Filters run in ascending priority; the priority also names the filter for deletion.
    pub priority: u16,
    pub target_index: u32,
}

/// A filter as the kernel reports it. A `u32` filter is reported as several entries (its
/// hash table and its keys); only the key entry carries the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcFilter {
    pub kind: String,
    pub priority: u16,
    /// Ethertype (host order); [`ETH_P_ALL`] for every protocol.
    pub protocol: u16,
    pub handle: u32,
    /// The target of a `mirred egress redirect` action, if the filter has one.
    pub redirect_to: Option<u32>,
}

/// `tcm_info` of a filter: priority in the upper half, ethertype (network order) in the
/// lower.
fn filter_info(priority: u16, protocol: u16) -> u32 {
    (u32::from(priority) << 16) | u32::from(protocol.to_be())
}

impl RedirectFilter {
    pub(super) fn to_message(self) -> Result<TcMessage> {
        let header = TcHeader {
            index: header_index(self.index)?,
            parent: self.parent.into(),
            info: filter_info(self.priority, ETH_P_ALL),
            ..Default::default()
        };
        // One key with mask 0 matches every packet; "terminal" ends the u32 walk there.
        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = 1;
        selector.keys = vec![TcU32Key::default()];
        let mut mirror = TcMirror::default();
        // A redirected packet is consumed ("stolen") by the action.
        mirror.generic.action = TcActionType::Stolen;
        mirror.eaction = TcMirrorActionType::EgressRedir;
        mirror.ifindex = self.target_index;
        let mut action = TcAction::default();
        action.attributes = vec![
            TcActionAttribute::Kind("mirred".to_string()),
            TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(mirror))]),
        ];
        let attributes = vec![
            TcAttribute::Kind("u32".to_string()),
            TcAttribute::Options(vec![
                TcOption::U32(TcFilterU32Option::Selector(selector)),
                TcOption::U32(TcFilterU32Option::Action(vec![action])),
            ]),
        ];
        Ok(TcMessage::from_parts(header, attributes))
    }
}

impl TcFilter {
    pub(crate) fn from_message(message: &TcMessage) -> TcFilter {
        let mut filter = TcFilter {
            kind: String::new(),
            priority: (message.header.info >> 16) as u16,
            protocol: u16::from_be(message.header.info as u16),
            handle: message.header.handle.into(),
            redirect_to: None,
        };
        for attribute in &message.attributes {
            match attribute {
                TcAttribute::Kind(kind) => filter.kind = kind.clone(),
                TcAttribute::Options(options) => {
                    for option in options {
                        if let TcOption::U32(TcFilterU32Option::Action(actions)) = option {
                            filter.redirect_to = filter.redirect_to.or_else(|| redirect_target(actions));
                        }
                    }
                }
                _ => {}
            }
        }
        filter
    }
}

fn redirect_target(actions: &[TcAction]) -> Option<u32> {
    actions.iter().flat_map(|action| &action.attributes).find_map(|attribute| match attribute {
        TcActionAttribute::Options(options) => options.iter().find_map(|option| match option {
            TcActionOption::Mirror(TcActionMirrorOption::Parms(mirror))
                if mirror.eaction == TcMirrorActionType::EgressRedir =>
            {
                Some(mirror.ifindex)
            }
            _ => None,
        }),
        _ => None,
    })
}

impl Netlink {
    /// Adds a match-all filter redirecting every packet at `filter.parent` to
    /// `filter.target_index`. The parent qdisc (e.g. `ingress`) must exist.
    pub fn add_redirect_filter(&mut self, filter: &RedirectFilter) -> Result<()> {
        let message = filter.to_message()?;
        context(
            self.request(RouteNetlinkMessage::NewTrafficFilter(message), NLM_F_CREATE | NLM_F_EXCL),
            || {
                format!(
                    "add redirect filter {} prio {} on link #{} to link #{}",
                    filter.parent, filter.priority, filter.index, filter.target_index
                )
            },
        )
    }

    /// Lists the filters at `parent` of device `index` (none when the parent qdisc does not
    /// exist).
    pub fn filters(&mut self, index: u32, parent: TcHandle) -> Result<Vec<TcFilter>> {
        let header = TcHeader { index: header_index(index)?, parent: parent.into(), ..Default::default() };
        let request = RouteNetlinkMessage::GetTrafficFilter(TcMessage::from_parts(header, Vec::new()));
        let replies = match self.dump(request) {
            Ok(replies) => replies,
            // No such qdisc/class: nothing attached there.
            Err(err) if matches!(err.errno(), Some(libc::EINVAL | libc::ENOENT)) => Vec::new(),
            Err(err) => {
                return Err(crate::Error::netlink(format!("list filters {parent} on link #{index}"), err))
            }
        };
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewTrafficFilter(message) => Some(TcFilter::from_message(message)),
                _ => None,
            })
            .collect())
    }

    /// Deletes every filter with `priority` at `parent` of device `index`. Missing filters
    /// are a not-found error.
    pub fn delete_filters(&mut self, index: u32, parent: TcHandle, priority: u16) -> Result<()> {
        // Protocol 0 matches the filters of that priority whatever their protocol.
        let header = TcHeader {
            index: header_index(index)?,
            parent: parent.into(),
            info: filter_info(priority, 0),
            ..Default::default()
        };
        let message = TcMessage::from_parts(header, Vec::new());
        context(self.request(RouteNetlinkMessage::DelTrafficFilter(message), 0), || {
            format!("delete filters {parent} prio {priority} on link #{index}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Emitable, Parseable};

    #[test]
    fn redirect_filter_round_trips() {
        let filter =
            RedirectFilter { index: 5, parent: TcHandle::INGRESS_HOOK, priority: 1, target_index: 9 };
        let message = filter.to_message().unwrap();
        let mut bytes = vec![0u8; message.buffer_len()];
        message.emit(&mut bytes);
        // tcm_info: prio 1, ETH_P_ALL in network order.
        assert_eq!(u32::from_ne_bytes(bytes[16..20].try_into().unwrap()), (1 << 16) | 0x0300);
        let parsed = TcFilter::from_message(&TcMessage::parse(bytes.as_slice()).unwrap());
        assert_eq!(parsed.kind, "u32");
        assert_eq!(parsed.priority, 1);
        assert_eq!(parsed.protocol, ETH_P_ALL);
        assert_eq!(parsed.redirect_to, Some(9));
    }

    #[test]
    fn info_packs_priority_and_protocol() {
        assert_eq!(filter_info(0x1234, 0x0800), 0x1234_0008);
        assert_eq!(filter_info(2, 0), 0x0002_0000);
    }
}
