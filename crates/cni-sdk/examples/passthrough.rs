//! The smallest useful plugin on the SDK: a chained plugin that hands `prevResult` on
//! unchanged (or an empty result when it is first in the chain). It shows the whole
//! surface a plugin author writes: one struct, one trait impl, one `run` call.

use cni_sdk::{CniError, CniResult, Plugin, Request};

struct Passthrough;

impl Plugin for Passthrough {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        Ok(req.prev_result()?.unwrap_or_default())
    }

    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        req.require_prev_result().map(|_| ())
    }

    fn about(&self) -> String {
        "passthrough: hands prevResult on unchanged (cni-rs SDK example)".into()
    }
}

fn main() {
    cni_sdk::run(&Passthrough)
}
