//! The DHCPv6 client exchanges (RFC 8415 section 18), stateful addresses only (one IA_NA):
//! SOLICIT/ADVERTISE/REQUEST/REPLY, RENEW at T1 (naming the server), REBIND at T2 (any
//! server), RELEASE.
//!
//! As for v4 the socket is made inside the container's namespace, bound to the container
//! interface and port 546; every message goes to All_DHCP_Relay_Agents_and_Servers
//! (ff02::1:2) on that interface from its link-local address, which must have finished
//! duplicate address detection first (a tentative address cannot be a source).
//!
//! The client identifies itself with the attachment's DUID (a DUID-UUID, RFC 6355, derived
//! by the plugin from the attachment: stable across ADDs and daemon restarts) and an IAID
//! taken from that DUID. Everything a reply carries is checked by [`Lease6::from_reply`];
//! replies that fail are dropped as if never received, so a hostile or broken server can
//! at worst make an exchange time out.

use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::time::{Duration, Instant};

use cni_net::netlink::{AddressFlags, IpFamily, LinkCondition};
use cni_net::{NetNs, Netlink};

use cni_cli::tracing::debug;

use super::client::{random_xid, retransmit, ClientError, ClientParams, Timing, Verdict, FIRST_RESEND};
use super::lease::unix_now;
use super::lease6::Lease6;
use super::wire6::{
    IaNa, Message, MessageType, Status, ALL_SERVERS, CLIENT_PORT, OPT_CLIENT_ID, OPT_ELAPSED_TIME, OPT_IA_NA,
    OPT_ORO, OPT_SERVER_ID, SERVER_PORT, STATUS_NO_ADDRS_AVAIL,
};

/// What the client asks for (option 6): DNS servers and the search list.
const REQUESTED: [u16; 2] = [super::wire6::OPT_DNS_SERVERS, super::wire6::OPT_DOMAIN_LIST];

/// The IAID of an attachment: four bytes of its DUID (which is already unique to it).
pub fn iaid_of(duid: &[u8]) -> u32 {
    duid[duid.len().saturating_sub(4)..].iter().fold(0, |n, b| n << 8 | u32::from(*b))
}

pub struct Client6 {
    socket: UdpSocket,
    ifindex: u32,
    duid: Vec<u8>,
    iaid: u32,
    prefix_len: u8,
    timing: Timing,
}

/// Creates the socket inside `ns`: IPv6 only, bound to `ifname` on port 546, multicast
/// out of that interface.
fn bound_socket(ns: &NetNs, ifname: &str, ifindex: u32) -> Result<UdpSocket, ClientError> {
    use cni_os::inet;
    let socket = ns.run(|| -> io::Result<UdpSocket> {
        let addr = SocketAddr::from((Ipv6Addr::UNSPECIFIED, CLIENT_PORT));
        let fd = inet::socket_for(&addr, inet::Kind::Datagram)?;
        inet::set_ipv6_v6only(&fd, true)?;
        // Several interfaces of one namespace may each run a client on port 546.
        inet::set_socket_reuseaddr(&fd, true)?;
        inet::bind_to_device(&fd, ifname)?;
        inet::set_ipv6_multicast_if(&fd, ifindex)?;
        inet::bind(&fd, &addr)?;
        Ok(UdpSocket::from(fd))
    })??;
    Ok(socket)
}

/// Waits (bounded) until `index` has a link-local address that is no longer tentative;
/// false when none came (IPv6 disabled on the interface, or DAD failed).
fn wait_for_link_local(netlink: &mut Netlink, index: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let ready = netlink.addresses(Some(index), Some(IpFamily::V6)).is_ok_and(|addrs| {
            addrs.iter().any(|a| {
                a.scope == 253 && !a.flags.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed)
            })
        });
        if ready {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Client6 {
    /// Opens a client on `ifname` in `ns`. `params.client_id` is the DUID and
    /// `params.prefix_len` the prefix length leases get.
    pub fn open(
        ns: &NetNs,
        ifname: &str,
        params: &ClientParams,
        timing: Timing,
    ) -> Result<Client6, ClientError> {
        let mut netlink = Netlink::in_ns(ns)?;
        let link = netlink.require_link(ifname)?;
        netlink.set_link_up(link.index)?;
        let _ = netlink.wait_for_link(
            link.index,
            LinkCondition::Running,
            timing.timeout.min(Duration::from_secs(3)),
        );
        if !wait_for_link_local(&mut netlink, link.index, timing.timeout.min(Duration::from_secs(5))) {
            return Err(ClientError::Io(io::Error::other(format!(
                "{ifname} has no usable IPv6 link-local address (IPv6 disabled on it?), which DHCPv6 \
                 needs as its source"
            ))));
        }
        Ok(Client6 {
            socket: bound_socket(ns, ifname, link.index)?,
            ifindex: link.index,
            duid: params.client_id.clone(),
            iaid: iaid_of(&params.client_id),
            prefix_len: params.prefix_len.unwrap_or(128),
            timing,
        })
    }

    fn message(&self, kind: MessageType, xid: u32, server: Option<&[u8]>, ia: IaNa) -> Message {
        let mut m = Message::new(kind, xid);
        m.push(OPT_CLIENT_ID, self.duid.clone());
        if let Some(server) = server {
            m.push(OPT_SERVER_ID, server.to_vec());
        }
        m.push(OPT_IA_NA, ia.encode());
        if kind != MessageType::Release {
            m.push(OPT_ORO, REQUESTED.iter().flat_map(|c| c.to_be_bytes()).collect());
        }
        m
    }

    /// Sends `msg` (with a fresh elapsed-time option each time) until `accept` takes a
    /// reply of type `want` for our transaction and our DUID, or `limit` passes.
    fn transact<T>(
        &self,
        msg: &Message,
        want: MessageType,
        limit: Duration,
        accept: &mut dyn FnMut(&Message) -> Verdict<T>,
    ) -> Result<T, ClientError> {
        let dest = SocketAddrV6::new(ALL_SERVERS, SERVER_PORT, 0, self.ifindex);
        retransmit(
            &self.socket,
            limit,
            self.timing.resend_max,
            &mut |elapsed| {
                let mut m = msg.clone();
                // Hundredths of a second, saturating (RFC 8415 21.9).
                let centis = (elapsed.as_millis() / 10).min(u128::from(u16::MAX)) as u16;
                m.push(OPT_ELAPSED_TIME, centis.to_be_bytes().to_vec());
                self.socket.send_to(&m.encode(), dest).map(drop)
            },
            &mut |bytes| {
                let reply = Message::decode(bytes).ok()?;
                if reply.kind != want as u8
                    || reply.xid != msg.xid
                    || reply.option(OPT_CLIENT_ID) != Some(&self.duid[..])
                {
                    return None;
                }
                accept(&reply)
            },
        )
    }

    /// Takes a REPLY's binding, or says why not: a status for the refusals a server
    /// states (NoBinding, NoAddrsAvail...), `None` for a reply to drop.
    fn binding(&self, reply: &Message, sent_unix: u64) -> Verdict<Lease6> {
        let status = reply.status();
        let ia_status = reply.ia_nas().find(|ia| ia.iaid == self.iaid).map(|ia| ia.status);
        for s in [Some(status), ia_status].into_iter().flatten() {
            if !s.is_success() {
                return Some(Err(ClientError::Refused(s.to_string())));
            }
        }
        match Lease6::from_reply(reply, self.iaid, self.prefix_len, sent_unix) {
            Ok(lease) => Some(Ok(lease)),
            Err(why) => {
                debug!(reason = %why, "dropped a DHCPv6 reply");
                None
            }
        }
    }

    /// SOLICIT, take the first usable ADVERTISE, REQUEST it, wait for the REPLY; `previous`
    /// is asked for again when set. An ADVERTISE saying NoAddrsAvail is ignored (RFC 8415
    /// 18.2.9) but remembered, so that running out of time says why.
    pub fn acquire(&self, previous: Option<Ipv6Addr>) -> Result<Lease6, ClientError> {
        let deadline = Instant::now() + self.timing.timeout;
        let mut no_addrs: Option<Status> = None;
        let solicit =
            self.message(MessageType::Solicit, random_xid(), None, IaNa::request(self.iaid, previous));
        let offer = self.transact(&solicit, MessageType::Advertise, self.timing.timeout, &mut |m| {
            let ia = m.ia_nas().find(|ia| ia.iaid == self.iaid);
            let refusal = [Some(m.status()), ia.map(|ia| ia.status)]
                .into_iter()
                .flatten()
                .find(|s| s.code == STATUS_NO_ADDRS_AVAIL);
            if let Some(s) = refusal {
                no_addrs = Some(s);
                return None;
            }
            match Lease6::from_reply(m, self.iaid, self.prefix_len, 0) {
                Ok(lease) => Some(Ok(lease)),
                Err(why) => {
                    debug!(reason = %why, "dropped a DHCPv6 advertise");
                    None
                }
            }
        });
        let offer = match (offer, no_addrs) {
            (Err(ClientError::Timeout(_)), Some(status)) => {
                return Err(ClientError::Refused(status.to_string()))
            }
            (other, _) => other?,
        };
        let request = self.message(
            MessageType::Request,
            random_xid(),
            Some(&offer.server_duid),
            IaNa::request(self.iaid, Some(offer.address.addr())),
        );
        let sent = unix_now();
        let remaining = deadline.saturating_duration_since(Instant::now()).max(FIRST_RESEND);
        self.transact(&request, MessageType::Reply, remaining, &mut |m| {
            if m.option(OPT_SERVER_ID) != Some(&offer.server_duid[..]) {
                return None;
            }
            self.binding(m, sent)
        })
        .map_err(|e| match e {
            ClientError::Timeout(_) => ClientError::Timeout(self.timing.timeout),
            other => other,
        })
    }

    /// RENEW (to the lease's server) or REBIND (to any): the REPLY extends the lease. A
    /// NoBinding answer, our address with a valid lifetime of 0, or another address, ends
    /// it (the caller starts over).
    pub fn extend(&self, lease: &Lease6, rebind: bool, limit: Duration) -> Result<Lease6, ClientError> {
        let (kind, server) = if rebind {
            (MessageType::Rebind, None)
        } else {
            (MessageType::Renew, Some(&lease.server_duid[..]))
        };
        let msg =
            self.message(kind, random_xid(), server, IaNa::request(self.iaid, Some(lease.address.addr())));
        let sent = unix_now();
        self.transact(&msg, MessageType::Reply, limit, &mut |m| {
            if let Some(server) = server {
                if m.option(OPT_SERVER_ID) != Some(server) {
                    return None;
                }
            }
            // A valid lifetime of 0 for our address is the server ending the binding.
            let ended = m
                .ia_nas()
                .filter(|ia| ia.iaid == self.iaid)
                .flat_map(|ia| ia.addresses)
                .any(|a| a.address == lease.address.addr() && a.valid == 0);
            if ended {
                return Some(Err(ClientError::Refused(
                    "the server ended the binding (valid lifetime 0)".into(),
                )));
            }
            match self.binding(m, sent)? {
                Ok(new) if new.address.addr() == lease.address.addr() => Some(Ok(new)),
                Ok(new) => Some(Err(ClientError::Refused(format!(
                    "the server moved the lease to {}",
                    new.address.addr()
                )))),
                Err(e) => Some(Err(e)),
            }
        })
    }

    /// RELEASE, sent once; the server's REPLY is not waited for (the address is dropped
    /// either way, and DEL must not hang on a server that is gone).
    pub fn release(&self, lease: &Lease6) -> Result<(), ClientError> {
        let mut msg = self.message(
            MessageType::Release,
            random_xid(),
            Some(&lease.server_duid),
            IaNa::request(self.iaid, Some(lease.address.addr())),
        );
        msg.push(OPT_ELAPSED_TIME, vec![0, 0]);
        self.socket.send_to(&msg.encode(), SocketAddrV6::new(ALL_SERVERS, SERVER_PORT, 0, self.ifindex))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iaid_is_the_duids_last_four_bytes() {
        assert_eq!(iaid_of(&[0, 4, 1, 2, 3, 4, 5, 6]), 0x0304_0506);
        assert_eq!(iaid_of(&[7]), 7);
    }
}
