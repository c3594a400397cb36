//! rtnetlink over the shared loop (tested itself in `crate::transport`), against a scripted fake
//! kernel: typed messages come back decoded, errors keep their errno.

use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::codec::encode_request;
use super::Netlink;
use crate::transport::message::{NLM_F_DUMP_INTR, NLM_F_MULTIPART};
use crate::transport::testing::{done, error, FakeKernel, Script};

fn fake(answers: Vec<Script>) -> Netlink {
    Netlink::with_transport(Box::new(FakeKernel::new(answers)))
}

fn link_named(name: &str, flags: u16, sequence: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes.push(LinkAttribute::IfName(name.into()));
    encode_request(RouteNetlinkMessage::NewLink(link), flags, sequence)
}

fn get_links() -> RouteNetlinkMessage {
    RouteNetlinkMessage::GetLink(LinkMessage::default())
}

#[test]
fn interrupted_link_dump_is_retried_and_decoded() {
    let mut netlink = fake(vec![
        Box::new(|seq| {
            vec![link_named("stale0", NLM_F_MULTIPART | NLM_F_DUMP_INTR, seq), done(seq, NLM_F_DUMP_INTR)]
        }),
        Box::new(|seq| {
            let mut first = link_named("lo", NLM_F_MULTIPART, seq);
            first.extend(link_named("cnt0", NLM_F_MULTIPART, seq));
            vec![first, done(seq, NLM_F_MULTIPART)]
        }),
    ]);
    let links = netlink.links().unwrap();
    let names: Vec<_> = links.iter().map(|link| link.name.as_str()).collect();
    assert_eq!(names, ["lo", "cnt0"]);
}

#[test]
fn request_error_keeps_errno_and_text() {
    let mut netlink = fake(vec![Box::new(|seq| vec![error(seq, libc::ENODEV, Some("no such device here"))])]);
    let err = netlink.request(get_links(), 0).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENODEV));
    assert!(err.to_string().contains("(no such device here)"), "{err}");
}
