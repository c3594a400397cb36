//! The plugin entry point fed an arbitrary environment and stdin, on the dry path only: the
//! SDK's reading and checking of CNI_* variables and the configuration, then the named
//! plugin's (and its IPAM plugin's) parsing and validation stage, never the kernel or
//! file work after it. Input: `KEY=VALUE` lines (the environment), an empty line, stdin.
//!
//! Whatever the input, the exit code is 0 or 1; 1 comes with a valid error JSON on stdout
//! (a code from the spec's range and a message); an ADD's success is a result that parses
//! in the request's version; VERSION answers the version list. A panic anywhere (the SDK
//! would turn it into an error JSON) is reported by the fuzzer as a crash: it is a bug.
#![no_main]

use cni_sdk::catalog::Catalog;
use cni_sdk::{CniError, CniResult, Command, Plugin, Request, Version};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

/// Runs the registered plugin named by the configuration's `type`, dry.
struct DryPlugin;

impl DryPlugin {
    fn stage(&self, req: &Request) -> Result<(), CniError> {
        let catalog = Catalog::new(&[cni_plugins::registry::catalog(), cni_etcd_ipam::catalog(), cni_dhcp::catalog()]);
        catalog
            .config_stage_with_ipam(&req.conf.plugin_type, req)
            .unwrap_or_else(|| Err(CniError::invalid_config("no such plugin")))
    }
}

impl Plugin for DryPlugin {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.stage(req)?;
        Ok(req.prev_result()?.unwrap_or_default())
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.stage(req)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.stage(req)?;
        req.require_prev_result().map(drop)
    }
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        req.valid_attachments().map(drop)
    }
}

fuzz_target!(|data: &[u8]| {
    let (env_text, mut stdin) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &b""[..]),
    };
    let env: HashMap<String, String> = String::from_utf8_lossy(env_text)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = |key: &str| env.get(key).cloned();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = cni_sdk::run_with(&DryPlugin, &lookup, &mut stdin, &mut stdout, &mut stderr);

    let output = String::from_utf8(stdout).expect("stdout is UTF-8");
    let command = env.get("CNI_COMMAND").and_then(|c| Command::parse(c));
    match code {
        1 => {
            let error: serde_json::Value = serde_json::from_str(&output).expect("an error is JSON");
            let code = error["code"].as_u64().expect("an error has a numeric code");
            assert!((1..=999).contains(&code), "error code {code} out of range");
            assert!(error["msg"].is_string(), "an error has a message: {output}");
        }
        0 => match command {
            Some(Command::Add) => {
                let value: serde_json::Value = serde_json::from_str(&output).expect("a result is JSON");
                let named = value["cniVersion"].as_str().expect("a result names its version");
                let version = Version::parse(named).expect("a result's version is one we speak");
                CniResult::from_value(value, version).expect("a printed result parses in its version");
            }
            Some(Command::Version) => {
                let value: serde_json::Value = serde_json::from_str(&output).expect("VERSION answers JSON");
                assert!(value["supportedVersions"].is_array());
            }
            _ => assert!(output.is_empty(), "only ADD and VERSION print on success: {output}"),
        },
        other => panic!("exit code {other}"),
    }
});
