//! For the dhcp tests: a throwaway network with a real DHCP server (dnsmasq or kea) in its
//! own namespace on a bridge in the test's host namespace, and the lease daemon with a temp
//! socket and state directory. Every process started here is killed by its guard's Drop,
//! also when a test panics. Needs the Debian packages `dnsmasq-base`, `kea-dhcp4-server`
//! and `kea-dhcp6-server` (tests fail with that message when they are missing).

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cni_dhcp::protocol::{self, Op, Response};
use cni_testkit::dnsmasq;
use cni_testkit::ns::TestNetns;
use serde_json::{json, Value};

pub const BRIDGE: &str = "dhbr0";
pub const SERVER_IP: &str = "10.77.0.1";
/// The server's IPv6 address and the DHCPv6 pools' prefix.
pub const SERVER_IP6: &str = "fd77::1";
pub const GO_DHCP: &str = "/usr/lib/cni/dhcp";
pub const GO_BRIDGE: &str = "/usr/lib/cni/bridge";

/// Kills and reaps a child process when dropped.
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn require_binary(path: &str, package: &str) {
    assert!(Path::new(path).exists(), "{path} is missing: install the Debian package {package}");
}

/// Waits up to `limit` until `done` holds; fails naming `what` otherwise.
pub use cni_testkit::poll::until as wait_for;

/// Runs a scripted server, `serve` on a thread of its own polling the stop flag it is
/// given, while `test` runs. The flag is set when `test` returns or panics, so a failed
/// assertion fails the test instead of leaving it waiting for the server thread.
pub fn with_scripted_server<T>(serve: impl FnOnce(&AtomicBool) + Send, test: impl FnOnce() -> T) -> T {
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| serve(&stop));
        let _stop = StopOnDrop(&stop);
        test()
    })
}

fn run_ip(ns: &TestNetns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The host namespace with a bridge, and a server namespace plugged into it.
pub struct Network {
    pub host: TestNetns,
    pub server: TestNetns,
    pub dir: tempfile::TempDir,
}

impl Network {
    pub fn new(prefix: &str) -> Network {
        let host = TestNetns::with_prefix(prefix).unwrap();
        let server = TestNetns::with_prefix(prefix).unwrap();
        run_ip(&host, &["link", "add", BRIDGE, "type", "bridge"]);
        run_ip(&host, &["link", "set", BRIDGE, "up"]);
        let server_path = server.path().display().to_string();
        run_ip(
            &host,
            &["link", "add", "vsrv", "type", "veth", "peer", "name", "srv0", "netns", &server_path],
        );
        run_ip(&host, &["link", "set", "vsrv", "master", BRIDGE, "up"]);
        run_ip(&server, &["addr", "add", &format!("{SERVER_IP}/24"), "dev", "srv0"]);
        run_ip(&server, &["link", "set", "srv0", "up"]);
        Network { host, server, dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// dnsmasq with a 2-minute pool in 10.77.0.0/24, routes (121), DNS (6, 15, 119).
    pub fn dnsmasq(&self) -> ChildGuard {
        self.start_dnsmasq(true, false)
    }

    /// dnsmasq serving DHCPv6 only: a 2-minute pool in fd77::/64, DNS (23) and a search
    /// list (24); no router advertisements.
    pub fn dnsmasq6(&self) -> ChildGuard {
        self.start_dnsmasq(false, true)
    }

    /// dnsmasq serving both (for dual-stack attachments).
    pub fn dnsmasq_dual(&self) -> ChildGuard {
        self.start_dnsmasq(true, true)
    }

    /// Gives the server's interface its IPv6 address and waits until its link-local one
    /// is usable (DHCPv6 servers answer from it).
    pub fn server_v6(&self) {
        run_ip(&self.server, &["addr", "add", &format!("{SERVER_IP6}/64"), "dev", "srv0", "nodad"]);
        wait_for("the server's link-local address", Duration::from_secs(10), || {
            let out = self
                .server
                .command("ip")
                .args(["-6", "addr", "show", "dev", "srv0", "scope", "link"])
                .output();
            out.is_ok_and(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                text.contains("fe80") && !text.contains("tentative")
            })
        });
    }

    fn start_dnsmasq(&self, v4: bool, v6: bool) -> ChildGuard {
        require_binary(dnsmasq::BINARY, "dnsmasq-base");
        if v6 {
            self.server_v6();
        }
        let v4_args: &[&str] = &[
            "--dhcp-range=10.77.0.10,10.77.0.50,255.255.255.0,2m",
            "--dhcp-option=3,10.77.0.1",
            "--dhcp-option=121,10.9.0.0/16,10.77.0.254,0.0.0.0/0,10.77.0.1",
            "--dhcp-option=6,10.77.0.53",
            "--dhcp-option=15,example.test",
            "--dhcp-option=119,a.example,b.example",
        ];
        let v6_args: &[&str] = &[
            "--dhcp-range=fd77::10,fd77::50,64,2m",
            "--dhcp-option=option6:dns-server,[fd77::53]",
            "--dhcp-option=option6:domain-search,six.example",
        ];
        let child = self
            .server
            .command(dnsmasq::BINARY)
            .args(if v4 { v4_args } else { &[] })
            .args(if v6 { v6_args } else { &[] })
            .args(dnsmasq::dhcp_only_args("srv0", &self.path("dnsmasq.leases")))
            .arg("--log-dhcp")
            .arg(format!("--log-facility={}", self.path("dnsmasq.log").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dnsmasq");
        let guard = ChildGuard(Some(child));
        wait_for("dnsmasq to start", Duration::from_secs(10), || {
            let log = self.log("dnsmasq.log");
            (!v4 || log.contains("DHCP, IP range")) && (!v6 || log.contains("DHCPv6, IP range"))
        });
        guard
    }

    /// kea-dhcp6 with short lifetimes (`valid`, `preferred`, T1 and T2 in seconds), a pool
    /// of `pool_size` addresses from fd77::100, DNS (23) and a search list (24). Its server
    /// DUID is new at every start (not persisted), so a restarted kea is another server.
    pub fn kea6(&self, valid: u32, preferred: u32, t1: u32, t2: u32, pool_size: u16) -> ChildGuard {
        require_binary("/usr/sbin/kea-dhcp6", "kea-dhcp6-server");
        let starts = self.log("kea6.log").matches("DHCP6_STARTED").count();
        if starts == 0 {
            self.server_v6();
        }
        let last = format!("fd77::{:x}", 0x100 + u32::from(pool_size) - 1);
        let conf = json!({"Dhcp6": {
            "interfaces-config": {"interfaces": ["srv0"]},
            "server-id": {"type": "EN", "enterprise-id": 2495,
                          "identifier": format!("{:08x}{starts:04x}", std::process::id()),
                          "persist": false},
            "data-directory": self.dir.path(),
            "lease-database": {"type": "memfile", "persist": true, "lfc-interval": 0,
                               "name": self.path("kea-leases6.csv")},
            "valid-lifetime": valid, "min-valid-lifetime": valid, "max-valid-lifetime": valid,
            "preferred-lifetime": preferred, "min-preferred-lifetime": preferred,
            "max-preferred-lifetime": preferred,
            "renew-timer": t1, "rebind-timer": t2,
            "subnet6": [{"id": 1, "subnet": "fd77::/64", "interface": "srv0",
                         "pools": [{"pool": format!("fd77::100 - {last}")}],
                         "option-data": [{"name": "dns-servers", "data": "fd77::53"},
                                         {"name": "domain-search", "data": "k6.example"}]}],
            "loggers": [{"name": "kea-dhcp6", "severity": "DEBUG", "debuglevel": 40,
                         "output_options": [{"output": self.path("kea6.log")}]}]
        }});
        self.start_kea("kea-dhcp6", "kea6.json", &conf, || {
            self.log("kea6.log").matches("DHCP6_STARTED").count() > starts
        })
    }

    /// kea-dhcp4 with short leases (`valid` seconds, T1 and T2 as given) and its lease file
    /// and log in the temp dir.
    pub fn kea(&self, valid: u32, t1: u32, t2: u32) -> ChildGuard {
        require_binary("/usr/sbin/kea-dhcp4", "kea-dhcp4-server");
        let conf = json!({"Dhcp4": {
            "interfaces-config": {"interfaces": ["srv0"], "dhcp-socket-type": "raw"},
            "lease-database": {"type": "memfile", "persist": true, "lfc-interval": 0,
                               "name": self.path("kea-leases4.csv")},
            "valid-lifetime": valid, "min-valid-lifetime": valid, "max-valid-lifetime": valid,
            "renew-timer": t1, "rebind-timer": t2,
            "subnet4": [{"id": 1, "subnet": "10.77.0.0/24",
                         "pools": [{"pool": "10.77.0.100 - 10.77.0.150"}],
                         "option-data": [{"name": "routers", "data": SERVER_IP},
                                         {"name": "domain-name-servers", "data": "10.77.0.53"}]}],
            "loggers": [{"name": "kea-dhcp4", "severity": "DEBUG", "debuglevel": 40,
                         "output_options": [{"output": self.path("kea.log")}]}]
        }});
        self.start_kea("kea-dhcp4", "kea.json", &conf, || self.log("kea.log").contains("DHCP4_STARTED"))
    }

    /// Starts kea server `binary` in the server namespace with `conf` (written to
    /// `conf_file` in the temp dir, which also takes its pid and lock files) and waits
    /// until `started` says its log shows it serving.
    fn start_kea(
        &self,
        binary: &str,
        conf_file: &str,
        conf: &Value,
        started: impl FnMut() -> bool,
    ) -> ChildGuard {
        let conf_path = self.path(conf_file);
        std::fs::write(&conf_path, conf.to_string()).unwrap();
        let child = self
            .server
            .command(format!("/usr/sbin/{binary}"))
            .arg("-c")
            .arg(&conf_path)
            .env("KEA_PIDFILE_DIR", self.dir.path())
            .env("KEA_LOCKFILE_DIR", self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        let guard = ChildGuard(Some(child));
        wait_for(&format!("{binary} to open its sockets"), Duration::from_secs(10), started);
        guard
    }

    /// A UDP socket at `addr` in the server namespace for a scripted server: bound to the
    /// server's interface (SO_BINDTODEVICE), so broadcasts and multicasts leave through it,
    /// and with a short read timeout, so the server's loop sees its stop flag.
    pub fn server_udp_socket(&self, addr: &str) -> UdpSocket {
        self.server
            .run(|| {
                let socket = UdpSocket::bind(addr).unwrap();
                cni_os::inet::bind_to_device(&socket, "srv0").expect("SO_BINDTODEVICE");
                socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                socket
            })
            .unwrap()
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    pub fn socket(&self) -> PathBuf {
        self.path("dhcp.sock")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    /// Starts the daemon (in the host namespace; it enters containers' namespaces itself)
    /// and waits until it answers STATUS.
    pub fn daemon(&self) -> ChildGuard {
        self.daemon_with(&[])
    }

    /// [`Network::daemon`] with more flags.
    pub fn daemon_with(&self, extra: &[&str]) -> ChildGuard {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.path("daemon.log")).unwrap();
        let child = self
            .host
            .command(crate::common::plugin("dhcp"))
            .arg("daemon")
            .arg("-socketpath")
            .arg(self.socket())
            .arg("-statedir")
            .arg(self.state_dir())
            // The default timeout: on a loaded 2-core VM a 6 s one was seen to run out.
            .args(["-timeout", "10s", "-resendmax", "2s", "-debug"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the dhcp daemon");
        let guard = ChildGuard(Some(child));
        wait_for("the daemon to answer", Duration::from_secs(10), || {
            protocol::call(&self.socket(), Op::Status, None, Duration::from_secs(5)).is_ok_and(|r| r.ok)
        });
        guard
    }

    /// The Go reference daemon (Debian `containernetworking-plugins`) on its own socket.
    pub fn go_daemon(&self) -> ChildGuard {
        require_binary(GO_DHCP, "containernetworking-plugins");
        let log = std::fs::File::create(self.path("go-daemon.log")).unwrap();
        let child = self
            .host
            .command(GO_DHCP)
            .arg("daemon")
            .arg("-socketpath")
            .arg(self.path("go-dhcp.sock"))
            .args(["-timeout", "6s"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the Go dhcp daemon");
        let guard = ChildGuard(Some(child));
        wait_for("the Go daemon's socket", Duration::from_secs(10), || self.path("go-dhcp.sock").exists());
        guard
    }

    pub fn status(&self) -> Response {
        protocol::call(&self.socket(), Op::Status, None, Duration::from_secs(5)).unwrap()
    }

    /// A bridge configuration delegating to dhcp.
    pub fn conf(&self) -> Value {
        json!({"cniVersion": "1.1.0", "name": "dhnet", "type": "bridge", "bridge": BRIDGE,
               "ipam": {"type": "dhcp", "daemonSocketPath": self.socket(),
                        "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}]}})
    }

    /// The files in the daemon's state directory.
    pub fn records(&self) -> Vec<String> {
        match std::fs::read_dir(self.state_dir()) {
            Ok(dir) => dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        }
    }
}
