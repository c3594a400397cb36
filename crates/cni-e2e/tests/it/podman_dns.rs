//! podman 4.3's CNI backend with DNS enabled on a network it creates: podman chains our
//! `dnsname` after the bridge, our `cni-dnsd` (installed next to the plugins) answers on the
//! network's gateway. Containers find each other by name and alias with busybox's
//! `nslookup` (through the nameserver podman put in their resolv.conf from our result),
//! `podman rm` takes the name away at once, a `kill -9`ed resolver is back with the same
//! names after the next plugin call, and two networks keep their names apart.
//! Needs root, podman, crun and busybox-static.

use std::path::PathBuf;

use cni_e2e::plugin_dir::PluginDir;
use cni_e2e::podman::{NetworkBackend, Podman};

/// Kills the resolver when dropped, also when the test panics (Podman's own drop does it
/// too; this one runs first, so the resolver cannot answer while podman tears down).
struct ResolverReaper {
    pid_file: PathBuf,
}

impl ResolverReaper {
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(&self.pid_file).ok()?.trim().parse().ok()
    }

    fn kill(&self) {
        cni_e2e::podman::kill_pid_file(&self.pid_file);
    }
}

impl Drop for ResolverReaper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `nslookup <name>` in `container` through its resolv.conf; the addresses it printed for
/// the name (busybox prints the server's address first, under "Server:").
fn lookup(podman: &Podman, container: &str, name: &str) -> Result<Vec<String>, String> {
    let out = podman.run(&["exec", container, "busybox", "nslookup", "-type=a", name]);
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let answers: Vec<String> = text
        .split("Name:")
        .skip(1)
        .flat_map(|block| {
            block.lines().filter_map(|l| l.trim().strip_prefix("Address:")).map(|a| a.trim().to_string())
        })
        .collect();
    if answers.is_empty() {
        Err(text)
    } else {
        Ok(answers)
    }
}

#[test]
fn podman_containers_resolve_each_other_by_name_and_alias_through_dnsname() {
    // Our plugins with the resolver beside them (podman's `cni_plugin_dirs`).
    let plugins = PluginDir::install_ours();
    let podman = Podman::set_up_on(plugins, NetworkBackend::Cni);
    let reaper = ResolverReaper { pid_file: podman.host().private_path("/run/cni/dnsname/dnsd.pid") };

    podman.ok(&["network", "create", "--subnet", "10.89.50.0/24", "cne-dns-a"]);
    podman.ok(&["network", "create", "--subnet", "10.89.51.0/24", "cne-dns-b"]);
    let conflist = podman.ok(&["network", "inspect", "cne-dns-a", "--format", "{{.DNSEnabled}}"]);
    assert_eq!(conflist, "true", "podman did not enable DNS on the network");

    podman.start("cne-web", &["--network", "cne-dns-a", "--network-alias", "www"], &["sleep", "600"]);
    podman.start("cne-client", &["--network", "cne-dns-a"], &["sleep", "600"]);
    podman.start("cne-other", &["--network", "cne-dns-b"], &["sleep", "600"]);
    let resolv = podman.ok(&["exec", "cne-client", "cat", "/etc/resolv.conf"]);
    assert!(resolv.contains("nameserver 10.89.50.1") && resolv.contains("dns.podman"), "{resolv}");

    let web = podman.eth0_ipv4("cne-web").addr.to_string();
    assert_eq!(lookup(&podman, "cne-client", "cne-web"), Ok(vec![web.clone()]));
    assert_eq!(lookup(&podman, "cne-client", "www.dns.podman"), Ok(vec![web.clone()]));
    assert_eq!(lookup(&podman, "cne-client", "CNE-WEB.dns.podman"), Ok(vec![web.clone()]));
    // The other network's resolver address does not know network a's names, and back.
    assert!(lookup(&podman, "cne-other", "cne-web.dns.podman").is_err());
    assert!(lookup(&podman, "cne-client", "cne-other.dns.podman").is_err());
    assert!(lookup(&podman, "cne-other", "cne-other.dns.podman").is_ok());

    // kill -9: the next container start restarts it, with every name from disk.
    let first = reaper.pid().expect("the resolver wrote its pid");
    reaper.kill();
    podman.start("cne-late", &["--network", "cne-dns-a"], &["sleep", "600"]);
    assert_ne!(reaper.pid(), Some(first), "a new resolver was started");
    assert_eq!(lookup(&podman, "cne-late", "www"), Ok(vec![web.clone()]));

    // A container publishing port 53 on every host address starts (rootful podman reserves
    // 0.0.0.0:53 by binding it; the resolver is on the gateway's port 1053, port 53 there is
    // redirected to it by a rule that runs before portmap's), and the network's names still
    // resolve through the gateway's port 53 rather than reaching the publishing container.
    let published = ["--network", "cne-dns-a", "-p", "53:53/udp", "-p", "53:53/tcp"];
    podman.start("cne-dns53", &published, &["sleep", "600"]);
    assert_eq!(lookup(&podman, "cne-client", "cne-dns53.dns.podman").map(|a| a.len()), Ok(1));
    assert_eq!(lookup(&podman, "cne-client", "www.dns.podman"), Ok(vec![web.clone()]));

    // rm takes the names away at once.
    podman.ok(&["rm", "--force", "--time", "0", "cne-web"]);
    assert!(lookup(&podman, "cne-client", "cne-web.dns.podman").is_err());
    assert!(lookup(&podman, "cne-client", "www.dns.podman").is_err());
    assert!(lookup(&podman, "cne-client", "cne-late.dns.podman").is_ok());
    drop(reaper);
}
