//! A throwaway etcd cluster on 127.0.0.1 for tests and benchmarks: `n` members of Debian's
//! `etcd` (package `etcd-server`) on free ports, data in a private directory that goes with
//! the cluster. Members can be killed (SIGKILL) to test failover. [`EtcdCluster::start_tls`]
//! serves clients over TLS only and requires their certificates (`--client-cert-auth`).

pub mod hostile;
pub mod pki;

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cni_etcd::{Client, Tls};
pub use hostile::{HostileMember, Hostility};
pub use pki::Pki;

const ETCD: &str = "/usr/bin/etcd";
static CLUSTERS: AtomicUsize = AtomicUsize::new(0);

/// A port nobody listens on right now, for a server started a moment later. Chosen below
/// the kernel's ephemeral range (`ip_local_port_range`): a port the kernel picked would go
/// back to that range when released, where any process's next outgoing connection or
/// `bind(0)` may take it before the server binds it (once, a member of a cluster lost its
/// client port that way, started without it, and the cluster lost its quorum when a test
/// killed another member). The range below is only taken by servers that ask for a port.
pub fn free_port() -> u16 {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10000u16.min(ephemeral_low / 2);
    let span = u64::from(ephemeral_low - low);
    for _ in 0..1000 {
        let random = cni_os::random::u64().expect("getrandom");
        let port = low + (random % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range after 1000 tries")
}

/// tmpfs when there is one (etcd's fsyncs are then free), the temp directory otherwise.
fn default_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

struct Member {
    name: String,
    client_url: String,
    /// The arguments it was started with: a killed member restarts with the same ones
    /// (its data directory makes it rejoin, the `--initial-*` flags are then ignored).
    args: Vec<OsString>,
    child: Option<Child>,
}

impl Member {
    /// Starts the member's etcd, its log appended to `<dir>/<name>.log`.
    fn spawn(&mut self, dir: &Path) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{}.log", self.name)))
            .expect("etcd log file");
        let child = Command::new(ETCD)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting etcd");
        self.child = Some(child);
    }
}

/// A running cluster; dropping it kills every member and removes the data.
pub struct EtcdCluster {
    dir: PathBuf,
    members: Vec<Member>,
    /// The certificates and a client's TLS configuration of a TLS cluster.
    tls: Option<(Pki, Tls)>,
}

impl EtcdCluster {
    /// Starts `n` members with data under a new directory in `base` (tmpfs such as /dev/shm
    /// makes etcd's fsyncs free; a disk measures them) named after `prefix`, and waits until
    /// the cluster answers. Panics with etcd's log when it does not come up.
    pub fn start_in(base: &Path, prefix: &str, n: usize) -> EtcdCluster {
        EtcdCluster::launch(base, prefix, n, false)
    }

    fn launch(base: &Path, prefix: &str, n: usize, with_tls: bool) -> EtcdCluster {
        EtcdCluster::launch_attempt(base, prefix, n, with_tls, 1)
    }

    fn launch_attempt(base: &Path, prefix: &str, n: usize, with_tls: bool, attempt: u32) -> EtcdCluster {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: install Debian's etcd-server (tools/test --setup-only does)"
        );
        let serial = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("{prefix}-etcd-{}-{serial}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating the etcd data directory");
        let pki = with_tls.then(|| Pki::create(&dir.join("pki"), prefix));
        let scheme = if with_tls { "https" } else { "http" };
        let peers: Vec<(String, String, String)> = (0..n)
            .map(|i| {
                let name = format!("{prefix}{i}");
                let peer = format!("http://127.0.0.1:{}", free_port());
                let client = format!("{scheme}://127.0.0.1:{}", free_port());
                (name, peer, client)
            })
            .collect();
        let initial: Vec<String> = peers.iter().map(|(name, peer, _)| format!("{name}={peer}")).collect();
        let token = format!("{prefix}-{}-{serial}", std::process::id());
        let mut members = Vec::new();
        for (name, peer, client) in &peers {
            let mut args: Vec<OsString> = Vec::new();
            if let Some(pki) = &pki {
                args.extend(["--client-cert-auth", "--trusted-ca-file"].map(OsString::from));
                args.push(pki.ca.clone().into());
                args.push("--cert-file".into());
                args.push(pki.server_cert.clone().into());
                args.push("--key-file".into());
                args.push(pki.server_key.clone().into());
            }
            args.extend(["--name", name, "--data-dir"].map(OsString::from));
            args.push(dir.join(name).into());
            let cluster = initial.join(",");
            args.extend(
                [
                    ["--listen-client-urls", client, "--advertise-client-urls", client],
                    ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer],
                    ["--initial-cluster", &cluster, "--initial-cluster-state", "new"],
                    ["--initial-cluster-token", &token, "--heartbeat-interval", "50"],
                ]
                .concat()
                .into_iter()
                .map(OsString::from),
            );
            // Quick elections: a killed member's successor is chosen in well under a second.
            args.extend(["--election-timeout", "500"].map(OsString::from));
            let mut member = Member { name: name.clone(), client_url: client.clone(), args, child: None };
            member.spawn(&dir);
            members.push(member);
        }
        let tls = pki.map(|pki| {
            let tls = Tls::load(&pki.client_files()).expect("loading the test certificates");
            (pki, tls)
        });
        let mut cluster = EtcdCluster { dir, members, tls };
        cluster.wait_ready(Duration::from_secs(30));
        if let Some(gone) = cluster.exited_member() {
            // A member that could not bind its ports (taken between our choice and its
            // start) exits while a quorum of the others serves: never hand out a cluster
            // short of a member. A new cluster on new ports, a few times at most.
            assert!(attempt < 3, "etcd member {gone} exited at start three times:\n{}", cluster.logs());
            drop(cluster);
            return EtcdCluster::launch_attempt(base, prefix, n, with_tls, attempt + 1);
        }
        cluster
    }

    /// The name of a member whose process has exited although nobody killed it.
    fn exited_member(&mut self) -> Option<String> {
        let exited =
            |m: &mut Member| m.child.as_mut().is_some_and(|child| !matches!(child.try_wait(), Ok(None)));
        self.members.iter_mut().find_map(|m| exited(m).then(|| m.name.clone()))
    }

    /// [`EtcdCluster::start_in`] with the data on tmpfs when there is one.
    pub fn start(prefix: &str, n: usize) -> EtcdCluster {
        EtcdCluster::start_in(&default_base(), prefix, n)
    }

    /// [`EtcdCluster::start`] with clients served over TLS only, each needing a certificate
    /// of the cluster's CA ([`EtcdCluster::pki`]). Peers talk plain HTTP among themselves.
    pub fn start_tls(prefix: &str, n: usize) -> EtcdCluster {
        EtcdCluster::start_tls_in(&default_base(), prefix, n)
    }

    /// [`EtcdCluster::start_tls`] with the data under `base`, as [`EtcdCluster::start_in`].
    pub fn start_tls_in(base: &Path, prefix: &str, n: usize) -> EtcdCluster {
        EtcdCluster::launch(base, prefix, n, true)
    }

    /// The certificates of a TLS cluster.
    pub fn pki(&self) -> Option<&Pki> {
        self.tls.as_ref().map(|(pki, _)| pki)
    }

    /// The cluster's data directory (a TLS cluster's certificates are under `pki/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits until the cluster accepts a write (a quorum is up: after starting, or after
    /// killed members were restarted); panics with the members' logs after `limit`.
    pub fn wait_ready(&self, limit: Duration) {
        let start = Instant::now();
        let mut client = self.client_with_timeout(Duration::from_secs(1));
        loop {
            match client.put(b"/ready-probe", b"", 0) {
                Ok(_) => return,
                Err(e) if start.elapsed() > limit => {
                    panic!("etcd cluster did not come up in {limit:?}: {e}\n{}", self.logs())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Every member's client URL, killed ones included.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A client of the whole cluster.
    pub fn client(&self) -> Client {
        self.client_with_timeout(Duration::from_secs(2))
    }

    fn client_with_timeout(&self, timeout: Duration) -> Client {
        let tls = self.tls.as_ref().map(|(_, tls)| tls.clone());
        Client::with_tls(&self.endpoints(), timeout, tls).expect("endpoints")
    }

    /// Kills member `index` with SIGKILL.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The index of the member that is the leader now, by the members' own status (None
    /// while there is none, or no member answers).
    pub fn leader(&self) -> Option<usize> {
        let tls = self.tls.as_ref().map(|(_, tls)| tls.clone());
        self.members.iter().position(|member| {
            let Ok(mut client) = Client::with_tls(&[&member.client_url], Duration::from_secs(1), tls.clone())
            else {
                return false;
            };
            client.member_status().is_ok_and(|status| status.is_leader())
        })
    }

    /// The process ids of the members running now (for their CPU time).
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.child.as_ref().map(Child::id)).collect()
    }

    /// Starts killed member `index` again on its data (it rejoins the cluster); nothing
    /// when it runs.
    pub fn restart(&mut self, index: usize) {
        if self.members[index].child.is_none() {
            self.members[index].spawn(&self.dir);
        }
    }

    /// The members' logs, for failure messages.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = fs::read_to_string(self.dir.join(format!("{}.log", m.name))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!("--- {} ---\n{}", m.name, tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
