//! A host where another firewall drops forwarded traffic: Docker's iptables-nft layout
//! (`filter FORWARD` policy DROP, a `DOCKER-USER` chain jumped to first, forwarding on),
//! reproduced in the test's own host namespace. podman's default network (bridge +
//! host-local with ipMasq, portmap, `{"type": "firewall"}` naming no backend, tuning) run
//! by cnitool must give the container egress and hostPort ingress from outside the host,
//! leave every other forwarded address dropped, and DEL or GC must leave the filter table
//! exactly as it was. The admission's rules must be what iptables-nft itself writes.

use crate::common::{self, call};
use cni_net::netlink::{AddressFlags, IpFamily, LinkCondition, LinkSpec, Route, VethSpec};
use cni_net::nft::{Expr, Family, NftClient};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

use super::support::{assert_blocked, assert_reaches, ok};

const PREFIX: &str = "dfw";
const NETWORK: &str = "dfwnet";
const HOST_UPLINK_IP: &str = "10.246.0.1";
const WORLD_IP: &str = "10.246.0.2";
const OTHER_IP: &str = "10.245.0.2";
const HOST_PORT: u16 = 18380;

/// The host, one container, the outside world (routed through the host) and another
/// address behind the host that is no CNI attachment.
struct DockerHost {
    env: HostAndContainers,
    world: TestNetns,
    other: TestNetns,
    dir: tempfile::TempDir,
}

/// Wires `peer` to the host by a veth: host `<host_ip>/24`, peer `<peer_ip>/24` with its
/// default route through the host.
fn wire(host: &TestNetns, link: &str, peer: &TestNetns, host_ip: &str, peer_ip: &str) {
    let mut h = host.netlink().unwrap();
    let spec = VethSpec { link: LinkSpec::new(link), peer: LinkSpec::new("eth0").netns(peer.netns()) };
    let up = h.add_veth(&spec).unwrap().unwrap();
    h.add_address(up.index, format!("{host_ip}/24").parse().unwrap(), AddressFlags::empty()).unwrap();
    h.set_link_up(up.index).unwrap();
    let mut p = peer.netlink().unwrap();
    let eth0 = p.require_link("eth0").unwrap();
    p.add_address(eth0.index, format!("{peer_ip}/24").parse().unwrap(), AddressFlags::empty()).unwrap();
    p.set_link_up(eth0.index).unwrap();
    p.wait_for_link(eth0.index, LinkCondition::Carrier, Duration::from_secs(5)).unwrap();
    p.add_route(&Route::default_route(IpFamily::V4).gateway(host_ip.parse().unwrap())).unwrap();
}

impl DockerHost {
    fn new() -> DockerHost {
        let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
        let world = TestNetns::with_prefix(PREFIX).unwrap();
        let other = TestNetns::with_prefix(PREFIX).unwrap();
        wire(&env.host, "dfwup", &world, HOST_UPLINK_IP, WORLD_IP);
        wire(&env.host, "dfwother", &other, "10.245.0.1", OTHER_IP);
        cni_net::sysctl::write_in(env.host.netns(), "net.ipv4.ip_forward", "1").unwrap();
        let dir = tempfile::Builder::new().prefix("dfw-").tempdir().unwrap();
        DockerHost { env, world, other, dir }
    }

    fn host(&self) -> &TestNetns {
        &self.env.host
    }

    fn sh(&self, script: &str) {
        let out = self.host().command("sh").args(["-ec", script]).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// What dockerd does to the filter tables when it starts.
    fn docker_firewall(&self) {
        self.sh("iptables -N DOCKER-USER; iptables -A DOCKER-USER -j RETURN; iptables -N DOCKER
             iptables -P FORWARD DROP; iptables -A FORWARD -j DOCKER-USER
             iptables -A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
             iptables -A FORWARD -o docker0 -j DOCKER
             iptables -A FORWARD -i docker0 ! -o docker0 -j ACCEPT
             ip6tables -N DOCKER-USER; ip6tables -A DOCKER-USER -j RETURN
             ip6tables -P FORWARD DROP; ip6tables -A FORWARD -j DOCKER-USER");
    }

    /// `iptables-save` and `ip6tables-save` of the filter table without counters and
    /// comments; a warning on stderr (a rule iptables cannot read) fails the test.
    fn filter_tables(&self) -> String {
        let mut all = String::new();
        for program in ["iptables-save", "ip6tables-save"] {
            let out = self.host().command(program).args(["-t", "filter"]).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && stderr.trim().is_empty(), "{program}: {stderr}");
            for line in String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.starts_with('#')) {
                let line = if line.starts_with(':') { line.split(" [").next().unwrap() } else { line };
                all.push_str(line);
                all.push('\n');
            }
        }
        all
    }

    /// podman's default network, with the lab's subnet and private state directories.
    fn write_conflist(&self) {
        let list = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [
            {"type": "bridge", "bridge": "dfw0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": self.dir.path().join("ipam"),
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": "10.247.0.0/24", "gateway": "10.247.0.1"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"},
            {"type": "tuning"}]});
        std::fs::create_dir_all(self.dir.path().join("net.d")).unwrap();
        let path = self.dir.path().join("net.d/podman.conflist");
        std::fs::write(path, serde_json::to_vec(&list).unwrap()).unwrap();
    }

    fn cnitool(&self, verb: &str) -> Command {
        let cnitool = cni_testkit::binaries::workspace_binary("cnitool", "cnitool");
        let mut cmd = self.host().command(cnitool);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NETCONFPATH", self.dir.path().join("net.d"))
            .env("CNI_PATH", common::plugin_dir())
            .env(
                "CAP_ARGS",
                json!({"portMappings": [{"hostPort": HOST_PORT, "containerPort": 80, "protocol": "tcp"}]})
                    .to_string(),
            )
            .args([verb, NETWORK])
            .arg(self.env.containers[0].path())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"));
        cmd
    }

    fn cnitool_ok(&self, verb: &str) {
        let out = self.cnitool(verb).output().unwrap();
        assert!(
            out.status.success(),
            "cnitool {verb}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn firewall_gc(&self) {
        let conf = json!({"cniVersion": "1.1.0", "name": NETWORK, "type": "firewall",
            "cni.dev/valid-attachments": []});
        ok(&call("firewall", "GC", self.host(), None, &conf).run());
    }

    /// host-local's address for the container (it moves on at each ADD).
    fn container_ip(&self) -> String {
        let mut nl = self.ctr().netlink().unwrap();
        let eth0 = nl.require_link("eth0").unwrap();
        nl.addresses(Some(eth0.index), None)
            .unwrap()
            .iter()
            .find(|a| a.scope == 0)
            .unwrap()
            .address
            .addr()
            .to_string()
    }

    fn ctr(&self) -> &TestNetns {
        &self.env.containers[0]
    }
}

/// Traffic the admission lets through, and traffic the host's policy still drops.
fn assert_admitted_and_nothing_else(lab: &DockerHost, round: u16) {
    let port = 7100 + round * 10;
    let ip = lab.container_ip();
    assert_reaches(lab.ctr(), &lab.world, &format!("{WORLD_IP}:{port}"));
    let _server = tcp_echo_server(lab.ctr().netns(), format!("{ip}:80").parse().unwrap()).unwrap();
    let published = format!("{HOST_UPLINK_IP}:{HOST_PORT}").parse().unwrap();
    tcp_echo(lab.world.netns(), published, b"hostPort", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("the published port from outside: {e}"));
    // Not DNATed: the container's address straight from outside stays dropped.
    assert_blocked(&lab.world, lab.ctr(), &format!("{ip}:{}", port + 1));
    // Another address behind the host, no CNI attachment: still dropped both ways.
    assert_blocked(&lab.world, &lab.other, &format!("{OTHER_IP}:{}", port + 2));
    assert_blocked(&lab.other, &lab.world, &format!("{WORLD_IP}:{}", port + 3));
}

#[test]
fn docker_forward_drop_host_podman_chain_egress_and_hostport_ingress() {
    let lab = DockerHost::new();
    lab.docker_firewall();
    // A node swapped from the reference: its firewall's chain, for a pod it started.
    lab.sh("iptables -N CNI-FORWARD; iptables -N CNI-ADMIN
         iptables -I FORWARD -m comment --comment 'CNI firewall plugin rules' -j CNI-FORWARD
         iptables -A CNI-FORWARD -m comment --comment 'CNI firewall plugin admin overrides' -j CNI-ADMIN
         iptables -A CNI-FORWARD -d 10.247.0.200/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
         iptables -A CNI-FORWARD -s 10.247.0.200/32 -j ACCEPT");
    lab.write_conflist();
    let before = lab.filter_tables();
    assert_blocked(&lab.other, &lab.world, &format!("{WORLD_IP}:7000"));

    lab.cnitool_ok("add");
    let during = lab.filter_tables();
    assert!(during.contains(":FORWARD DROP"), "the host's policy stays: {during}");
    let ip = lab.container_ip();
    assert!(during.contains(&format!("-A CNI-RS-FORWARD -s {ip}/32 -m comment")), "{during}");
    assert!(during.contains("--ctstate DNAT"), "{during}");
    assert_admitted_and_nothing_else(&lab, 0);
    lab.cnitool_ok("check");

    lab.cnitool_ok("del");
    assert_eq!(lab.filter_tables(), before, "DEL leaves the filter tables as before ADD");
    lab.cnitool_ok("del");
    assert_eq!(lab.filter_tables(), before, "a second DEL changes nothing");

    // GC of attachments the runtime no longer lists, as after a lost DEL.
    lab.cnitool_ok("add");
    assert_admitted_and_nothing_else(&lab, 1);
    lab.firewall_gc();
    assert_eq!(lab.filter_tables(), before, "GC leaves the filter tables as before ADD");
    assert!(!lab.cnitool("check").output().unwrap().status.success(), "CHECK sees the admission gone");
    lab.firewall_gc();
    lab.cnitool_ok("del");
    assert_eq!(lab.filter_tables(), before);
}

/// A firewall request for one made-up attachment (the plugin only needs its addresses).
fn firewall_conf(ips: &[&str]) -> serde_json::Value {
    let ips: Vec<_> = ips.iter().map(|a| json!({"address": a})).collect();
    json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "firewall",
        "prevResult": {"cniVersion": "1.0.0", "ips": ips}})
}

fn host_only() -> DockerHost {
    let lab = DockerHost::new();
    lab.write_conflist();
    lab
}

/// The rules of `chain` as nf_tables holds them, read over netlink in the host namespace.
fn chain_exprs(lab: &DockerHost, family: Family, chain: &str) -> Vec<Vec<Expr>> {
    let chain = chain.to_string();
    lab.host()
        .run(move || NftClient::new().unwrap().list_rules(family, "filter", &chain).unwrap())
        .unwrap()
        .into_iter()
        .map(|r| r.rule.exprs)
        .collect()
}

#[test]
fn admission_rules_are_what_iptables_nft_writes() {
    let lab = host_only();
    lab.docker_firewall();
    let conf = firewall_conf(&["10.247.0.9/24", "fd47::9/64"]);
    ok(&call("firewall", "ADD", lab.host(), Some(lab.ctr()), &conf).run());
    let saved = lab.filter_tables();
    let tag = saved
        .lines()
        .find_map(|l| l.strip_prefix("-A CNI-RS-FORWARD -s 10.247.0.9/32 -m comment --comment \""))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no egress rule: {saved}"))
        .to_string();
    for (program, family, ip) in
        [("iptables", Family::Ipv4, "10.247.0.9/32"), ("ip6tables", Family::Ipv6, "fd47::9/128")]
    {
        // The same rules written by iptables-nft itself, in a chain of the test's.
        lab.sh(&format!(
            "{program} -N DFW-REF
             {program} -A DFW-REF -s {ip} -m comment --comment '{tag}' -j ACCEPT
             {program} -A DFW-REF -d {ip} -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment '{tag}' -j ACCEPT
             {program} -A DFW-REF -d {ip} -m conntrack --ctstate DNAT -m comment --comment '{tag}' -j ACCEPT
             {program} -N DFW-JUMP; {program} -A DFW-JUMP -j CNI-RS-FORWARD"
        ));
        assert_eq!(
            chain_exprs(&lab, family, "CNI-RS-FORWARD"),
            chain_exprs(&lab, family, "DFW-REF"),
            "{program}"
        );
        let jump = chain_exprs(&lab, family, "DFW-JUMP");
        assert_eq!(chain_exprs(&lab, family, "FORWARD")[0], jump[0], "{program}: FORWARD's first rule");
    }
    // iptables reads ours as it reads its own (filter_tables fails on any warning).
    let saved = lab.filter_tables();
    let lines = |chain: &str| -> Vec<String> {
        let prefix = format!("-A {chain} ");
        saved.lines().filter_map(|l| l.strip_prefix(&prefix)).map(str::to_string).collect()
    };
    assert_eq!(lines("CNI-RS-FORWARD"), lines("DFW-REF"));
    assert_eq!(lines("CNI-RS-FORWARD").len(), 6, "{saved}");
    let listed = lab.host().command("iptables").args(["-L", "FORWARD", "-n"]).output().unwrap();
    assert!(
        listed.status.success() && listed.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    ok(&call("firewall", "CHECK", lab.host(), Some(lab.ctr()), &conf).run());
}

#[test]
fn odd_forward_layouts_get_nothing_or_keep_what_is_not_ours() {
    let conf = firewall_conf(&["10.247.0.9/24", "fd47::9/64"]);
    let add_del = |lab: &DockerHost| {
        ok(&call("firewall", "ADD", lab.host(), Some(lab.ctr()), &conf).run());
        let during = lab.filter_tables();
        ok(&call("firewall", "CHECK", lab.host(), Some(lab.ctr()), &conf).run());
        ok(&call("firewall", "DEL", lab.host(), Some(lab.ctr()), &conf).run());
        during
    };

    // iptables with FORWARD policy ACCEPT: nothing to get past, nothing added.
    let lab = host_only();
    lab.sh("iptables -N DOCKER-USER; iptables -A FORWARD -j DOCKER-USER; ip6tables -P FORWARD ACCEPT");
    let before = lab.filter_tables();
    assert_eq!(add_del(&lab), before, "policy accept: the filter tables are left alone");

    // A `filter` table made with nft whose FORWARD is a regular chain (no hook), and
    // another table's forward-hook chain that drops: not iptables' chain, left alone.
    let lab = host_only();
    lab.sh("nft 'add table ip filter; add chain ip filter FORWARD; add table ip dfw_other'
            nft 'add chain ip dfw_other dfwfwd { type filter hook forward priority 10; policy drop; }'");
    let before = lab.host().nft_text();
    add_del(&lab);
    assert!(!lab.filter_tables().contains("CNI-RS"));
    assert!(lab.host().nft_text().starts_with(before.split("table inet").next().unwrap()));

    // Policy DROP, and an administrator's rule already in a chain of our name: ours come
    // and go, the administrator's stays.
    let lab = host_only();
    lab.docker_firewall();
    lab.sh("iptables -N CNI-RS-FORWARD; iptables -A CNI-RS-FORWARD -s 10.9.9.9/32 -j ACCEPT");
    let during = add_del(&lab);
    assert!(during.contains("-A CNI-RS-FORWARD -s 10.247.0.9/32"), "{during}");
    let after = lab.filter_tables();
    assert!(after.contains("-A CNI-RS-FORWARD -s 10.9.9.9/32 -j ACCEPT"), "{after}");
    assert!(!after.contains("10.247.0.9"), "{after}");
    // A second DEL, and a DEL with neither prevResult nor namespace, change nothing.
    let bare = json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "firewall"});
    ok(&call("firewall", "DEL", lab.host(), None, &bare).run());
    assert_eq!(lab.filter_tables(), after);
}
