use super::*;

fn daemon(dir: &std::path::Path) -> Arc<Daemon> {
    let timing = Timing { timeout: Duration::from_secs(1), resend_max: Duration::from_secs(1) };
    Daemon::new(Settings { state_dir: dir.into(), host_prefix: String::new(), timing }).unwrap()
}

fn key(network: &str, id: &str, ifname: &str) -> AttachmentKey {
    AttachmentKey { network: network.into(), container_id: id.into(), ifname: ifname.into() }
}

#[test]
fn host_prefix_goes_before_namespace_paths() {
    let dir = tempfile::tempdir().unwrap();
    let timing = Timing { timeout: Duration::from_secs(1), resend_max: Duration::from_secs(1) };
    let settings = Settings { state_dir: dir.path().into(), host_prefix: "/host".into(), timing };
    let d = Daemon::new(settings).unwrap();
    assert_eq!(d.netns_path("/run/netns/c1"), PathBuf::from("/host/run/netns/c1"));
    assert_eq!(daemon(dir.path()).netns_path("/proc/1/ns/net"), PathBuf::from("/proc/1/ns/net"));
}

#[test]
fn names_are_checked_before_use() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path());
    let bad = [key("../x", "c", "eth0"), key("n", "../../etc", "eth0"), key("n", "c", "a/b")];
    for k in bad {
        let r = d.handle(Request { version: PROTOCOL_VERSION, op: Op::Del { key: k.clone() }, trace: None });
        assert!(!r.ok, "{k:?} accepted");
    }
    let params = ClientParams { client_id: vec![0], provide: vec![], request: vec![], prefix_len: None };
    let r = d.handle(Request {
        version: PROTOCOL_VERSION,
        op: Op::Add { key: key("n", "c", "eth0"), netns: "relative".into(), params, family: Family::V4 },
        trace: None,
    });
    assert_eq!(r.code, 4, "{r:?}");
    let r = d.handle(Request { version: 2, op: Op::Status, trace: None });
    assert_eq!(r.code, 1, "{r:?}");
    // Unknown attachments: DEL is fine, CHECK is not.
    assert!(
        d.handle(Request {
            version: PROTOCOL_VERSION,
            op: Op::Del { key: key("n", "c", "eth0") },
            trace: None
        })
        .ok
    );
    assert!(
        !d.handle(Request {
            version: PROTOCOL_VERSION,
            op: Op::Check { key: key("n", "c", "eth0"), family: Family::V6 },
            trace: None
        })
        .ok
    );
}
