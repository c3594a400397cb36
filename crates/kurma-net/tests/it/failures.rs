//! Netplugins that misbehave: `setup` past the limit, `add` past the limit, `add` exiting 3,
//! `add` flooding its output.

use std::time::Duration;

use crate::common::{links_of, mynet_entry, reservations, Bed, ImageFiles, PREFIX};
use cni_testkit::ns::TestNetns;
use kurma_net::{Error, ExecFailure};
use serde_json::json;

/// Pids of processes running exactly `sleep SECONDS` (each test sleeps its own number).
fn sleepers(seconds: &str) -> Vec<u32> {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .collect()
}

fn with_mode(mut entry: serde_json::Value, mode: &str, seconds: &str) -> serde_json::Value {
    entry["khMode"] = mode.into();
    entry["khSleep"] = seconds.into();
    entry
}

fn with_daemon(mut entry: serde_json::Value, seconds: &str) -> serde_json::Value {
    entry["khDaemonSleep"] = seconds.into();
    entry
}

#[test]
fn a_background_process_of_setup_runs_until_the_plugin_stops() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let entry = mynet_entry("daemon", &images.file_uri("shell.aci"), "kh-br-dm", "10.209.25");
    let config = json!({ "container_networks": [with_daemon(with_mode(entry, "daemon-setup", "0"), "614")] });
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    assert_eq!(sleepers("614").len(), 1, "setup returned, its background process runs on");
    host.stop_plugins().unwrap();
    assert_eq!(sleepers("614"), Vec::<u32>::new(), "stopping the plugin stops it");
}

#[test]
fn setup_past_the_limit_tears_the_plugin_down() {
    let bed = Bed::new().with_limit(Duration::from_secs(3));
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let uri = images.file_uri("shell.aci");
    let config = json!({ "container_networks": [
        { "name": "lo", "aci": images.file_uri("lo-net.aci") },
        with_daemon(with_mode(mynet_entry("slow", &uri, "kh-br-s", "10.209.20"), "sleep-setup", "611"), "613"),
    ]});
    let host = bed.host(&config);
    let err = host.start_plugins().unwrap_err();
    match &err {
        Error::Executable { network, executable: "setup", failure: ExecFailure::Timeout(limit), .. } => {
            assert_eq!(network, "slow");
            assert_eq!(*limit, Duration::from_secs(3));
        }
        other => panic!("expected a setup timeout, got {other}"),
    }
    assert!(err.to_string().contains("/opt/network/setup did not return within its limit"), "{err}");
    // Torn down: the slow plugin and the one started before it in the same call.
    assert_eq!(host.plugin_status("slow"), None);
    assert_eq!(host.plugin_status("lo"), None);
    assert!(!host.plugin_rootfs("slow").exists());
    assert_eq!(sleepers("611"), Vec::<u32>::new(), "the timed-out setup is killed");
    assert_eq!(sleepers("613"), Vec::<u32>::new(), "its background process is killed with the plugin");
}

#[test]
fn add_past_the_limit_rolls_back_and_the_plugin_stays() {
    let bed = Bed::new().with_limit(Duration::from_secs(5));
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = json!({ "container_networks": [
        { "name": "lo", "aci": images.file_uri("lo-net.aci") },
        mynet_entry("mynet", &images.file_uri("mynet.aci"), "kh-br-a", "10.209.21"),
        with_mode(mynet_entry("slow", &images.file_uri("shell.aci"), "kh-br-b", "10.209.22"), "sleep-add", "612"),
    ]});
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let host_links_before = bed.host_links();
    let container = TestNetns::with_prefix(PREFIX).unwrap();

    let err = host.attach("kh-add-timeout", container.path(), None).unwrap_err();
    match &err {
        Error::Executable { network, executable: "add", failure: ExecFailure::Timeout(_), .. } => {
            assert_eq!(network, "slow")
        }
        other => panic!("expected an add timeout, got {other}"),
    }
    // mynet's add was rolled back: no interface, no host end, no reservation, no record.
    assert_eq!(links_of(&container), ["lo"]);
    assert_eq!(bed.host_links(), host_links_before);
    assert!(reservations(&host, "mynet").is_empty());
    assert!(host.attached("kh-add-timeout").unwrap().is_none());
    // The slow plugin stays, and the other networks keep working.
    assert_eq!(host.plugin_status("slow").as_deref(), Some("created"));
    assert_eq!(sleepers("612"), Vec::<u32>::new(), "the timed-out add is killed");
    let record =
        host.attach("kh-add-timeout", container.path(), Some(&["lo".into(), "mynet".into()])).unwrap();
    assert_eq!(record.networks.len(), 2);
    host.detach("kh-add-timeout").unwrap();
    assert_eq!(links_of(&container), ["lo"]);
}

#[test]
fn exit_code_and_stderr_are_in_the_error() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = json!({ "container_networks": [
        mynet_entry("mynet", &images.file_uri("mynet.aci"), "kh-br-e", "10.209.23"),
        with_mode(mynet_entry("broken", &images.file_uri("shell.oci.tar"), "kh-br-x", "10.209.24"), "fail-add", "0"),
    ]});
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let err = host.attach("kh-exit3", container.path(), None).unwrap_err();
    assert_eq!(err.exit_code(), Some(3), "{err}");
    let message = err.to_string();
    assert!(message.contains("network \"broken\": /opt/network/add exited with code 3"), "{message}");
    assert!(message.contains("kh-failure: the subnet is exhausted"), "stderr in the message: {message}");
    assert!(message.contains("partial"), "stdout in the message: {message}");
    assert_eq!(links_of(&container), ["lo"], "mynet rolled back");
    assert!(reservations(&host, "mynet").is_empty());
}

#[test]
fn detach_attempts_every_network_and_collects_the_errors() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let config = json!({ "container_networks": [
        mynet_entry("mynet", &images.file_uri("mynet.aci"), "kh-br-m", "10.209.27"),
        with_mode(mynet_entry("stubborn", &images.file_uri("shell.aci"), "kh-br-sb", "10.209.26"), "fail-del", "0"),
    ]});
    let host = bed.host(&config);
    host.start_plugins().unwrap();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    host.attach("kh-del", container.path(), None).unwrap();
    assert_eq!(links_of(&container).len(), 3);

    let err = host.detach("kh-del").unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("detach of container kh-del failed for 1 network(s)"), "{message}");
    assert!(message.contains("network \"stubborn\": /opt/network/del exited with code 4"), "{message}");
    assert!(message.contains("kh-failure: del refused"), "{message}");
    // Detach goes last-attached first: stubborn's del failed, mynet's still ran. Only
    // stubborn stays recorded, for a retry.
    assert!(reservations(&host, "mynet").is_empty());
    assert!(!links_of(&container).contains(&"eth0".to_string()), "mynet's eth0 is gone");
    assert!(links_of(&container).contains(&"eth1".to_string()), "stubborn's eth1 stays");
    let left = host.attached("kh-del").unwrap().unwrap();
    assert_eq!(left.networks.len(), 1);
    assert_eq!(left.networks[0].network, "stubborn");
    assert!(host.detach("kh-del").is_err(), "a retry runs stubborn's del again");
}

#[test]
fn an_executable_flooding_its_output_is_cut_at_the_cap_and_still_fails_cleanly() {
    let bed = Bed::new();
    let images = ImageFiles::build(&bed.tmp.path().join("images"));
    let entry = with_mode(
        mynet_entry("flood", &images.file_uri("shell.aci"), "kh-br-f", "10.209.26"),
        "flood-add",
        "0",
    );
    let host = bed.host(&json!({ "container_networks": [entry] }));
    host.start_plugins().unwrap();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let err = host.attach("kh-flood", container.path(), None).unwrap_err();
    match &err {
        Error::Executable { executable: "add", failure: ExecFailure::Exit(3), stdout, stderr, .. } => {
            // 64 MiB each were printed; the cap was kept, and the pipes were drained to the
            // end (the executable exited 3 rather than hanging on a full pipe).
            assert_eq!(stdout.len(), kurma_net::runtime::EXEC_OUTPUT_CAP);
            assert_eq!(stderr.len(), kurma_net::runtime::EXEC_OUTPUT_CAP);
            assert!(stdout.starts_with("kh-flood\n"));
        }
        other => {
            panic!("expected add to exit 3, got {}", other.to_string().chars().take(300).collect::<String>())
        }
    }
    assert_eq!(links_of(&container), ["lo"]);
}
