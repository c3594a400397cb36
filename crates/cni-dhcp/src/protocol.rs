//! The plugin <-> daemon protocol: JSON over a unix stream socket.
//!
//! One request per connection: the plugin writes one JSON object and shuts down its
//! writing side; the daemon answers with one JSON object and closes. Every message carries
//! `"version": 1`; a daemon refuses versions it does not know with an error response, so
//! a newer plugin against an older daemon fails with a clear message, never a guess.
//!
//! The daemon serves through `cni_os::socket`: only root's connections are answered, and a
//! request must be whole (the writing side shut down) within 10 s and at most 1 MiB; a
//! refused one gets an error response (code 4 for a peer that is not root, 6 otherwise).
//!
//! Requests (`"op"` says which):
//!
//! ```json
//! {"version":1,"op":"add","network":"net","containerID":"c1","ifname":"eth0",
//!  "netns":"/run/netns/c1","params":{"client_id":[0,...],"provide":[[12,[112,111,100]]],
//!  "request":[1,3,6]}}
//! {"version":1,"op":"add","family":6,...,"params":{"client_id":[0,4,...],"provide":[],
//!  "request":[],"prefix_len":64}}
//! {"version":1,"op":"del","network":"net","containerID":"c1","ifname":"eth0"}
//! {"version":1,"op":"check","network":"net","containerID":"c1","ifname":"eth0","family":6}
//! {"version":1,"op":"gc","network":"net","valid":[{"containerID":"c1","ifname":"eth0"}]}
//! {"version":1,"op":"status"}
//! ```
//!
//! `family` (4 when absent) says which protocol's lease ADD and CHECK mean; DEL and GC end
//! an attachment's leases of both.
//!
//! Responses: `{"version":1,"ok":true,"lease":{...}}` (`lease` for add and check),
//! `{"version":1,"ok":true,"leases":[{"network",...,"state":"bound"}]}` for status, or
//! `{"version":1,"ok":false,"code":11,"msg":"..."}` with a CNI error code.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::client::ClientParams;
use super::lease::Leased;
use super::store::{AttachmentKey, Family};

pub const PROTOCOL_VERSION: u32 = 1;
/// The socket a daemon listens on unless told otherwise (the reference's path).
pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";
/// The most of a daemon's answer the plugin reads (the daemon takes requests of at most
/// `cni_os::socket::MAX_REQUEST`, the same 1 MiB).
const MAX_MESSAGE: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    Add {
        #[serde(flatten)]
        key: AttachmentKey,
        netns: String,
        params: ClientParams,
        #[serde(default, skip_serializing_if = "Family::is_v4")]
        family: Family,
    },
    Del {
        #[serde(flatten)]
        key: AttachmentKey,
    },
    Check {
        #[serde(flatten)]
        key: AttachmentKey,
        #[serde(default, skip_serializing_if = "Family::is_v4")]
        family: Family,
    },
    Gc {
        network: String,
        valid: Vec<ValidAttachment>,
    },
    Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    #[serde(flatten)]
    pub op: Op,
    /// The runtime's trace id (`TRACEPARENT`'s), logged with what the daemon does for
    /// this request so one pod's setup can be followed from the runtime into the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// What the daemon knows about a lease, for STATUS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    #[serde(flatten)]
    pub key: AttachmentKey,
    pub address: String,
    /// `bound`, `renewing`, `rebinding`, `expired` (lost: NAK, or no server until expiry).
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Response {
    pub version: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Leased>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<LeaseStatus>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub msg: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Response {
    pub fn ok() -> Response {
        Response { version: PROTOCOL_VERSION, ok: true, ..Response::default() }
    }
    pub fn with_lease(lease: Leased) -> Response {
        Response { lease: Some(lease), ..Response::ok() }
    }
    pub fn error(code: u32, msg: impl Into<String>) -> Response {
        Response { version: PROTOCOL_VERSION, ok: false, code, msg: msg.into(), ..Response::default() }
    }
}

pub fn write_message<T: Serialize>(stream: &mut UnixStream, message: &T) -> io::Result<()> {
    stream.write_all(&serde_json::to_vec(message).map_err(io::Error::other)?)?;
    stream.shutdown(std::net::Shutdown::Write)
}

/// The plugin's side: one request, one response. `timeout` bounds the whole wait (an
/// acquisition takes up to the daemon's own timeout, so callers pass more than that).
pub fn call(socket: &Path, op: Op, trace: Option<&str>, timeout: Duration) -> io::Result<Response> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write_message(&mut stream, &Request { version: PROTOCOL_VERSION, op, trace: trace.map(str::to_string) })?;
    let mut bytes = Vec::new();
    stream.take(MAX_MESSAGE).read_to_end(&mut bytes)?;
    // The Go reference daemon serves net/rpc over HTTP: it answers our JSON with an HTTP
    // error. Say what is listening rather than how its answer failed to parse.
    if bytes.starts_with(b"HTTP/") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "an HTTP server answers there (the Go reference dhcp daemon?), not cni-rs's daemon; \
             run cni-rs's `dhcp daemon` instead",
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_on_the_wire() {
        let req = Request { version: 1, op: Op::Status, trace: None };
        assert_eq!(serde_json::to_value(&req).unwrap(), serde_json::json!({"version": 1, "op": "status"}));
        let text = r#"{"version":1,"op":"del","network":"n","containerID":"c","ifname":"eth0"}"#;
        let req: Request = serde_json::from_str(text).unwrap();
        let key = AttachmentKey { network: "n".into(), container_id: "c".into(), ifname: "eth0".into() };
        assert_eq!(req.op, Op::Del { key });
        assert_eq!(
            serde_json::to_value(Response::error(11, "x")).unwrap(),
            serde_json::json!({"version": 1, "ok": false, "code": 11, "msg": "x"})
        );
    }
}
