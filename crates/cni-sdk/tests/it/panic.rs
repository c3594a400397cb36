//! A panic inside plugin code still ends as a CNI error object (code 999) and exit 1.

use crate::support;
use cni_sdk::{run_with, CniError, CniResult, Plugin, Request};

struct Panicking;

impl Plugin for Panicking {
    fn add(&self, _req: &Request) -> Result<CniResult, CniError> {
        panic!("the bridge fell down")
    }
    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

#[test]
fn panic_becomes_code_999() {
    let env = support::add_env;
    let mut stdin: &[u8] = br#"{"cniVersion":"1.0.0","name":"n","type":"panicking"}"#;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = run_with(&Panicking, &env, &mut stdin, &mut stdout, &mut stderr);
    assert_eq!(code, 1);
    let err: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(err["code"], 999);
    assert_eq!(err["cniVersion"], "1.0.0");
    assert!(err["msg"].as_str().unwrap().contains("the bridge fell down"), "{err}");
}
