//! A real firewalld (Debian's package) on a private system bus, for one test: its own
//! `dbus-daemon` listening on a socket in a temp dir, and firewalld inside the test's host
//! network namespace and a mount namespace of its own whose `/run`, `/etc/firewalld` and
//! `/var/log` are temp dirs, so nothing of the machine's changes. Both processes are killed
//! when the guard is dropped.

use cni_testkit::ns::TestNetns;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
/// firewalld (Python) loads its whole configuration before it takes its bus name: seconds
/// on a busy machine.
const STARTUP: Duration = Duration::from_secs(90);

/// A private system bus: a `dbus-daemon` that lets root own and call anything.
pub struct Bus {
    pub dir: tempfile::TempDir,
    daemon: Child,
}

impl Bus {
    pub fn start() -> Bus {
        cni_testkit::ns::require_root();
        let dir = tempfile::Builder::new().prefix("fwd").tempdir().unwrap();
        let config = dir.path().join("bus.conf");
        std::fs::write(&config, bus_config(&dir.path().join("bus"))).unwrap();
        let daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile"])
            .stdin(Stdio::null())
            .spawn()
            .expect("run dbus-daemon (package dbus)");
        let bus = Bus { dir, daemon };
        cni_testkit::poll::until("the private bus answers", STARTUP, || {
            bus.try_send(&["org.freedesktop.DBus", "/", "org.freedesktop.DBus.GetId"]).is_some()
        });
        bus
    }

    /// The address plugins are given in DBUS_SYSTEM_BUS_ADDRESS.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.dir.path().join("bus").display())
    }

    /// `dbus-send --print-reply` (the oracle: another client than the plugin's); `None`
    /// when the call fails.
    pub fn try_send(&self, dest_path_method_args: &[&str]) -> Option<String> {
        let [dest, path, method, args @ ..] = dest_path_method_args else { panic!("dest, path, method") };
        let out = Command::new("dbus-send")
            .arg(format!("--bus={}", self.address()))
            .args(["--print-reply", "--reply-timeout=20000", &format!("--dest={dest}"), path, method])
            .args(args)
            .output()
            .expect("run dbus-send");
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn has_owner(&self, name: &str) -> bool {
        let reply = self.try_send(&[
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
            &format!("string:{name}"),
        ]);
        reply.is_some_and(|r| r.contains("boolean true"))
    }

    /// The zone firewalld has `source` in ("" for none).
    pub fn zone_of_source(&self, source: &str) -> String {
        let reply = self
            .try_send(&[
                FIREWALLD,
                "/org/fedoraproject/FirewallD1",
                "org.fedoraproject.FirewallD1.zone.getZoneOfSource",
                &format!("string:{source}"),
            ])
            .expect("getZoneOfSource");
        reply.split('"').nth(1).unwrap_or("").to_string()
    }

    /// Binds a source the way an administrator would (`firewall-cmd --add-source`).
    pub fn add_source(&self, zone: &str, source: &str) {
        self.try_send(&[
            FIREWALLD,
            "/org/fedoraproject/FirewallD1",
            "org.fedoraproject.FirewallD1.zone.addSource",
            &format!("string:{zone}"),
            &format!("string:{source}"),
        ])
        .expect("addSource");
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn bus_config(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy user="root">
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}

/// firewalld running on `bus`, in `host`'s network namespace.
pub struct Firewalld {
    child: Child,
    pub log: PathBuf,
}

impl Firewalld {
    pub fn start(bus: &Bus, host: &TestNetns) -> Firewalld {
        let root = bus.dir.path();
        for d in ["etc", "log"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let log = root.join("firewalld.log");
        // A mount namespace of its own: /run, /etc/firewalld and /var/log are temp dirs
        // there (firewalld writes its runtime state and may write its configuration).
        let script = format!(
            "set -e; mount -t tmpfs fwd-run /run; mount --bind {etc} /etc/firewalld; \
             mount --bind {logdir} /var/log; \
             exec firewalld --nofork --nopid --log-target console",
            etc = root.join("etc").display(),
            logdir = root.join("log").display(),
        );
        let child = host
            .command("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(root.join("firewalld.err")).unwrap())
            .spawn()
            .expect("run firewalld (package firewalld)");
        let mut fw = Firewalld { child, log };
        cni_testkit::poll::until("firewalld takes its name on the private bus", STARTUP, || {
            if let Ok(Some(status)) = fw.child.try_wait() {
                panic!("firewalld exited ({status}): {}", fw.logs(root));
            }
            bus.has_owner(FIREWALLD)
        });
        fw
    }

    fn logs(&mut self, root: &Path) -> String {
        let out = std::fs::read_to_string(&self.log).unwrap_or_default();
        let err = std::fs::read_to_string(root.join("firewalld.err")).unwrap_or_default();
        format!("{out}\n{err}")
    }
}

impl Drop for Firewalld {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
