//! Rolling a podman host back to the Go reference plugins while a container ours started
//! runs: `cnitool handover` on the engine's host, the plugin directory's binaries swapped
//! for Debian's (/usr/lib/cni), then `podman rm -f` tears the container down through the
//! Go plugins. Its published port keeps answering across the swap, podman reports no
//! teardown error, and the host ends as after a warm-up container of each set.
//! Needs root, podman, crun, busybox-static and containernetworking-plugins.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni_e2e::image::INDEX_BODY;
use cni_e2e::net_text::http_get;
use cni_e2e::oracle::HostSnapshot;
use cni_e2e::plugin_dir::PluginDir;
use cni_e2e::podman::{NetworkBackend, Podman, DEFAULT_NETWORK, PODMAN_CHAIN};
use cni_testkit::binaries::workspace_binary;

const GO: &str = "/usr/lib/cni";

/// The plugin directory podman runs from, switched between ours and copies of the Go
/// binaries, as an operator swaps the files of a plugin directory (ours wait beside them
/// as `<name>.ours`).
struct Swappable {
    dir: PathBuf,
}

impl Swappable {
    fn to_go(&self) {
        for name in PODMAN_CHAIN {
            let path = self.dir.join(name);
            std::fs::rename(&path, self.dir.join(format!("{name}.ours"))).unwrap();
            std::fs::copy(Path::new(GO).join(name), &path).unwrap();
        }
    }

    fn to_ours(&self) {
        for name in PODMAN_CHAIN {
            std::fs::rename(self.dir.join(format!("{name}.ours")), self.dir.join(name)).unwrap();
        }
    }
}

fn assert_port_answers(podman: &Podman, port: u16, when: &str) {
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    let body = http_get(podman.host().netns(), target, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{when}: published port {port}: {e}"));
    assert_eq!(body, INDEX_BODY, "{when}");
}

fn web(podman: &Podman, name: &str, port: u16) {
    podman.start(name, &["-p", &format!("{port}:80")], &["httpd", "-f", "-p", "80", "-h", "/var/www"]);
    assert_port_answers(podman, port, name);
}

/// `podman rm -f` must tear the network down without an error of the plugins.
fn remove(podman: &Podman, name: &str) {
    let out = podman.run(&["rm", "--force", "--time", "0", name]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "podman rm {name}: {stderr}");
    assert!(!stderr.contains("error") && !stderr.contains("failed"), "podman rm {name} reported: {stderr}");
}

#[test]
fn podman_removes_a_container_ours_started_through_the_go_plugins_after_handover() {
    for plugin in PODMAN_CHAIN {
        assert!(
            Path::new(GO).join(plugin).exists(),
            "{GO}/{plugin} missing: install containernetworking-plugins"
        );
    }
    let plugins = PluginDir::install_ours();
    let swap = Swappable { dir: plugins.path().to_path_buf() };
    let podman = Podman::set_up_on(plugins, NetworkBackend::Cni);
    // Warm-up: a container with each set, so that the baseline holds what each keeps for
    // good (the reference's shared chains, our tables).
    swap.to_go();
    web(&podman, "cne-rb-warm-go", 8091);
    remove(&podman, "cne-rb-warm-go");
    swap.to_ours();
    web(&podman, "cne-rb-warm-ours", 8091);
    remove(&podman, "cne-rb-warm-ours");
    let baseline = (HostSnapshot::take(podman.host()), podman.allocations(DEFAULT_NETWORK));

    web(&podman, "cne-rb", 8092);
    let cnitool = workspace_binary("cnitool", "cnitool");
    let out =
        podman.host().command(&cnitool).args(["handover", "--cache-dir", "/var/lib/cni"]).output().unwrap();
    assert!(out.status.success(), "cnitool handover: {}", String::from_utf8_lossy(&out.stderr));
    swap.to_go();
    assert_port_answers(&podman, 8092, "after handover and the swap to the Go plugins");
    remove(&podman, "cne-rb");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = (HostSnapshot::take(podman.host()), podman.allocations(DEFAULT_NETWORK));
        if now == baseline {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "host not restored: allocations {:?} -> {:?}\n{}",
            baseline.1,
            now.1,
            baseline.0.diff(&now.0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
