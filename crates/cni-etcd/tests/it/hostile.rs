//! The client against hostile members (`cni_testkit::etcd::HostileMember`, a fake one on
//! 127.0.0.1 writing its HTTP/2 by hand): every answer that is not an answer is a bounded
//! error naming what was wrong, in bounded time, never an allocation of what the member
//! claims, a hang or a panic.

use std::time::Duration;

use cni_etcd::{Client, Error, Txn, MAX_BODY};
use cni_testkit::etcd::{HostileMember, Hostility};
use cni_testkit::poll::{finishes, EVENTUALLY};

/// A client timeout no call of a passing test comes near.
const HOUR: Duration = Duration::from_secs(3600);

fn client(member: &HostileMember, timeout: Duration) -> Client {
    Client::new(&[member.endpoint()], timeout).unwrap()
}

/// The reason of the unreachable error every call to `member` ends with.
fn refusal(hostility: Hostility, timeout: Duration) -> String {
    let member = HostileMember::start(hostility);
    let mut client = client(&member, timeout);
    let err = finishes("a call to the hostile member", EVENTUALLY, move || client.get(b"/k").unwrap_err());
    match err {
        Error::Unreachable { reason, .. } => reason,
        other => panic!("expected an unreachable error, got {other}"),
    }
}

/// The hostile member's HTTP/2 is sound: with a well-formed answer the same client reads
/// it, so each refusal below is for the hostility alone.
#[test]
fn a_well_formed_answer_from_the_fake_member_parses() {
    // RangeResponse { header { revision: 9 }, kvs [{ key: "k", value: "v" }] }
    let answer = vec![0x0a, 0x02, 0x18, 0x09, 0x12, 0x06, 0x0a, 0x01, b'k', 0x2a, 0x01, b'v'];
    let member = HostileMember::start(Hostility::Answer(answer));
    let mut client = client(&member, HOUR);
    for _ in 0..3 {
        assert_eq!(client.get(b"/k").unwrap().unwrap().value, b"v");
    }
}

#[test]
fn a_length_prefix_of_a_gigabyte_is_refused_before_allocating() {
    let reason = refusal(Hostility::ClaimsHugeMessage, HOUR);
    assert!(reason.contains(&format!("over the {} MiB limit", MAX_BODY >> 20)), "{reason}");
    assert!(reason.contains("1000000000 bytes"), "{reason}");
}

#[test]
fn a_message_over_the_limit_is_refused() {
    let reason = refusal(Hostility::Oversized, HOUR);
    assert!(reason.contains(&format!("over the {} MiB limit", MAX_BODY >> 20)), "{reason}");
}

/// A header block that never ends is refused at the header list limit, not buffered to
/// the member's 64 MiB or held until the deadline (the client's is an hour: a call held
/// to it fails `refusal`'s poll limit).
#[test]
fn an_endless_header_block_is_refused() {
    // h2 refuses the flood of CONTINUATION frames ("too_many_continuations").
    let reason = refusal(Hostility::EndlessHeaders, HOUR);
    assert!(reason.contains("http2 error"), "{reason}");
}

#[test]
fn garbage_instead_of_http2_is_an_error() {
    let reason = refusal(Hostility::Garbage, HOUR);
    assert!(!reason.is_empty());
}

#[test]
fn an_answer_cut_short_is_an_error_not_a_short_answer() {
    // The member announces a 10-byte message, sends 3 of them and hangs up.
    let reason = refusal(Hostility::ClosesMidAnswer, HOUR);
    assert!(!reason.is_empty());
}

/// A byte every 20 ms, each in good time for any read: the call's deadline still ends it,
/// and the error says so (the whole 1,000-byte trickle would take 20 s, `refusal`'s poll
/// limit).
#[test]
fn a_trickled_answer_must_arrive_whole_in_time() {
    let reason = refusal(Hostility::Trickle(Duration::from_millis(20)), Duration::from_millis(300));
    assert!(reason.contains("no answer within"), "{reason}");
}

#[test]
fn a_member_that_never_answers_costs_the_call_its_deadline() {
    let reason = refusal(Hostility::Silent, Duration::from_millis(300));
    assert!(reason.contains("no answer within"), "{reason}");
}

/// Members that are up but keep answering "unavailable" (an election that never ends, or a
/// hostile member) are asked again in rounds, but only for two timeouts: then the call
/// fails as unreachable, naming what the members said.
#[test]
fn members_that_stay_unavailable_fail_the_call_after_two_timeouts() {
    let unavailable = || HostileMember::start(Hostility::Status(14, "etcdserver: no leader".into()));
    let (first, second) = (unavailable(), unavailable());
    let mut client = Client::new(&[first.endpoint(), second.endpoint()], Duration::from_millis(300)).unwrap();
    // Rounds that went on without end would fail the poll limit.
    let err = finishes("a put to members that stay unavailable", EVENTUALLY, move || {
        client.put(b"/u", b"", 0).unwrap_err()
    });
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains("Unavailable: etcdserver: no leader"), "{err}");
    // Both members were asked: the error names what each said.
    for member in [&first, &second] {
        let address = member.endpoint().trim_start_matches("http://").to_string();
        assert!(err.to_string().contains(&address), "{err}");
    }
}

/// Only etcd's "not found" code makes a revoke that failed count as done: another refusal
/// whose words happen to say "not found" is still the error it is, with its gRPC code.
#[test]
fn a_revoke_refused_for_another_reason_is_an_error_whatever_its_words() {
    let member = HostileMember::start(Hostility::Status(3, "lease ID not found in the request".into()));
    let err = client(&member, HOUR).lease_revoke(7).unwrap_err();
    assert!(matches!(err, Error::Server { code: 3, .. }), "{err}");
    assert!(err.to_string().contains("InvalidArgument: lease ID not found"), "{err}");
    let member = HostileMember::start(Hostility::Status(5, "etcdserver: requested lease not found".into()));
    client(&member, HOUR).lease_revoke(7).unwrap();
}

/// Every kind of call, the streaming ones too, is bounded the same way.
#[test]
fn every_call_and_the_watch_refuse_a_huge_message() {
    let member = HostileMember::start(Hostility::ClaimsHugeMessage);
    let mut client = client(&member, HOUR);
    let limit = format!("over the {} MiB limit", MAX_BODY >> 20);
    let mut errors = vec![
        client.put(b"/k", b"v", 0).unwrap_err(),
        client.txn(&Txn::default()).unwrap_err(),
        client.lease_grant(5).unwrap_err(),
        client.lease_keepalive(5).unwrap_err(),
        client.lease_time_to_live(5).unwrap_err(),
        client.delete_prefix(b"/k").unwrap_err(),
    ];
    let mut watch = client.watch_prefix(b"/k", 1).unwrap();
    errors.push(watch.next_events(Duration::from_secs(30)).unwrap_err());
    for err in errors {
        assert!(err.is_unavailable() && err.to_string().contains(&limit), "{err}");
    }
}

/// A watch whose start revision etcd has compacted away is canceled by etcd: an error the
/// overlay agent answers by listing the keys again and watching from the listing's
/// revision, never a silent end of events.
#[test]
fn a_watch_canceled_for_compaction_is_an_error_naming_the_revision() {
    use prost::Message;
    let canceled = cni_etcd::proto::WatchResponse {
        canceled: true,
        compact_revision: 42,
        cancel_reason: "etcdserver: mvcc: required revision has been compacted".into(),
        ..Default::default()
    };
    let member = HostileMember::start(Hostility::Answer(canceled.encode_to_vec()));
    let mut watch = client(&member, HOUR).watch_prefix(b"/k/", 3).unwrap();
    let err = watch.next_events(Duration::from_secs(30)).unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "{err}");
    assert!(err.to_string().contains("compacted up to revision 42"), "{err}");
}

/// A member that accepts a watch and then vanishes without closing the connection (a
/// crashed machine, a cut link): the watch's HTTP/2 pings go unanswered and the watch
/// fails, so the overlay agent lists again from another member. Without the pings it
/// would wait for events forever and this test would fail at the poll limit.
#[test]
fn a_watch_on_a_member_that_vanishes_fails_when_its_pings_go_unanswered() {
    use prost::Message;
    let created = cni_etcd::proto::WatchResponse { created: true, ..Default::default() };
    let member = HostileMember::start(Hostility::AnswersThenVanishes(created.encode_to_vec()));
    let mut client = client(&member, HOUR);
    let quick = Duration::from_millis(300);
    client.watch_liveness(cni_etcd::Liveness { interval: quick, timeout: quick });
    let mut watch = client.watch_prefix(b"/k/", 1).unwrap();
    let err = finishes("the watch on a vanished member", EVENTUALLY, move || loop {
        // As the overlay agent drives its watch: short waits, each one empty.
        match watch.next_events(Duration::from_millis(250)) {
            Ok(events) => assert!(events.is_empty(), "{events:?}"),
            Err(err) => return err,
        }
    });
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
}
