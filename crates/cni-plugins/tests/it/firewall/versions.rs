//! `firewall` and cniVersion: it speaks 0.4.0 and later (as the reference: CHECK, and the
//! prevResult DEL needs, start at 0.4.0), and at every version it speaks, with either
//! backend, ADD then DEL leaves the host's iptables and nftables state exactly as before.

use super::support;
use crate::common;

use serde_json::{json, Value};
use support::{firewall_conf, firewall_state, ok, Lab};

const BACKENDS: [&str; 2] = ["nftables", "iptables"];

fn conf(version: &str, backend: &str, policy: &str, prev: Option<&Value>) -> Value {
    firewall_conf(version, "fwver", json!({"backend": backend, "ingressPolicy": policy}), prev)
}

/// The bridge's 1.1.0 result as a runtime at `version` passes it on (0.4.0 still carries
/// the per-address `version`).
fn prev_at(prev: &Value, version: &str) -> Value {
    let mut prev = prev.clone();
    prev["cniVersion"] = json!(version);
    if version == "0.4.0" {
        prev["ips"][0]["version"] = json!("4");
    }
    prev
}

/// The shared scaffolding (our nftables table, the CNI-FORWARD/CNI-ADMIN chains) outlives
/// attachments by design: made first, so that "as before" can be compared exactly.
fn make_scaffolding(lab: &Lab, backend: &str, prev: &Value) {
    ok(&lab.firewall("ADD", Some(0), &conf("1.1.0", backend, "open", Some(prev))));
    ok(&lab.firewall("DEL", Some(0), &conf("1.1.0", backend, "open", Some(prev))));
}

#[test]
fn version_answers_0_4_0_and_later() {
    let lab = Lab::new(0);
    let out = common::call("firewall", "VERSION", &lab.env.host, None, &json!({})).run();
    assert_eq!(out.json()["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
}

/// At every accepted version and with both backends: ADD, CHECK and DEL (with prevResult,
/// as libcni passes it from 0.4.0) leave the host exactly as it was; so does a DEL without
/// prevResult (a runtime that lost its result cache), which leaked the iptables rules.
#[test]
fn every_accepted_version_and_backend_leaves_no_trace() {
    let lab = Lab::new(1);
    let prev = lab.bridge_add(0, "1.1.0", "fwver", "cnwver", "10.237.0.2/24");
    for backend in BACKENDS {
        make_scaffolding(&lab, backend, &prev);
        let before = firewall_state(&lab);
        for version in ["0.4.0", "1.0.0", "1.1.0"] {
            let with_prev = conf(version, backend, "open", Some(&prev_at(&prev, version)));
            let out = lab.firewall("ADD", Some(0), &with_prev);
            ok(&out);
            assert_eq!(out.json()["cniVersion"], version);
            assert_ne!(firewall_state(&lab), before, "{backend} {version}: ADD changed nothing");
            ok(&lab.firewall("CHECK", Some(0), &with_prev));
            ok(&lab.firewall("DEL", Some(0), &with_prev));
            assert_eq!(firewall_state(&lab), before, "{backend} {version}: DEL with prevResult left state");

            ok(&lab.firewall("ADD", Some(0), &with_prev));
            ok(&lab.firewall("DEL", Some(0), &conf(version, backend, "open", None)));
            assert_eq!(
                firewall_state(&lab),
                before,
                "{backend} {version}: DEL without prevResult left state"
            );
        }
    }
}

/// 0.3.1 and older are refused for every verb with code 1 and a message naming the
/// configuration's cniVersion, and nothing is changed.
#[test]
fn versions_before_0_4_0_are_refused_and_change_nothing() {
    let lab = Lab::new(1);
    let prev = lab.bridge_add(0, "1.1.0", "fwver", "cnwold", "10.236.0.2/24");
    let before = firewall_state(&lab);
    for backend in BACKENDS {
        for version in ["0.3.1", "0.3.0", "0.2.0", "0.1.0"] {
            let mut old_prev = prev_at(&prev, version);
            old_prev["ips"][0]["version"] = json!("4");
            for command in ["ADD", "DEL"] {
                let e =
                    lab.firewall(command, Some(0), &conf(version, backend, "open", Some(&old_prev))).error();
                assert_eq!(e.code, 1, "{backend} {version} {command}: {e:?}");
                let text = format!("{} {}", e.msg, e.details);
                assert!(text.contains("cniVersion") && text.contains(version), "{text}");
                assert!(text.contains("0.4.0"), "says what is supported: {text}");
            }
        }
    }
    assert_eq!(firewall_state(&lab), before, "a refused request changed the host");
}

/// podman's `--ipam-driver none`: a result with interfaces and no addresses. ADD has
/// nothing to accept; CHECK right after it must pass (the spec), and DEL leaves nothing.
#[test]
fn check_right_after_add_passes_when_the_result_has_no_ips() {
    let lab = Lab::new(1);
    let with_ips = lab.bridge_add(0, "1.0.0", "fwver", "cnwnoip", "10.235.0.2/24");
    let mut prev = with_ips.clone();
    prev.as_object_mut().unwrap().remove("ips");
    prev.as_object_mut().unwrap().remove("routes");
    for backend in BACKENDS {
        make_scaffolding(&lab, backend, &with_ips);
        for policy in ["open", "same-bridge"] {
            let before = firewall_state(&lab);
            let c = conf("1.0.0", backend, policy, Some(&prev));
            let out = lab.firewall("ADD", Some(0), &c);
            ok(&out);
            assert_eq!(out.json(), prev);
            let out = lab.firewall("CHECK", Some(0), &c);
            assert!(out.success(), "{backend} {policy}: CHECK after ADD failed: {}", out.stdout);
            ok(&lab.firewall("DEL", Some(0), &c));
            if policy == "open" {
                // same-bridge keeps the bridge's isolation rules, shared by its containers.
                assert_eq!(firewall_state(&lab), before, "{backend} {policy}: DEL left state");
            }
        }
    }
}
