//! A test network for the dnsname plugin and its resolver: a throwaway host namespace with
//! a bridge, containers attached by bridge + host-local + dnsname run as a runtime would,
//! DNS queries sent from inside a container namespace, and the resolver killed at the end.
//! Every namespace and bridge is prefixed `dns`.

use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{PluginCall, PluginOutput};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const PREFIX: &str = "dns";

/// A directory with the plugins under their names and the resolver, used as CNI_PATH.
pub fn cni_path() -> tempfile::TempDir {
    cni_testkit::ns::require_root();
    let dir = tempfile::tempdir().unwrap();
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    for name in ["bridge", "host-local", "dnsname"] {
        std::os::unix::fs::symlink(&plugins, dir.path().join(name)).unwrap();
    }
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cni-dnsd"), dir.path().join("cni-dnsd")).unwrap();
    dir
}

/// A host namespace with its state: the plugins' directory, IPAM data, dnsname records.
pub struct Host {
    pub ns: TestNetns,
    pub cni_path: tempfile::TempDir,
    pub dirs: tempfile::TempDir,
}

impl Host {
    pub fn new() -> Host {
        Host::with_prefix(PREFIX)
    }

    /// A host whose namespace is named `<prefix>-<random>`.
    pub fn with_prefix(prefix: &str) -> Host {
        Host {
            cni_path: cni_path(),
            ns: TestNetns::with_prefix(prefix).unwrap(),
            dirs: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts the resolver in the host namespace before any plugin does, reading upstream
    /// servers from `resolv_conf` (the plugin starts it with the machine's). The plugin
    /// finds it by its control socket and the test's Drop kills it by its pid file.
    pub fn start_resolver(&self, resolv_conf: &Path) {
        let status = self
            .resolver_command()
            .arg("--resolv-conf")
            .arg(resolv_conf)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let mut child = status.expect("start cni-dnsd");
        cni_testkit::poll::until(
            "the resolver answers its control socket",
            cni_testkit::poll::EVENTUALLY,
            || self.status().is_some(),
        );
        // Reaped by a thread: it is killed by its pid file when the test ends.
        std::thread::spawn(move || child.wait());
    }

    /// cni-dnsd in the host namespace on the test's state directory, with the pid file the
    /// test's Drop kills it by.
    pub fn resolver_command(&self) -> std::process::Command {
        let state = self.state_dir();
        let mut command = self.ns.command(env!("CARGO_BIN_EXE_cni-dnsd"));
        command.arg("--state-dir").arg(&state).arg("--pidfile").arg(state.join("dnsd.pid"));
        command
    }

    /// The resolver's `status` line, if it answers.
    pub fn status(&self) -> Option<String> {
        cni_dns::control::request(&self.state_dir().join("dnsd.sock"), "status", Duration::from_secs(5)).ok()
    }

    /// A counter of the status line (`queries`, `forwarded`, `refused`, ...).
    pub fn counter(&self, name: &str) -> Option<u64> {
        let status = self.status()?;
        let prefix = format!("{name}=");
        status.split_whitespace().find_map(|w| w.strip_prefix(&prefix)).and_then(|v| v.parse().ok())
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dirs.path().join("dnsname")
    }

    /// The resolver's pid, from its pid file, if it wrote one.
    pub fn resolver_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.state_dir().join("dnsd.pid")).ok()?.trim().parse().ok()
    }

    pub fn kill_resolver(&self) {
        if let Some(pid) = self.resolver_pid() {
            let _ = cni_os::process::kill(pid, cni_os::process::Signal::KILL);
            for _ in 0..200 {
                if !Path::new(&format!("/proc/{pid}")).exists() || !cni_os::process::exists(pid) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill_resolver();
    }
}

/// One network on the host: a bridge with a /24, the dnsname plugin after it.
pub struct Network {
    pub name: String,
    pub bridge: String,
    pub subnet_prefix: String,
    pub dnsname: Value,
    /// A second, IPv6 range (`fd89:<n>::/64`) besides the IPv4 one.
    pub dual_stack: bool,
}

impl Network {
    /// `n` picks the subnet 10.89.n.0/24 and bridge `dnsbr<n>`.
    pub fn new(name: &str, n: u8) -> Network {
        Network {
            name: name.into(),
            bridge: format!("dnsbr{n}"),
            subnet_prefix: format!("10.89.{n}"),
            dnsname: json!({"type": "dnsname", "domainName": "dns.podman", "capabilities": {"aliases": true}}),
            dual_stack: false,
        }
    }

    pub fn gateway(&self) -> IpAddr {
        format!("{}.1", self.subnet_prefix).parse().unwrap()
    }

    fn bridge_conf(&self, host: &Host) -> Value {
        let mut ranges = vec![json!([{"subnet": format!("{}.0/24", self.subnet_prefix)}])];
        if self.dual_stack {
            let n = self.subnet_prefix.rsplit('.').next().unwrap();
            ranges.push(json!([{"subnet": format!("fd89:{n}::/64")}]));
        }
        json!({"type": "bridge", "bridge": self.bridge, "isGateway": true,
            "ipam": {"type": "host-local", "ranges": ranges, "dataDir": host.dirs.path().join("ipam")}})
    }

    fn dnsname_conf(&self, host: &Host, aliases: &[&str]) -> Value {
        let mut conf = self.dnsname.clone();
        conf["stateDir"] = json!(host.state_dir());
        if !aliases.is_empty() {
            conf["runtimeConfig"] = json!({"aliases": {self.name.clone(): aliases}});
        }
        conf
    }

    pub fn call(
        &self,
        host: &Host,
        plugin: &str,
        verb: &str,
        ctr: &Container,
        conf: Value,
        prev: Option<&Value>,
    ) -> PluginOutput {
        self.plugin_call(host, plugin, verb, ctr, conf, prev).run()
    }

    /// The dnsname call for `ctr` with `prev` (alias `alias`), not run yet.
    pub fn dnsname_call(&self, host: &Host, verb: &str, ctr: &Container, prev: &Value) -> PluginCall {
        self.plugin_call(host, "dnsname", verb, ctr, self.dnsname_conf(host, &["alias"]), Some(prev))
    }

    /// The bridge ADD alone (the step before dnsname).
    pub fn bridge_add(&self, host: &Host, ctr: &Container) -> Value {
        let out = self.call(host, "bridge", "ADD", ctr, self.bridge_conf(host), None);
        assert!(out.success(), "bridge ADD: {out:?}");
        out.json()
    }

    pub fn plugin_call(
        &self,
        host: &Host,
        plugin: &str,
        verb: &str,
        ctr: &Container,
        mut conf: Value,
        prev: Option<&Value>,
    ) -> PluginCall {
        conf["cniVersion"] = json!("1.0.0");
        conf["name"] = json!(self.name);
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        PluginCall::new(host.cni_path.path().join(plugin), verb)
            .netns(ctr.ns.path())
            .container_id(&ctr.id)
            .ifname("eth0")
            .cni_path(host.cni_path.path().to_str().unwrap())
            .args(&format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={0};K8S_POD_NAME={0}", ctr.name))
            .config(&conf)
            .in_namespace(host.ns.path())
    }

    /// ADD through the chain; returns the final result or the failing step's output.
    pub fn add(&self, host: &Host, ctr: &mut Container, aliases: &[&str]) -> Result<Value, PluginOutput> {
        let bridge = self.call(host, "bridge", "ADD", ctr, self.bridge_conf(host), None);
        if !bridge.success() {
            return Err(bridge);
        }
        let prev = bridge.json();
        let dns = self.call(host, "dnsname", "ADD", ctr, self.dnsname_conf(host, aliases), Some(&prev));
        if !dns.success() {
            let _ = self.call(host, "bridge", "DEL", ctr, self.bridge_conf(host), Some(&prev));
            return Err(dns);
        }
        let result = dns.json();
        ctr.results
            .insert(self.name.clone(), (result.clone(), aliases.iter().map(|a| a.to_string()).collect()));
        Ok(result)
    }

    pub fn del(&self, host: &Host, ctr: &mut Container) {
        let (prev, aliases) = ctr.results.remove(&self.name).expect("attached");
        let aliases: Vec<&str> = aliases.iter().map(String::as_str).collect();
        let out = self.call(host, "dnsname", "DEL", ctr, self.dnsname_conf(host, &aliases), Some(&prev));
        assert!(out.success(), "dnsname DEL: {out:?}");
        let out = self.call(host, "bridge", "DEL", ctr, self.bridge_conf(host), Some(&prev));
        assert!(out.success(), "bridge DEL: {out:?}");
    }

    pub fn dnsname_verb(&self, host: &Host, ctr: &Container, verb: &str) -> PluginOutput {
        let (prev, aliases) = &ctr.results[&self.name];
        let aliases: Vec<&str> = aliases.iter().map(String::as_str).collect();
        self.call(host, "dnsname", verb, ctr, self.dnsname_conf(host, &aliases), Some(prev))
    }

    /// GC with the given containers as the valid attachments.
    pub fn gc(&self, host: &Host, valid: &[&Container]) -> PluginOutput {
        let mut conf = self.dnsname_conf(host, &[]);
        conf["cni.dev/valid-attachments"] =
            valid.iter().map(|c| json!({"containerID": c.id, "ifname": "eth0"})).collect::<Value>();
        conf["cniVersion"] = json!("1.1.0");
        conf["name"] = json!(self.name);
        PluginCall::new(host.cni_path.path().join("dnsname"), "GC")
            .cni_path(host.cni_path.path().to_str().unwrap())
            .config(&conf)
            .in_namespace(host.ns.path())
            .run()
    }

    pub fn status(&self, host: &Host) -> PluginOutput {
        let mut conf = self.dnsname_conf(host, &[]);
        conf["cniVersion"] = json!("1.1.0");
        conf["name"] = json!(self.name);
        PluginCall::new(host.cni_path.path().join("dnsname"), "STATUS")
            .cni_path(host.cni_path.path().to_str().unwrap())
            .config(&conf)
            .in_namespace(host.ns.path())
            .run()
    }
}

/// A container: its namespace, id and name, and its results per network.
pub struct Container {
    pub ns: TestNetns,
    pub id: String,
    pub name: String,
    pub results: std::collections::HashMap<String, (Value, Vec<String>)>,
}

impl Container {
    pub fn new(name: &str) -> Container {
        Container::with_prefix(PREFIX, name)
    }

    /// A container whose namespace is named `<prefix>-<random>`.
    pub fn with_prefix(prefix: &str, name: &str) -> Container {
        let ns = TestNetns::with_prefix(prefix).unwrap();
        Container { id: format!("ctr-{}", ns.name()), ns, name: name.into(), results: Default::default() }
    }

    /// The container's first address on `network`.
    pub fn address(&self, network: &str) -> IpAddr {
        let ip = self.results[network].0["ips"][0]["address"].as_str().unwrap();
        ip.split('/').next().unwrap().parse().unwrap()
    }

    /// Sends `query` over UDP to `server` from inside the container; None on timeout.
    pub fn ask_udp(&self, server: SocketAddr, query: &Message) -> Option<Message> {
        let bytes = query.to_vec().unwrap();
        self.ns
            .run(move || {
                let socket = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
                socket.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                // Sending fails while the container's IPv6 address is still tentative (DAD).
                socket.send_to(&bytes, server).ok()?;
                let mut buf = vec![0u8; 65535];
                let n = socket.recv(&mut buf).ok()?;
                Some(Message::from_vec(&buf[..n]).expect("the resolver's reply parses"))
            })
            .unwrap()
    }

    pub fn ask_tcp(&self, server: SocketAddr, query: &Message) -> Option<Message> {
        let bytes = query.to_vec().unwrap();
        self.ns
            .run(move || {
                let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(3)).ok()?;
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&bytes);
                stream.write_all(&framed).ok()?;
                let mut len = [0u8; 2];
                stream.read_exact(&mut len).ok()?;
                let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
                stream.read_exact(&mut buf).ok()?;
                Some(Message::from_vec(&buf).expect("the resolver's reply parses"))
            })
            .unwrap()
    }

    /// The A records served for `name` by `server`, or the response code when none.
    pub fn lookup(&self, server: IpAddr, name: &str) -> Result<Vec<String>, String> {
        let reply =
            self.ask_udp(SocketAddr::new(server, 53), &query(name, RecordType::A)).ok_or("no reply")?;
        if reply.answers().is_empty() {
            return Err(reply.response_code().to_string());
        }
        Ok(reply.answers().iter().map(|r| r.data().to_string()).collect())
    }
}

pub fn query(name: &str, qtype: RecordType) -> Message {
    let mut q = Message::new();
    q.set_id(rand_id()).set_recursion_desired(true);
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    q
}

fn rand_id() -> u16 {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() & 0xffff)
        as u16
}
