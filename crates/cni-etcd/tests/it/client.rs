//! The client against a real 3-member etcd cluster on 127.0.0.1.

use std::time::Duration;

use cni_etcd::{Compare, Event, Op, Txn};
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::poll::{finishes, EVENTUALLY};

/// A client timeout no call of a passing test comes near.
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn put_get_prefix_delete() {
    let cluster = EtcdCluster::start("edc", 3);
    let mut client = cluster.client();
    client.put(b"/t/a", b"1", 0).unwrap();
    client.put(b"/t/b", b"2", 0).unwrap();
    client.put(b"/u/c", b"3", 0).unwrap();
    assert_eq!(client.get(b"/t/a").unwrap().unwrap().value, b"1");
    assert!(client.get(b"/t/none").unwrap().is_none());
    let (kvs, revision) = client.get_prefix(b"/t/", false).unwrap();
    let keys: Vec<String> = kvs.iter().map(|kv| kv.key_str()).collect();
    assert_eq!(keys, ["/t/a", "/t/b"]);
    assert!(revision >= 4);
    assert_eq!(client.delete_prefix(b"/t/").unwrap(), 2);
    assert_eq!(client.delete(b"/u/c").unwrap(), 1);
    assert_eq!(client.delete(b"/u/c").unwrap(), 0);
}

#[test]
fn txn_compare_and_swap_refuses_a_stale_revision() {
    let cluster = EtcdCluster::start("edt", 3);
    let mut client = cluster.client();
    // Create-if-absent succeeds once.
    let create = Txn {
        compare: vec![Compare::CreateRevision(b"/k".to_vec(), 0)],
        success: vec![Op::put("/k", "first")],
        failure: vec![Op::get("/k")],
    };
    assert!(client.txn(&create).unwrap().succeeded);
    let again = client.txn(&create).unwrap();
    assert!(!again.succeeded);
    let current = again.range(0);
    assert_eq!(current[0].value, b"first");
    // A swap against the read revision wins; the same swap again loses.
    let swap = Txn {
        compare: vec![Compare::ModRevision(b"/k".to_vec(), current[0].mod_revision)],
        success: vec![Op::put("/k", "second")],
        failure: vec![],
    };
    assert!(client.txn(&swap).unwrap().succeeded);
    assert!(!client.txn(&swap).unwrap().succeeded);
    assert_eq!(client.get(b"/k").unwrap().unwrap().value, b"second");
}

#[test]
fn leases_expire_and_watch_sees_it() {
    let cluster = EtcdCluster::start("edl", 3);
    let mut client = cluster.client();
    let (_, revision) = client.get_prefix(b"/leased/", true).unwrap();
    let mut watch = client.watch_prefix(b"/leased/", revision + 1).unwrap();
    let lease = client.lease_grant(2).unwrap();
    client.put(b"/leased/x", b"v", lease).unwrap();
    assert!(client.lease_keepalive(lease).unwrap() > 0);
    assert_eq!(client.get(b"/leased/x").unwrap().unwrap().lease, lease);
    let mut seen = Vec::new();
    // The put, then (the lease not renewed) the delete at expiry.
    for _ in 0..40 {
        seen.extend(watch.next_events(Duration::from_millis(250)).unwrap());
        if seen.iter().any(|e| matches!(e, Event::Delete(_))) {
            break;
        }
    }
    assert!(matches!(&seen[0], Event::Put(kv) if kv.key == b"/leased/x"), "{seen:?}");
    assert!(matches!(seen.last(), Some(Event::Delete(kv)) if kv.key == b"/leased/x"), "{seen:?}");
    assert!(client.get(b"/leased/x").unwrap().is_none());
    assert!(client.lease_time_to_live(lease).unwrap() <= 0);
    // Revoking a lease that is gone is done already: etcd's "not found" code, not an error.
    client.lease_revoke(lease).unwrap();
}

#[test]
fn a_killed_member_is_failed_over() {
    let mut cluster = EtcdCluster::start("edf", 3);
    let mut client = cluster.client();
    client.put(b"/f", b"before", 0).unwrap();
    cluster.kill(0);
    // The client was connected to member 0: the next calls go to the others. Member 0 may
    // have been the leader; until the other two have elected one (a second or two, longer
    // on a loaded machine) a write fails on every member with a clear error, so the first
    // write after the kill is retried for a while (a limit for "never", not a speed claim).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match client.put(b"/f", b"after the election", 0) {
            Ok(_) => break,
            Err(e) if e.is_unavailable() && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("no write after member 0 was killed: {e}\n{}", cluster.logs()),
        }
    }
    for i in 0..20 {
        client.put(b"/f", format!("after{i}").as_bytes(), 0).unwrap();
    }
    assert_eq!(client.get(b"/f").unwrap().unwrap().value, b"after19");
}

/// A member that accepts the connection and never answers (wedged, or holding a write for
/// a dead leader) costs a call a short wait, not the client's timeout: the call goes on to
/// the next member.
#[test]
fn a_member_that_never_answers_is_passed_over_for_the_next() {
    let cluster = EtcdCluster::start("edh", 3);
    // The kernel completes connections to a listening socket nobody accepts from.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}", silent.local_addr().unwrap());
    // A timeout of an hour: a call that waited it out on the silent member could not
    // finish within the test's limit for "never".
    let mut client = cni_etcd::Client::new(&[silent, cluster.endpoints()[0].clone()], HOUR).unwrap();
    let mut client = finishes("the calls pass over the silent member", EVENTUALLY, move || {
        let revision = client.put(b"/h", b"one", 0).unwrap();
        client.prefer(0);
        let txn = Txn {
            compare: vec![Compare::ModRevision(b"/h".to_vec(), revision)],
            success: vec![Op::put(b"/h".to_vec(), b"two".to_vec())],
            failure: vec![],
        };
        assert!(client.txn(&txn).unwrap().succeeded);
        client
    });
    assert_eq!(client.get(b"/h").unwrap().unwrap().value, b"two");
}

/// A transaction of serializable reads is served by a member on its own: it still answers
/// with two of three members down, when a transaction of ordinary reads cannot.
#[test]
fn a_transaction_of_serializable_reads_needs_no_quorum() {
    let mut cluster = EtcdCluster::start("eds", 3);
    let mut client = cluster.client();
    client.put(b"/s/a", b"1", 0).unwrap();
    client.put(b"/s/b", b"2", 0).unwrap();
    let survivor = cluster.endpoints()[2].clone();
    // Member 2 has applied both writes before the others go.
    let mut local = cni_etcd::Client::new(&[&survivor], Duration::from_secs(1)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while local.get_serializable(b"/s/b").unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "member 2 never applied /s/b");
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.kill(0);
    cluster.kill(1);
    let reads = |get: fn(Vec<u8>) -> Op| Txn {
        success: vec![get(b"/s/a".to_vec()), get(b"/s/missing".to_vec()), get(b"/s/b".to_vec())],
        ..Txn::default()
    };
    let answer = local.txn(&reads(Op::get_serializable)).unwrap();
    assert!(answer.succeeded);
    assert_eq!(answer.range(0)[0].value, b"1");
    assert!(answer.range(1).is_empty());
    assert_eq!(answer.range(2)[0].value, b"2");
    let err = local.txn(&reads(Op::get)).expect_err("a linearizable read without a quorum");
    assert!(err.is_unavailable(), "{err}");
}

#[test]
fn no_member_up_is_unreachable() {
    let port = cni_testkit::etcd::free_port();
    let mut client =
        cni_etcd::Client::new(&[format!("http://127.0.0.1:{port}")], Duration::from_secs(1)).unwrap();
    let err = client.get(b"/x").unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

/// A watch started at revision R after a gap sees every change from R on (what the overlay
/// agent's resync-then-watch relies on); one started below etcd's compaction point is
/// canceled with an error, never a silent gap.
#[test]
fn a_watch_resumes_from_a_revision_and_refuses_a_compacted_one() {
    let cluster = EtcdCluster::start("edw", 1);
    let mut client = cluster.client();
    let first = client.put(b"/w/a", b"1", 0).unwrap();
    client.put(b"/w/b", b"2", 0).unwrap();
    client.delete(b"/w/a").unwrap();
    let mut watch = client.watch_prefix(b"/w/", first + 1).unwrap();
    let mut seen = Vec::new();
    for _ in 0..20 {
        if seen.len() >= 2 {
            break;
        }
        seen.extend(watch.next_events(Duration::from_millis(500)).unwrap());
    }
    assert!(matches!(&seen[0], Event::Put(kv) if kv.key == b"/w/b" && kv.value == b"2"), "{seen:?}");
    assert!(matches!(&seen[1], Event::Delete(kv) if kv.key == b"/w/a"), "{seen:?}");
    let latest = client.put(b"/w/c", b"3", 0).unwrap();
    let compacted = std::process::Command::new("/usr/bin/etcdctl")
        .args(["--endpoints", &cluster.endpoints()[0], "compact", &latest.to_string()])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(compacted.status.success(), "{compacted:?}");
    let mut stale = client.watch_prefix(b"/w/", first).unwrap();
    let err = (0..20)
        .find_map(|_| stale.next_events(Duration::from_millis(500)).err())
        .expect("a watch below the compaction point was not canceled");
    assert!(err.to_string().contains(&format!("compacted up to revision {latest}")), "{err}");
}
