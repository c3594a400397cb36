//! The daemon behind cni-os's root-only request server: one JSON request in, one JSON
//! response out, and the server's refusals (not root, too large, too slow) answered as
//! CNI errors.

use std::sync::Arc;

use cni_os::socket::{Refusal, Service};
use cni_types::ErrorCode;

use super::Daemon;
use crate::protocol::{Request, Response};
use cni_cli::tracing::warn;

/// The daemon as the request server sees it: JSON in, JSON out.
pub(super) struct Requests(pub(super) Arc<Daemon>);

impl Service for Requests {
    fn handle(&self, request: Vec<u8>) -> Vec<u8> {
        let response = match serde_json::from_slice::<Request>(&request) {
            Ok(request) => self.0.handle(request),
            Err(e) => Response::error(ErrorCode::Decode as u32, format!("dhcp daemon: bad request: {e}")),
        };
        encode(&response)
    }

    fn refuse(&self, why: &Refusal) -> Option<Vec<u8>> {
        let code = match why {
            Refusal::NotRoot { .. } => ErrorCode::InvalidEnvironment,
            Refusal::TooLarge { .. } | Refusal::Deadline { .. } => ErrorCode::Decode,
            Refusal::Io(_) => return None,
        };
        warn!(reason = %why, "refused a request");
        Some(encode(&Response::error(code as u32, format!("dhcp daemon: {why}"))))
    }
}

fn encode(response: &Response) -> Vec<u8> {
    serde_json::to_vec(response).unwrap_or_else(|_| b"{}".to_vec())
}
