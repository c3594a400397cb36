//! Conversation logic against a scripted fake kernel: acks, errors, draining, DUMP_INTR.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netlink_packet_core::{NLM_F_DUMP_INTR, NLM_F_MULTIPART};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::codec::testing::{done, error, message};
use super::transport::Transport;
use super::Netlink;
use crate::error::NetlinkError;

/// Replays one scripted answer per request; each answer is built from the request's sequence
/// number and is a list of datagrams.
type Script = Box<dyn FnMut(u32) -> Vec<Vec<u8>> + Send>;

struct FakeKernel {
    answers: VecDeque<Script>,
    pending: VecDeque<Vec<u8>>,
    requests: Arc<Mutex<u32>>,
}

impl Transport for FakeKernel {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let sequence = u32::from_ne_bytes(bytes[8..12].try_into().unwrap());
        *self.requests.lock().unwrap() += 1;
        let mut answer = self.answers.pop_front().expect("unexpected extra request");
        self.pending.extend(answer(sequence));
        Ok(())
    }

    fn recv(&mut self, _timeout: Option<Duration>) -> io::Result<Option<Vec<u8>>> {
        Ok(Some(self.pending.pop_front().expect("read past the script")))
    }

    fn port_id(&self) -> u32 {
        0
    }

    fn join_group(&mut self, _group: u32) -> io::Result<()> {
        Ok(())
    }

    fn leave_group(&mut self, _group: u32) -> io::Result<()> {
        Ok(())
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

fn fake(answers: Vec<Script>) -> (Netlink, Arc<Mutex<u32>>) {
    let requests = Arc::new(Mutex::new(0));
    let kernel = FakeKernel { answers: answers.into(), pending: VecDeque::new(), requests: requests.clone() };
    (Netlink::with_transport(Box::new(kernel)), requests)
}

fn link_named(name: &str, flags: u16, sequence: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes.push(LinkAttribute::IfName(name.into()));
    message(RouteNetlinkMessage::NewLink(link), flags, sequence)
}

fn get_links() -> RouteNetlinkMessage {
    RouteNetlinkMessage::GetLink(LinkMessage::default())
}

#[test]
fn interrupted_dump_is_retried_and_fully_drained() {
    let (mut netlink, requests) = fake(vec![
        // First attempt: interrupted, spread over two datagrams which must both be read.
        Box::new(|seq| {
            vec![
                link_named("stale0", NLM_F_MULTIPART | NLM_F_DUMP_INTR, seq),
                done(seq, NLM_F_MULTIPART | NLM_F_DUMP_INTR),
            ]
        }),
        Box::new(|seq| {
            let mut first = link_named("lo", NLM_F_MULTIPART, seq);
            first.extend(link_named("cnt0", NLM_F_MULTIPART, seq));
            vec![first, done(seq, NLM_F_MULTIPART)]
        }),
        // A following request must see only its own ack.
        Box::new(|seq| vec![error(seq, 0, None)]),
    ]);
    let links = netlink.dump(get_links()).unwrap();
    assert_eq!(links.len(), 2);
    assert_eq!(*requests.lock().unwrap(), 2);
    netlink.request(get_links(), 0).unwrap();
    assert_eq!(*requests.lock().unwrap(), 3);
}

#[test]
fn dump_gives_up_after_repeated_interruptions() {
    let answers: Vec<Script> = (0..super::MAX_DUMP_ATTEMPTS)
        .map(|_| -> Script { Box::new(|seq| vec![done(seq, NLM_F_DUMP_INTR)]) })
        .collect();
    let (mut netlink, requests) = fake(answers);
    let err = netlink.dump(get_links()).unwrap_err();
    assert!(matches!(err, NetlinkError::DumpInterrupted { .. }), "{err}");
    assert_eq!(*requests.lock().unwrap(), super::MAX_DUMP_ATTEMPTS);
}

#[test]
fn stale_replies_are_skipped_and_errno_kept() {
    let (mut netlink, _) = fake(vec![Box::new(|seq| {
        // A leftover ack of an older request, then our error.
        vec![error(seq.wrapping_sub(5), 0, None), error(seq, libc::ENODEV, None)]
    })]);
    let err = netlink.request(get_links(), 0).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENODEV));
}
