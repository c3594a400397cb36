//! The resolver's control socket attacked as a local user, an oversized request and
//! slow clients would: the same root-only request server as the other daemons
//! (`cni_os::socket`), here with the control socket's own deadline (2 s) and cap (8).
//! The resolver runs as its binary under umask 000 with an empty state directory, so it
//! answers on no address and changes nothing on the machine.

use std::path::Path;
use std::time::Duration;

use cni_dns::control;
use cni_testkit::socket_attack::{self, UmaskDaemon};

/// The resolver, its state directory in the temp dir.
fn start_resolver() -> UmaskDaemon {
    UmaskDaemon::start(Path::new(env!("CARGO_BIN_EXE_cni-dnsd")), "ds-dnsd", "run/dnsname/dnsd.sock", |dir| {
        vec!["--state-dir".into(), dir.join("run/dnsname").into(), "--resolv-conf".into(), "/dev/null".into()]
    })
}

fn answers_status(resolver: &UmaskDaemon) -> bool {
    control::request(&resolver.socket, "status", Duration::from_secs(5)).is_ok()
}

#[test]
fn under_umask_000_the_control_socket_is_root_only_and_nobody_is_refused() {
    let resolver = start_resolver();
    let refusal = socket_attack::assert_root_only(&resolver.socket, "reload\n");
    assert!(refusal.starts_with("error "), "{refusal:?}");
    assert!(answers_status(&resolver), "root is still served");
}

#[test]
fn a_512_mib_control_line_is_refused_and_the_resolver_lives_on() {
    let resolver = start_resolver();
    let refusal = socket_attack::assert_oversized_refused(resolver.pid(), &resolver.socket, 64 << 10);
    assert!(refusal.starts_with("error "), "{refusal:?}");
    assert!(answers_status(&resolver));
}

#[test]
fn slow_control_clients_are_cut_at_the_deadline_and_threads_stay_capped() {
    let resolver = start_resolver();
    let served = || answers_status(&resolver);
    socket_attack::assert_slow_loris_bounded(
        resolver.pid(),
        &resolver.socket,
        Duration::from_secs(1),
        8,
        served,
    );
}
