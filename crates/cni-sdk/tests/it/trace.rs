//! The runtime's trace context reaches the plugin as `Request::trace`, and a failure's line on
//! stderr carries its trace id, so a failed pod setup can be found from its trace.

use crate::support;
use cni_sdk::{run_with, CniError, CniResult, Plugin, Request};
use std::sync::Mutex;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Fails every ADD, remembering the trace id it was given.
#[derive(Default)]
struct Failing {
    seen: Mutex<Option<String>>,
}

impl Plugin for Failing {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        *self.seen.lock().unwrap() = req.trace.as_ref().map(|t| t.trace_id().to_string());
        Err(CniError::invalid_config("no such bridge"))
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

/// Runs ADD with `traceparent` in the environment; the plugin's view and stderr.
fn add_with(traceparent: Option<&str>) -> (Option<String>, String) {
    let env = |k: &str| match k {
        "TRACEPARENT" => traceparent.map(str::to_string),
        _ => support::add_env(k),
    };
    let plugin = Failing::default();
    let mut stdin: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","type":"failing"}"#;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    assert_eq!(run_with(&plugin, &env, &mut stdin, &mut stdout, &mut stderr), 1);
    let seen = plugin.seen.lock().unwrap().clone();
    (seen, String::from_utf8(stderr).unwrap())
}

#[test]
fn a_failure_is_logged_with_the_runtimes_trace_id() {
    let (seen, stderr) = add_with(Some(TRACEPARENT));
    assert_eq!(seen.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    assert!(stderr.contains("no such bridge (trace 4bf92f3577b34da6a3ce929d0e0e4736)"), "{stderr}");
}

#[test]
fn an_invalid_trace_context_is_ignored_not_echoed() {
    let (seen, stderr) = add_with(Some("00-\u{1b}[31mred-and-long-enough-to-pass-a-length-check-only"));
    assert_eq!(seen, None);
    assert!(!stderr.contains("(trace") && !stderr.contains('\u{1b}'), "{stderr}");
    let (seen, stderr) = add_with(None);
    assert_eq!(seen, None);
    assert!(stderr.contains("no such bridge") && !stderr.contains("(trace"), "{stderr}");
}
