//! Delegation to this very executable runs the delegate in process; delegation to any
//! other binary executes it. Either way the upper plugin sees the same result or error.

use cni_sdk::{delegate, run_with, CniError, CniResult, ErrorCode, Plugin, Request};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Where the in-process delegate records its calls: in the test's own plugin directory
/// (CNI_PATH), so that tests running in parallel in one process each count their own.
const CALL_LOG: &str = "own-ipam.calls";

/// Calls the in-process delegate recorded in `bin_dir`.
fn calls(bin_dir: &Path) -> usize {
    std::fs::read_to_string(bin_dir.join(CALL_LOG)).map_or(0, |log| log.lines().count())
}

/// An IPAM plugin living in this test binary: hands out 10.9.9.9, refuses container "bad".
struct OwnIpam;

impl Plugin for OwnIpam {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let log = req.path[0].join(CALL_LOG);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        writeln!(file, "ADD {}", req.container_id).unwrap();
        if req.container_id == "bad" {
            return Err(CniError::new(ErrorCode::TryAgainLater, "pool busy").with_details("from own-ipam"));
        }
        let json = br#"{"cniVersion":"1.1.0","ips":[{"address":"10.9.9.9/24"}]}"#;
        Ok(CniResult::parse_bytes(json, req.version).unwrap().0)
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

/// The plugin under test: returns what its IPAM delegate gave it.
struct Upper;

impl Plugin for Upper {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        Ok(delegate::ipam_add(req)?.keep())
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

fn add_through(bin_dir: &Path, container_id: &str) -> (i32, serde_json::Value) {
    delegate::run_own_plugins_in_process(|name| {
        (name == "own-ipam").then(|| Box::new(OwnIpam) as Box<dyn Plugin>)
    });
    let path = bin_dir.display().to_string();
    let env = move |k: &str| {
        Some(match k {
            "CNI_COMMAND" => "ADD".to_string(),
            "CNI_CONTAINERID" => container_id.to_string(),
            "CNI_NETNS" => "/run/netns/none".to_string(),
            "CNI_IFNAME" => "eth0".to_string(),
            "CNI_PATH" => path.clone(),
            _ => return None,
        })
    };
    let mut stdin: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","type":"upper","ipam":{"type":"own-ipam"}}"#;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = run_with(&Upper, &env, &mut stdin, &mut stdout, &mut stderr);
    (code, serde_json::from_slice(&stdout).unwrap())
}

#[test]
fn a_link_to_this_executable_runs_in_process() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), dir.path().join("own-ipam")).unwrap();
    // Executed, this test binary would run the test harness and print no CNI result.
    let (code, result) = add_through(dir.path(), "ctr1");
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["ips"][0]["address"], "10.9.9.9/24");
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(calls(dir.path()), 1);

    // Its error reaches the upper plugin as the delegate's own error object.
    let (code, error) = add_through(dir.path(), "bad");
    assert_eq!(code, 1);
    assert_eq!(error["code"], 11);
    assert_eq!(error["msg"], "pool busy");
    assert_eq!(error["details"], "from own-ipam");
    assert_eq!(calls(dir.path()), 2);
}

#[test]
fn another_binary_of_the_same_name_is_executed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("own-ipam");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.8.8.8/24\"}]}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, result) = add_through(dir.path(), "ctr1");
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["ips"][0]["address"], "10.8.8.8/24");
    assert_eq!(calls(dir.path()), 0);
}
