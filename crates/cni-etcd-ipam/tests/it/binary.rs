//! The binary layout: `etcd-ipam` is the plugin and, as `etcd-ipam agent`, the node agent;
//! the multi-call `cni-plugins` neither knows etcd-ipam nor carries the etcd client and its
//! TLS stack (what every other plugin exec would otherwise map).

use std::path::Path;
use std::process::{Command, Output};

use cni_testkit::binaries::fresh_workspace_binary;

fn etcd_ipam(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_etcd-ipam"))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn without_a_sub_command_it_is_the_plugin() {
    let out = etcd_ipam(&[], &[("CNI_COMMAND", "VERSION")]);
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(answer["supportedVersions"].as_array().is_some_and(|v| !v.is_empty()), "{answer}");
    // An unknown command is the plugin's CNI error, not the agent starting.
    let out = etcd_ipam(&["serve"], &[("CNI_COMMAND", "BOGUS")]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["code"], 4, "{error}");
}

/// Each refusal is status 2 with a message naming what is wrong.
#[test]
fn the_agent_sub_command_refuses_bad_arguments_naming_them() {
    for (args, named) in [
        (&["agent"][..], "--socket"),
        (&["agent", "--socket"], "--socket"),
        (&["agent", "--sock", "/run/x.sock"], "--sock"),
        (&["agent", "--socket", "/run/x.sock", "extra"], "extra"),
    ] {
        let out = etcd_ipam(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(named), "{args:?}: {out:?}");
    }
}

#[test]
fn the_multi_call_binary_has_no_etcd_ipam_and_no_etcd_grpc_or_tls_code() {
    let multi_call = fresh_workspace_binary("cni-plugins", "cni-plugins");
    let list = Command::new(&multi_call).arg("--list").output().unwrap();
    let names = String::from_utf8(list.stdout).unwrap();
    assert!(names.lines().any(|n| n == "host-local"), "{names}");
    assert!(!names.lines().any(|n| n == "etcd-ipam"), "{names}");
    // Any linked code of those crates leaves their names in the binary (symbols, panic
    // locations); the etcd-ipam binary shows the probe finds them when they are there.
    let linked = |binary: &std::path::Path, name: &[u8]| {
        let bytes = std::fs::read(binary).unwrap();
        bytes.windows(name.len()).any(|w| w == name)
    };
    for crate_name in [&b"rustls"[..], b"cni_etcd", b"tonic", b"hyper"] {
        assert!(linked(env!("CARGO_BIN_EXE_etcd-ipam").as_ref(), crate_name));
        assert!(
            !linked(&multi_call, crate_name),
            "{} is in {}",
            String::from_utf8_lossy(crate_name),
            multi_call.display()
        );
    }
}

#[test]
fn the_agent_keeps_the_command_line_conventions() {
    cni_testkit::cli::assert_conventions(Path::new(env!("CARGO_BIN_EXE_etcd-ipam")), &["agent"], "etcd-ipam");
}

#[test]
fn arguments_other_than_agent_are_parsed_without_cni_command_and_refused_when_unknown() {
    let out = etcd_ipam(&["serve"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("serve"), "{out:?}");
    let help = etcd_ipam(&["--help"], &[]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("agent"), "{help:?}");
}
