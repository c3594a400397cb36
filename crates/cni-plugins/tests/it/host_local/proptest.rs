//! Random sequences of ADD (with and without a requested address), DEL and GC against a
//! small range whose configured bounds include the network and broadcast addresses: the
//! store never hands out an address twice, never the network, broadcast or gateway address,
//! and always agrees with a simple model.

use super::support;

use std::collections::BTreeMap;
use std::net::IpAddr;

use cni_plugins::ipam::host_local::{self, HostLocalConf, HostLocalError};
use cni_sdk::Attachment;
use proptest::prelude::*;
use support::{ip, ip_files};

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddRequested(u8, u8),
    Del(u8),
    Gc(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12).prop_map(Op::Add),
        2 => (0u8..12, 0u8..16).prop_map(|(c, h)| Op::AddRequested(c, h)),
        3 => (0u8..12).prop_map(Op::Del),
        1 => proptest::collection::vec(0u8..12, 0..6).prop_map(Op::Gc),
    ]
}

fn conf(dir: &std::path::Path, requested: Option<IpAddr>) -> HostLocalConf {
    let ips = requested.map(|r| format!(r#","runtimeConfig":{{"ips":["{r}"]}}"#)).unwrap_or_default();
    let json = format!(
        r#"{{"cniVersion":"1.0.0","name":"prop","ipam":{{"dataDir":"{}",
        "ranges":[[{{"subnet":"10.5.0.0/28","rangeStart":"10.5.0.0","rangeEnd":"10.5.0.15","gateway":"10.5.0.7"}}]]}}{ips}}}"#,
        dir.display()
    );
    HostLocalConf::parse(json.as_bytes(), None).unwrap()
}

fn forbidden(a: IpAddr) -> bool {
    a == ip("10.5.0.0") || a == ip("10.5.0.15") || a == ip("10.5.0.7")
}

const USABLE: usize = 13;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_the_store_sound(ops in proptest::collection::vec(op(), 1..40)) {
        let tmp = tempfile::tempdir().unwrap();
        let plain = conf(tmp.path(), None);
        // container -> address, the model.
        let mut model: BTreeMap<String, IpAddr> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Add(c) => {
                    let id = format!("c{c}");
                    match host_local::allocate(&plain, &id, "eth0") {
                        Ok(a) => {
                            let got = a[0].address.addr();
                            prop_assert!(!model.contains_key(&id));
                            prop_assert!(!forbidden(got), "handed out {got}");
                            prop_assert!(!model.values().any(|v| *v == got), "{got} twice");
                            model.insert(id, got);
                        }
                        Err(HostLocalError::AlreadyAllocated { .. }) => prop_assert!(model.contains_key(&id)),
                        Err(HostLocalError::Exhausted { .. }) => prop_assert_eq!(model.len(), USABLE),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::AddRequested(c, host) => {
                    let id = format!("c{c}");
                    let want = ip(&format!("10.5.0.{host}"));
                    match host_local::allocate(&conf(tmp.path(), Some(want)), &id, "eth0") {
                        Ok(a) => {
                            prop_assert_eq!(a[0].address.addr(), want);
                            prop_assert!(!forbidden(want));
                            // Held by nobody, or already by this container (the model keys
                            // a second address of a container as "<id>+<ip>").
                            let holder = model.iter().find(|(_, v)| **v == want).map(|(k, _)| k.clone());
                            let holder_id = holder.as_deref().map(|k| k.split('+').next().unwrap());
                            prop_assert!(holder_id.is_none() || holder_id == Some(id.as_str()));
                            // A container holding another address keeps it (the reference
                            // does not check requested addresses for duplicates either).
                            if !matches!(model.get(&id), Some(held) if *held != want) {
                                model.insert(id, want);
                            } else {
                                model.insert(format!("{id}+{want}"), want);
                            }
                        }
                        Err(HostLocalError::RequestedReserved { .. }) => prop_assert!(forbidden(want)),
                        Err(HostLocalError::RequestedUnavailable { .. }) => {
                            prop_assert!(model.iter().any(|(k, v)| *v == want && k.split('+').next() != Some(id.as_str())));
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Del(c) => {
                    let id = format!("c{c}");
                    let released = host_local::release(&plain, &id, "eth0", &[]).unwrap().released;
                    let mut expected: Vec<IpAddr> = model
                        .iter()
                        .filter(|(k, _)| **k == id || k.starts_with(&format!("{id}+")))
                        .map(|(_, v)| *v)
                        .collect();
                    let mut released_sorted = released.clone();
                    released_sorted.sort();
                    expected.sort();
                    prop_assert_eq!(released_sorted, expected);
                    model.retain(|k, _| *k != id && !k.starts_with(&format!("{id}+")));
                }
                Op::Gc(keep) => {
                    let valid: Vec<Attachment> = keep
                        .iter()
                        .map(|c| Attachment::new(format!("c{c}"), "eth0"))
                        .collect();
                    host_local::gc(&plain, &valid).unwrap();
                    model.retain(|k, _| {
                        let id = k.split('+').next().unwrap();
                        valid.iter().any(|v| v.container_id == id)
                    });
                }
            }
            let mut want: Vec<IpAddr> = model.values().copied().collect();
            want.sort();
            prop_assert_eq!(ip_files(&tmp.path().join("prop")), want);
        }
    }
}
