//! The scriptable test plugin (see `cni_testkit::test_plugin` for what it can be told).

use cni_sdk::{run_with, CniError, CniResult, Plugin, Request, VersionInfo};
use cni_testkit::test_plugin::{record, Behaviour, Invocation};
use cni_types::args::CniArgs;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;

struct TestPlugin {
    behaviour: Behaviour,
}

impl TestPlugin {
    fn fail_or_panic(&self) -> Result<(), CniError> {
        if self.behaviour.panic {
            panic!("test plugin told to panic");
        }
        match &self.behaviour.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Plugin for TestPlugin {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.fail_or_panic()?;
        if self.behaviour.echo_prev_result {
            return Ok(req.prev_result()?.unwrap_or_default());
        }
        match &self.behaviour.result {
            Some(v) => CniResult::parse(v.clone(), req.version).map(|(r, _)| r).map_err(|e| e.to_cni_error()),
            None => Ok(CniResult {
                interfaces: vec![cni_types::Interface {
                    name: req.ifname.clone(),
                    sandbox: req.netns.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        self.fail_or_panic()
    }
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        self.fail_or_panic()
    }
    fn gc(&self, _req: &Request) -> Result<(), CniError> {
        self.fail_or_panic()
    }
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        self.fail_or_panic()
    }
    fn version_info(&self) -> VersionInfo {
        match &self.behaviour.supported_versions {
            Some(v) => VersionInfo { cni_version: "1.1.0".into(), supported_versions: v.clone() },
            None => VersionInfo::all(),
        }
    }
    fn about(&self) -> String {
        "cni-test-plugin: a scriptable plugin for tests".into()
    }
}

fn load_behaviour(config: &Value, cni_args: &str) -> Behaviour {
    let from_file = |path: &str| -> Option<Behaviour> {
        let text = std::fs::read(path).ok()?;
        Some(serde_json::from_slice(&text).unwrap_or_else(|e| panic!("bad behaviour file {path}: {e}")))
    };
    if let Some(inline) = config.get("testBehaviour") {
        return serde_json::from_value(inline.clone()).expect("bad testBehaviour");
    }
    let debug_arg = CniArgs::parse(cni_args).ok().and_then(|a| a.get("DEBUG").map(str::to_string));
    config
        .get("debugFile")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(debug_arg)
        .or_else(|| std::env::var("CNI_TEST_BEHAVIOUR").ok())
        .and_then(|p| from_file(&p))
        .unwrap_or_default()
}

fn main() {
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    let mut stdin = Vec::new();
    if command != "VERSION" {
        let _ = std::io::stdin().read_to_end(&mut stdin);
    }
    let config: Value = serde_json::from_slice(&stdin).unwrap_or(Value::Null);
    let behaviour =
        load_behaviour(&config, &std::env::var("CNI_ARGS").unwrap_or_default()).for_command(&command);

    let log = config
        .get("logFile")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CNI_TEST_LOG").map(PathBuf::from));
    if let Some(log) = log {
        let invocation = Invocation {
            command: command.clone(),
            env: std::env::vars()
                .filter(|(k, _)| k.starts_with("CNI_") || cni_types::trace::TRACE_VARS.contains(&k.as_str()))
                .collect(),
            stdin: if config.is_null() {
                Value::String(String::from_utf8_lossy(&stdin).into_owned())
            } else {
                config
            },
            pid: std::process::id(),
        };
        record(&log, &invocation).expect("cannot write the invocation log");
    }

    if let Some(ms) = behaviour.sleep_ms {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    if let Some(text) = &behaviour.stderr {
        eprint!("{text}");
    }
    if let Some(code) = behaviour.exit_code {
        print!("{}", behaviour.stdout.as_deref().unwrap_or(""));
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
    let plugin = TestPlugin { behaviour };
    let env = |k: &str| std::env::var(k).ok();
    let code =
        run_with(&plugin, &env, &mut stdin.as_slice(), &mut std::io::stdout().lock(), &mut std::io::stderr());
    std::process::exit(code);
}
