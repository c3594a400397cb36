//! Reading and deleting links.

use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoKind, InfoPortData, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, State,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{context, Netlink};
use crate::error::{Error, Result};
use crate::mac::MacAddr;
use crate::Idempotent;

/// The driver kind of a link (`IFLA_INFO_KIND`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// No kind reported: physical NICs and `lo`.
    Device,
    Veth,
    Bridge,
    Macvlan,
    Ipvlan,
    Vlan,
    Vxlan,
    Tun,
    Dummy,
    Ifb,
    Vrf,
    Bond,
    /// Any other driver, by name.
    Other(String),
}

impl LinkKind {
    pub(super) fn from_info(kind: &InfoKind) -> LinkKind {
        match kind {
            InfoKind::Veth => LinkKind::Veth,
            InfoKind::Bridge => LinkKind::Bridge,
            InfoKind::MacVlan => LinkKind::Macvlan,
            InfoKind::IpVlan => LinkKind::Ipvlan,
            InfoKind::Vlan => LinkKind::Vlan,
            InfoKind::Vxlan => LinkKind::Vxlan,
            InfoKind::Tun => LinkKind::Tun,
            InfoKind::Dummy => LinkKind::Dummy,
            InfoKind::Ifb => LinkKind::Ifb,
            InfoKind::Vrf => LinkKind::Vrf,
            InfoKind::Bond => LinkKind::Bond,
            other => LinkKind::Other(other.to_string()),
        }
    }
}

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub kind: LinkKind,
    pub mtu: u32,
    /// Hardware address, when it is an Ethernet (6-byte) one.
    pub mac: Option<MacAddr>,
    /// Raw `IFF_*` flags.
    pub flags: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Has carrier (`IFF_LOWER_UP`).
    pub carrier: bool,
    /// Operational state is `UP` (or unknown on a device that is up, like `lo`).
    pub oper_up: bool,
    pub promisc: bool,
    pub allmulti: bool,
    /// Index of the master device (bridge, bond, vrf), if enslaved.
    pub master: Option<u32>,
    pub alias: Option<String>,
    /// `IFLA_LINK`: for a veth, the peer's index; for macvlan/vxlan, the parent's. Indexes
    /// in another namespace (see `link_netnsid`) are relative to that namespace.
    pub link: Option<u32>,
    /// The namespace id (as seen from this namespace) where `link` lives, if elsewhere.
    pub link_netnsid: Option<i32>,
    pub txqlen: Option<u32>,
    /// `IFLA_GROUP` (0, the default group, unless set).
    pub group: u32,
    /// Port options, when the link is enslaved to a bridge.
    pub bridge_port: Option<BridgePort>,
}

/// Options of a bridge port (`IFLA_BRPORT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgePort {
    pub hairpin: bool,
    pub isolated: bool,
}

impl BridgePort {
    fn from_options(options: &[InfoBridgePort]) -> BridgePort {
        let mut port = BridgePort::default();
        for option in options {
            match option {
                InfoBridgePort::HairpinMode(on) => port.hairpin = *on,
                InfoBridgePort::Isolated(on) => port.isolated = *on,
                _ => {}
            }
        }
        port
    }
}

impl Link {
    pub(crate) fn from_message(message: &LinkMessage) -> Link {
        let flags = message.header.flags;
        let mut link = Link {
            index: message.header.index,
            name: String::new(),
            kind: LinkKind::Device,
            mtu: 0,
            mac: None,
            flags: flags.bits(),
            up: flags.contains(LinkFlags::Up),
            carrier: flags.contains(LinkFlags::LowerUp),
            oper_up: false,
            promisc: flags.contains(LinkFlags::Promisc),
            allmulti: flags.contains(LinkFlags::Allmulti),
            master: None,
            alias: None,
            link: None,
            link_netnsid: None,
            txqlen: None,
            group: 0,
            bridge_port: None,
        };
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::IfName(name) => link.name = name.clone(),
                LinkAttribute::Mtu(mtu) => link.mtu = *mtu,
                LinkAttribute::Group(group) => link.group = *group,
                LinkAttribute::Address(bytes) => link.mac = MacAddr::from_slice(bytes),
                LinkAttribute::Controller(master) if *master != 0 => link.master = Some(*master),
                LinkAttribute::IfAlias(alias) => link.alias = Some(alias.clone()),
                LinkAttribute::Link(index) if *index != 0 => link.link = Some(*index),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(*id),
                LinkAttribute::TxQueueLen(len) => link.txqlen = Some(*len),
                LinkAttribute::OperState(state) => {
                    link.oper_up = matches!(state, State::Up)
                        || (matches!(state, State::Unknown) && link.up && link.carrier)
                }
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(kind) => link.kind = LinkKind::from_info(kind),
                            LinkInfo::PortData(InfoPortData::BridgePort(options)) => {
                                link.bridge_port = Some(BridgePort::from_options(options))
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

/// How a link is named in a request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LinkRef<'a> {
    Index(u32),
    Name(&'a str),
}

impl std::fmt::Display for LinkRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkRef::Index(index) => write!(f, "#{index}"),
            LinkRef::Name(name) => f.write_str(name),
        }
    }
}

pub(crate) fn link_message(target: LinkRef<'_>) -> LinkMessage {
    let mut message = LinkMessage::default();
    match target {
        LinkRef::Index(index) => message.header.index = index,
        LinkRef::Name(name) => message.attributes.push(LinkAttribute::IfName(name.to_string())),
    }
    message
}

impl Netlink {
    /// Looks a link up by name; `Ok(None)` if there is none.
    pub fn link_by_name(&mut self, name: &str) -> Result<Option<Link>> {
        self.get_link(LinkRef::Name(name))
    }

    /// Looks a link up by index; `Ok(None)` if there is none.
    pub fn link_by_index(&mut self, index: u32) -> Result<Option<Link>> {
        self.get_link(LinkRef::Index(index))
    }

    /// Like [`Netlink::link_by_name`] but a missing link is [`Error::LinkNotFound`].
    pub fn require_link(&mut self, name: &str) -> Result<Link> {
        self.link_by_name(name)?.ok_or_else(|| Error::LinkNotFound(name.to_string()))
    }

    fn get_link(&mut self, target: LinkRef<'_>) -> Result<Option<Link>> {
        if let LinkRef::Name(name) = target {
            validate_link_name(name)?;
        }
        let request = RouteNetlinkMessage::GetLink(link_message(target));
        let answers = self.exchange(request, 0).ignore_missing();
        let answers = answers.map_err(|source| Error::netlink(format!("get link {target}"), source))?;
        Ok(answers.unwrap_or_default().iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(message) => Some(Link::from_message(message)),
            _ => None,
        }))
    }

    /// Lists every link in the namespace.
    pub fn links(&mut self) -> Result<Vec<Link>> {
        Ok(self.link_messages()?.iter().map(Link::from_message).collect())
    }

    /// Every link's message, for readers of kind-specific settings (see [`info_data`]).
    pub(crate) fn link_messages(&mut self) -> Result<Vec<LinkMessage>> {
        let request = RouteNetlinkMessage::GetLink(LinkMessage::default());
        let replies = context(self.dump(request), || "list links".to_string())?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(message) => Some(message),
                _ => None,
            })
            .collect())
    }

    /// The kind-specific settings (`IFLA_INFO_DATA`) of link `index`: a macvlan's mode, a
    /// VLAN's id, a VRF's table. `None` when the link is gone or reports none.
    pub(crate) fn link_info_data(&mut self, index: u32) -> Result<Option<InfoData>> {
        let request = RouteNetlinkMessage::GetLink(link_message(LinkRef::Index(index)));
        let answers = self.exchange(request, 0).ignore_missing();
        let Some(answers) = context(answers, || format!("get link #{index}"))? else { return Ok(None) };
        Ok(answers.iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(message) => info_data(message).cloned(),
            _ => None,
        }))
    }

    /// Deletes a link by index (deleting one end of a veth deletes both).
    pub fn delete_link(&mut self, index: u32) -> Result<()> {
        let request = RouteNetlinkMessage::DelLink(link_message(LinkRef::Index(index)));
        context(self.request(request, 0), || format!("delete link #{index}"))
    }

    /// Deletes a link by index like [`Netlink::delete_link`], but, in a program that
    /// called [`cni_os::detach::enable_helper_processes`], returns before the kernel has
    /// finished: the request is sent by a detached helper process, which waits out the
    /// device's unregistration (an `rcu_barrier()`, ~20 ms) while this process goes on.
    /// Meant for a plugin's last step, on a link that nothing uses any more, with its name
    /// already freed (renamed) if something may want it back at once. No error is
    /// reported: a link that turns out to be gone already is what was wanted, and whoever
    /// must know checks the kernel's state. Without the opt-in, or if the work cannot be
    /// handed off, the link is deleted here, synchronously.
    pub fn delete_link_in_background(&mut self, index: u32) -> Result<()> {
        if self.conversation.transport.fd().is_none() {
            return self.delete_link(index);
        }
        // No NLM_F_ACK: nobody reads the answer (an error still queues one, which this
        // socket's later exchanges skip by sequence number).
        let request = RouteNetlinkMessage::DelLink(link_message(LinkRef::Index(index)));
        let bytes =
            super::codec::encode_request(request, netlink_packet_core::NLM_F_REQUEST, self.next_sequence());
        let tail = cni_os::detach::Tail::Send(&bytes);
        match self.conversation.transport.fd().and_then(|fd| cni_os::detach::detach(fd, tail)) {
            Some(_) => Ok(()),
            None => self.delete_link(index),
        }
    }

    /// Deletes a link by name; a missing link is [`Error::LinkNotFound`].
    pub fn delete_link_by_name(&mut self, name: &str) -> Result<()> {
        validate_link_name(name)?;
        let request = RouteNetlinkMessage::DelLink(link_message(LinkRef::Name(name)));
        match self.request(request, 0) {
            Err(err) if err.errno() == Some(libc::ENODEV) => Err(Error::LinkNotFound(name.to_string())),
            other => context(other, || format!("delete link {name}")),
        }
    }
}

/// A link message's `IFLA_INFO_DATA`, if it carries one.
pub(crate) fn info_data(message: &LinkMessage) -> Option<&InfoData> {
    message.attributes.iter().find_map(|attribute| match attribute {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|info| match info {
            LinkInfo::Data(data) => Some(data),
            _ => None,
        }),
        _ => None,
    })
}

/// Kernel interface-name rules: 1..=15 bytes, no `/`, `:` or whitespace, not `.`/`..`.
pub(crate) fn validate_link_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0');
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("invalid interface name {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_is_parsed_from_message() {
        let mut message = LinkMessage::default();
        message.header.index = 7;
        message.header.flags = LinkFlags::Up | LinkFlags::LowerUp | LinkFlags::Promisc;
        message.attributes = vec![
            LinkAttribute::IfName("cntv0".into()),
            LinkAttribute::Mtu(1400),
            LinkAttribute::Address(vec![0xc2, 0x11, 0x22, 0x33, 0x44, 0x55]),
            LinkAttribute::Controller(3),
            LinkAttribute::Link(9),
            LinkAttribute::LinkNetNsId(0),
            LinkAttribute::OperState(State::Up),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let link = Link::from_message(&message);
        assert_eq!(link.index, 7);
        assert_eq!(link.name, "cntv0");
        assert_eq!(link.kind, LinkKind::Veth);
        assert_eq!(link.mtu, 1400);
        assert_eq!(link.mac.unwrap().to_string(), "c2:11:22:33:44:55");
        assert!(link.up && link.carrier && link.oper_up && link.promisc && !link.allmulti);
        assert_eq!(link.master, Some(3));
        assert_eq!(link.link, Some(9));
        assert_eq!(link.link_netnsid, Some(0));
    }

    #[test]
    fn link_names_are_validated() {
        for good in ["eth0", "cntv0", "a", "eth0.100", "fifteen-chars-x"] {
            validate_link_name(good).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(validate_link_name(bad).is_err(), "{bad}");
        }
    }
}
