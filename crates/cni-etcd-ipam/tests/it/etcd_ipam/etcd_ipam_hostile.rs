//! etcd-ipam against a hostile etcd member (a fake one on 127.0.0.1 answering every gRPC
//! call with sizes meant to exhaust memory, garbage, silence or a trickle): the plugin must
//! answer with CNI error JSON, code 11 and exit status 1, within its deadline, never abort
//! on an allocation. A module of the etcd_ipam tests, whose helpers it uses.

use std::time::Duration;

use cni_testkit::etcd::{HostileMember, Hostility};

use super::{conf, run};

/// Runs ADD and DEL against `member`; returns each error message (code 11, exit 1 checked).
fn refused(member: &HostileMember, what: &str, timeout_ms: u64) -> Vec<String> {
    let mut conf = conf(&[member.endpoint()], "ethost", "node-a", &["10.93.0.0/16"], 26);
    conf["ipam"]["timeoutMs"] = timeout_ms.into();
    ["ADD", "DEL"]
        .into_iter()
        .map(|command| {
            // A plugin that waited on a silent or trickling member without a deadline would
            // be killed at the runner's limit: status -1, not the code 11 asserted here.
            let out = run(&conf, command, "c1");
            assert_eq!(
                out.status, 1,
                "{command} against {what}: status {} (-1: killed by a signal)",
                out.status
            );
            let err = out.error();
            assert_eq!(err.code, 11, "{command} against {what}: {err:?}");
            err.msg
        })
        .collect()
}

#[test]
fn oversized_answers_are_code_11_not_an_abort() {
    for (hostility, what) in
        [(Hostility::ClaimsHugeMessage, "a length prefix of 1 GB"), (Hostility::Oversized, "a 9 MiB message")]
    {
        let member = HostileMember::start(hostility);
        for msg in refused(&member, what, 2000) {
            assert!(msg.contains("over the 8 MiB limit"), "{what}: {msg}");
        }
    }
}

#[test]
fn broken_answers_are_code_11_not_an_abort() {
    for (hostility, what) in [
        (Hostility::Garbage, "HTTP/1.1 instead of HTTP/2"),
        (Hostility::ClosesMidAnswer, "a message cut short"),
        (Hostility::Status(14, "etcdserver: no leader".into()), "UNAVAILABLE"),
    ] {
        let member = HostileMember::start(hostility);
        refused(&member, what, 500);
    }
}

/// Silence and a trickle each hold a call only until its deadline.
#[test]
fn a_silent_or_trickling_member_is_code_11_within_the_deadline() {
    for (hostility, what) in
        [(Hostility::Silent, "silence"), (Hostility::Trickle(Duration::from_millis(20)), "a trickle")]
    {
        let member = HostileMember::start(hostility);
        for msg in refused(&member, what, 300) {
            assert!(msg.contains("no answer within"), "{what}: {msg}");
        }
    }
}
