//! A hostile owner of firewalld's bus name: whoever owns `org.fedoraproject.FirewallD1`
//! is a peer whose replies the plugin bounds. The fake (Debian's Python with the dbus
//! bindings firewalld itself depends on) answers `getZoneOfSource` with a 1 MiB "zone",
//! `addSource` with a 100 kB error full of terminal escapes, and never answers
//! `removeSource`. Each verb must end in a short, clean CNI error, not a hang.

use super::daemon::{Bus, FIREWALLD};
use super::{conf, prev_result, run, PREFIX};
use cni_testkit::ns::HostAndContainers;
use serde_json::json;
use std::process::{Child, Command, Stdio};

const FAKE: &str = r#"
import sys, dbus, dbus.service, dbus.mainloop.glib
from gi.repository import GLib
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(sys.argv[1])
ZONE = "org.fedoraproject.FirewallD1.zone"
class Fake(dbus.service.Object):
    @dbus.service.method(ZONE, in_signature="s", out_signature="s")
    def getZoneOfSource(self, source):
        return "z" * (1 << 20)
    @dbus.service.method(ZONE, in_signature="ss", out_signature="s")
    def addSource(self, zone, source):
        raise dbus.DBusException("ZONE_CONFLICT: \x1b[2J\x1b]0;owned\x07" + "E" * 100000,
                                 name="org.fedoraproject.FirewallD1.Exception")
    @dbus.service.method(ZONE, in_signature="ss", out_signature="s", async_callbacks=("ok", "err"))
    def removeSource(self, zone, source, ok, err):
        pass  # never answers
Fake(bus, "/org/fedoraproject/FirewallD1")
name = dbus.service.BusName("org.fedoraproject.FirewallD1", bus)
GLib.MainLoop().run()
"#;

struct Fake(Child);

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_hostile_bus_owner_gets_bounded_errors_and_no_hang() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let bus = Bus::start();
    let fake = Command::new("/usr/bin/python3")
        .args(["-c", FAKE, &bus.address()])
        .stdin(Stdio::null())
        .spawn()
        .expect("run Debian's python3 (python3-dbus and python3-gi come with firewalld)");
    let _fake = Fake(fake);
    cni_testkit::poll::until("the fake takes firewalld's name", cni_testkit::poll::EVENTUALLY, || {
        bus.has_owner(FIREWALLD)
    });
    let addr = bus.address();
    let dir = bus.dir.path();
    let prev = prev_result(&["10.79.0.2/24"]);
    let c = conf("fwdhostile", json!({"backend": "firewalld"}), Some(&prev), dir);

    let clean = |what: &str, msg: &str| {
        assert!(msg.len() < 1024, "{what}: the peer's text is not bounded: {} bytes", msg.len());
        assert!(
            !msg.chars().any(|ch| ch.is_control()),
            "{what}: control characters reach the error: {msg:?}"
        );
    };
    let add = run(&env, "ADD", "ctr-h", &addr, &c);
    assert!(!add.success(), "ADD must fail when firewalld refuses");
    clean("ADD", &add.error().msg);
    assert!(!dir.join("state/fwdhostile/ctr-h:eth0.json").exists(), "a failed ADD records nothing");

    let check = run(&env, "CHECK", "ctr-h", &addr, &c);
    assert!(!check.success(), "a 1 MiB zone name is not a zone");
    clean("CHECK", &check.error().msg);

    // A peer that never answers: DEL ends with an error of its own (the call's deadline),
    // well within the runner's limit, instead of hanging the runtime.
    let del = run(&env, "DEL", "ctr-h", &addr, &c);
    assert!(!del.success(), "a silent firewalld cannot confirm the removal");
    let msg = del.error().msg;
    clean("DEL", &msg);
    assert!(msg.contains("no answer"), "{msg}");
}
