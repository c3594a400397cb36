//! The `dhcp` binary's command line follows the workspace's conventions; its daemon's
//! Go-style flags are tested with the parser (`cni_dhcp::cli`).

use std::path::Path;

#[test]
fn dhcp_daemon_follows_the_command_line_conventions() {
    cni_testkit::cli::assert_conventions(Path::new(env!("CARGO_BIN_EXE_dhcp")), &["daemon"], "dhcp");
}

/// Without CNI_COMMAND and without a sub-command, the binary is the plugin answering as
/// every plugin does: its name and versions, on stderr, and a failure status.
#[test]
fn without_a_sub_command_it_is_the_plugin() {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_dhcp")).env_remove("CNI_COMMAND").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dhcp IPAM (cni-rs)"), "{stderr}");
}

/// `dhcp daemon` is the daemon even in a plugin's environment (CNI_COMMAND inherited by
/// whoever starts it), as `etcd-ipam agent` is: the sub-command is looked at first.
#[test]
fn the_daemon_sub_command_wins_over_an_inherited_cni_command() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dhcp"))
        .args(["daemon", "--help"])
        .env("CNI_COMMAND", "ADD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("-socketpath"), "{stdout}");
}
