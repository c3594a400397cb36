//! Policy routing rules (`ip rule`).

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::RouteProtocol;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::addr::IpFamily;
use super::{context, Netlink};
use crate::error::{Error, Result};

/// A rule that looks up `table` for packets matching `from`/`to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: IpFamily,
    pub from: Option<IpNet>,
    pub to: Option<IpNet>,
    pub table: u32,
    /// Rule priority (lower is consulted first); `None` lets the kernel pick.
    pub priority: Option<u32>,
}

impl Rule {
    /// `from <prefix> lookup <table>`.
    pub fn from_source(from: IpNet, table: u32) -> Rule {
        Rule { family: IpFamily::of(from.addr()), from: Some(from), to: None, table, priority: None }
    }

    fn to_message(&self) -> Result<RuleMessage> {
        for net in self.from.iter().chain(self.to.iter()) {
            if IpFamily::of(net.addr()) != self.family {
                return Err(Error::InvalidArgument(format!("rule prefix {net} is not {:?}", self.family)));
            }
        }
        let mut message = RuleMessage::default();
        message.header.family = IpFamily::to_netlink(Some(self.family));
        message.header.action = RuleAction::ToTable;
        message.header.table = u8::try_from(self.table).unwrap_or(0);
        message.attributes.push(RuleAttribute::Table(self.table));
        if let Some(from) = self.from {
            message.header.src_len = from.prefix_len();
            message.attributes.push(RuleAttribute::Source(from.addr()));
        }
        if let Some(to) = self.to {
            message.header.dst_len = to.prefix_len();
            message.attributes.push(RuleAttribute::Destination(to.addr()));
        }
        if let Some(priority) = self.priority {
            message.attributes.push(RuleAttribute::Priority(priority));
        }
        Ok(message)
    }

    pub(crate) fn from_message(message: &RuleMessage) -> Option<Rule> {
        let family = match message.header.family {
            netlink_packet_route::AddressFamily::Inet => IpFamily::V4,
            netlink_packet_route::AddressFamily::Inet6 => IpFamily::V6,
            _ => return None,
        };
        let mut rule =
            Rule { family, from: None, to: None, table: message.header.table as u32, priority: None };
        for attribute in &message.attributes {
            match attribute {
                RuleAttribute::Source(addr) => rule.from = IpNet::new(*addr, message.header.src_len).ok(),
                RuleAttribute::Destination(addr) => rule.to = IpNet::new(*addr, message.header.dst_len).ok(),
                RuleAttribute::Table(table) => rule.table = *table,
                RuleAttribute::Priority(priority) => rule.priority = Some(*priority),
                _ => {}
            }
        }
        Some(rule)
    }

    fn describe(&self, verb: &str) -> String {
        let mut text = format!("{verb} rule");
        if let Some(from) = self.from {
            text += &format!(" from {from}");
        }
        if let Some(to) = self.to {
            text += &format!(" to {to}");
        }
        text + &format!(" lookup {}", self.table)
    }
}

impl Netlink {
    /// Adds a rule (`EEXIST` if an identical one exists).
    pub fn add_rule(&mut self, rule: &Rule) -> Result<()> {
        let mut message = rule.to_message()?;
        message.attributes.push(RuleAttribute::Protocol(RouteProtocol::Boot));
        context(self.request(RouteNetlinkMessage::NewRule(message), NLM_F_CREATE | NLM_F_EXCL), || {
            rule.describe("add")
        })
    }

    /// Deletes the first rule matching `rule` (`ENOENT` if none).
    pub fn delete_rule(&mut self, rule: &Rule) -> Result<()> {
        let message = rule.to_message()?;
        context(self.request(RouteNetlinkMessage::DelRule(message), 0), || rule.describe("delete"))
    }

    /// Lists the rules of a family.
    pub fn rules(&mut self, family: IpFamily) -> Result<Vec<Rule>> {
        let mut request = RuleMessage::default();
        request.header.family = IpFamily::to_netlink(Some(family));
        let replies =
            context(self.dump(RouteNetlinkMessage::GetRule(request)), || format!("list {family:?} rules"))?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRule(message) => Rule::from_message(message),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_round_trips_and_checks_family() {
        let mut rule = Rule::from_source("10.1.0.5/32".parse().unwrap(), 100);
        rule.priority = Some(1000);
        let parsed = Rule::from_message(&rule.to_message().unwrap()).unwrap();
        assert_eq!(parsed, rule);
        rule.to = Some("fd00::/64".parse().unwrap());
        assert!(rule.to_message().is_err());
    }
}
