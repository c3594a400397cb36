//! Throwaway network namespaces for tests.
//!
//! A [`TestNetns`] is a named namespace (`/run/netns/<prefix>-<random>`, so `ip netns exec`
//! works on it as an oracle) with `lo` up, removed again when the value is dropped — also
//! when a test panics, because unwinding runs `Drop`. Every test makes its own, so tests
//! run in parallel and never touch the machine's own namespace.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use cni_net::netns::{OwnedNamedNs, DEFAULT_NETNS_DIR};
use cni_net::{NetNs, Netlink};

/// Name prefix used when the caller gives none.
pub const DEFAULT_PREFIX: &str = "cnt";

/// Panics unless running as root: namespace tests must fail loudly, never skip silently.
pub fn require_root() {
    assert!(
        cni_os::is_root(),
        "this test needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN) to create network namespaces"
    );
}

/// A random 32-bit value from the kernel, for unique names.
fn random_suffix() -> u32 {
    cni_os::random::u32().expect("getrandom")
}

/// A network namespace that exists for the lifetime of this value.
#[derive(Debug)]
pub struct TestNetns {
    name: String,
    owned: OwnedNamedNs,
}

impl TestNetns {
    /// A new namespace named `cnt-<random>`.
    pub fn new() -> cni_net::Result<TestNetns> {
        TestNetns::with_prefix(DEFAULT_PREFIX)
    }

    /// A new namespace named `<prefix>-<random>`; each test suite passes its own prefix.
    pub fn with_prefix(prefix: &str) -> cni_net::Result<TestNetns> {
        require_root();
        let name = format!("{prefix}-{:08x}", random_suffix());
        // Removed when dropped, also if bringing lo up fails.
        let owned = OwnedNamedNs::create(DEFAULT_NETNS_DIR, &name)?;
        owned.bring_loopback_up()?;
        Ok(TestNetns { name, owned })
    }

    /// The namespace's name (the file name under `/run/netns`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind-mounted namespace file, e.g. what a runtime passes as `CNI_NETNS`.
    pub fn path(&self) -> &Path {
        self.owned.path()
    }

    /// The open namespace.
    pub fn netns(&self) -> &NetNs {
        self.owned.netns()
    }

    /// A new, independently owned handle to the namespace.
    pub fn open(&self) -> cni_net::Result<NetNs> {
        NetNs::open(self.owned.path())
    }

    /// A netlink socket bound to this namespace.
    pub fn netlink(&self) -> cni_net::Result<Netlink> {
        Netlink::in_ns(self.owned.netns())
    }

    /// Waits until no link named `name` exists here (DEL hands the deletion of a veth pair
    /// to a background process, so the pair disappears shortly after DEL returns).
    pub fn wait_link_gone(&self, name: &str) {
        let mut netlink = self.netlink().unwrap();
        crate::poll::until(&format!("{name} still exists in {}", self.name), crate::poll::EVENTUALLY, || {
            netlink.link_by_name(name).unwrap().is_none()
        });
    }

    /// Runs `f` inside the namespace (see [`NetNs::run`]).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> cni_net::Result<T> {
        self.owned.netns().run(f)
    }

    /// A command whose process runs inside this namespace (it calls `setns` between fork
    /// and exec). The command keeps its own duplicate of the namespace fd.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let ns_fd: OwnedFd = self
            .owned
            .netns()
            .as_fd()
            .try_clone_to_owned()
            .expect("duplicate the namespace fd for a child process");
        let mut command = Command::new(program);
        cni_os::process::enter_netns_on_spawn(&mut command, ns_fd);
        command
    }

    /// Runs `ip -j <args>` inside the namespace and parses its JSON output (a test oracle).
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let output = self.command("ip").arg("-j").args(args).output().expect("run ip");
        assert!(
            output.status.success(),
            "ip -j {args:?} in {} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        if output.stdout.iter().all(u8::is_ascii_whitespace) {
            return serde_json::Value::Array(Vec::new());
        }
        serde_json::from_slice(&output.stdout).expect("ip -j prints JSON")
    }

    /// The namespace's nftables ruleset as the kernel reports it (`nft -j list ruleset`, a
    /// test oracle): its objects (tables, chains, rules, sets, maps), without nft's
    /// `metainfo` banner; empty when there is no ruleset.
    pub fn nft_json(&self) -> Vec<serde_json::Value> {
        let output = self.nft(&["-j", "list", "ruleset"]);
        if output.iter().all(u8::is_ascii_whitespace) {
            return Vec::new();
        }
        let mut json: serde_json::Value = serde_json::from_slice(&output).expect("nft -j prints JSON");
        let objects = match json["nftables"].take() {
            serde_json::Value::Array(objects) => objects,
            other => panic!("nft -j list ruleset in {}: no nftables array: {other}", self.name),
        };
        objects.into_iter().filter(|object| object.get("metainfo").is_none()).collect()
    }

    /// `nft list ruleset` as text: for failure messages and tests about nft's own syntax.
    pub fn nft_text(&self) -> String {
        String::from_utf8(self.nft(&["list", "ruleset"])).expect("nft prints UTF-8")
    }

    fn nft(&self, args: &[&str]) -> Vec<u8> {
        let output = self.command("nft").args(args).output().expect("run nft");
        assert!(
            output.status.success(),
            "nft {args:?} in {} failed: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }
}

/// One "host" namespace (where bridges, host veth ends and firewall rules go) and `n`
/// "container" namespaces — the usual shape of a plugin test.
#[derive(Debug)]
pub struct HostAndContainers {
    pub host: TestNetns,
    pub containers: Vec<TestNetns>,
}

impl HostAndContainers {
    /// Creates the host and `n` containers with the default prefix.
    pub fn new(n: usize) -> cni_net::Result<HostAndContainers> {
        HostAndContainers::with_prefix(DEFAULT_PREFIX, n)
    }

    /// Creates the host and `n` containers named `<prefix>-<random>`.
    pub fn with_prefix(prefix: &str, n: usize) -> cni_net::Result<HostAndContainers> {
        let host = TestNetns::with_prefix(prefix)?;
        let containers =
            (0..n).map(|_| TestNetns::with_prefix(prefix)).collect::<cni_net::Result<Vec<_>>>()?;
        Ok(HostAndContainers { host, containers })
    }
}
