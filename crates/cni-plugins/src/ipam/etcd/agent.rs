//! The node agent's protocol: a plugin process hands its ADD or DEL to a long-lived agent
//! on the node over a unix socket, and the agent runs it on its kept-alive etcd connection
//! with the node's block cached (one transaction per ADD instead of a connection and four
//! round trips). Why: see docs/multi-host.md, "Why a node agent" (figures).
//!
//! One JSON request per connection: `{"op": "add"|"del", "config": <the network
//! configuration>, "handle": "<container-id>/<ifname>"}`; the answer is
//! `{"address": ..., "gateway": ...}`, `{"released": <ip or null>}` or
//! `{"code": N, "msg": "..."}`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::allocator::{Allocation, Allocator};
use super::batch::Batcher;
use super::config::EtcdIpamConfig;
use super::error::EtcdIpamError;

fn agent_error(msg: String) -> EtcdIpamError {
    EtcdIpamError::Unavailable(msg)
}

/// Sends one request to the agent at `socket` and returns its answer.
fn exchange(socket: &Path, request: &Value, timeout: Duration) -> Result<Value, EtcdIpamError> {
    let unreachable =
        |e: std::io::Error| agent_error(format!("node agent at {} unreachable: {e}", socket.display()));
    let mut stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    let mut line = request.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).map_err(unreachable)?;
    let answer: Value = serde_json::from_str(&answer)
        .map_err(|e| EtcdIpamError::Store(format!("node agent answered {answer:?}: {e}")))?;
    if let Some(code) = answer["code"].as_u64() {
        let msg = answer["msg"].as_str().unwrap_or_default().to_string();
        return Err(match code {
            7 => EtcdIpamError::InvalidConfig(msg),
            11 => EtcdIpamError::Unavailable(msg),
            _ => EtcdIpamError::Store(msg),
        });
    }
    Ok(answer)
}

/// ADD through the agent.
pub fn allocate(
    socket: &Path,
    config: &[u8],
    handle: &str,
    timeout: Duration,
) -> Result<Allocation, EtcdIpamError> {
    let config: Value = serde_json::from_slice(config).map_err(|e| EtcdIpamError::Decode(e.to_string()))?;
    let answer = exchange(socket, &json!({"op": "add", "config": config, "handle": handle}), timeout)?;
    let bad = || EtcdIpamError::Store(format!("node agent answered {answer}"));
    let address = answer["address"].as_str().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let gateway = answer["gateway"].as_str().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    Ok(Allocation { address, gateway })
}

/// DEL through the agent.
pub fn release(socket: &Path, config: &[u8], handle: &str, timeout: Duration) -> Result<(), EtcdIpamError> {
    let config: Value = serde_json::from_slice(config).map_err(|e| EtcdIpamError::Decode(e.to_string()))?;
    exchange(socket, &json!({"op": "del", "config": config, "handle": handle}), timeout).map(|_| ())
}

/// The agent: one allocator (one etcd connection, one cached block) per network
/// configuration it has been asked about; each connection served on its own thread, the
/// concurrent ADDs of one network combined into shared transactions (see `batch`).
#[derive(Default)]
pub struct Agent {
    allocators: Mutex<HashMap<String, Arc<Batcher>>>,
}

impl Agent {
    fn allocator(&self, conf: EtcdIpamConfig) -> Result<Arc<Batcher>, EtcdIpamError> {
        let key = format!(
            "{}|{}|{:?}|{:?}|{}|{}|{:?}",
            conf.network, conf.node, conf.endpoints, conf.pools, conf.block_len, conf.prefix, conf.tls
        );
        let mut allocators = self.allocators.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = allocators.get(&key) {
            return Ok(existing.clone());
        }
        let mut client = conf.client()?;
        // The agents of different nodes start at different members (all at the first one,
        // that member's loss would move every node at once).
        client.prefer(conf.node.bytes().map(usize::from).sum());
        let allocator = Arc::new(Batcher::new(Allocator::new(conf, client)));
        allocators.insert(key, allocator.clone());
        Ok(allocator)
    }

    fn handle(&self, request: &Value) -> Result<Value, EtcdIpamError> {
        let conf = EtcdIpamConfig::parse(request["config"].to_string().as_bytes())?;
        let handle = request["handle"]
            .as_str()
            .ok_or_else(|| EtcdIpamError::Decode("request without handle".into()))?;
        let allocator = self.allocator(conf)?;
        match request["op"].as_str() {
            Some("add") => {
                let a = allocator.allocate(handle)?;
                Ok(json!({"address": a.address.to_string(), "gateway": a.gateway.to_string()}))
            }
            Some("del") => Ok(json!({"released": allocator.release(handle)?.map(|ip| ip.to_string())})),
            other => Err(EtcdIpamError::Decode(format!("unknown op {other:?}"))),
        }
    }

    fn serve_connection(&self, stream: UnixStream) {
        let mut line = String::new();
        let Ok(reader_stream) = stream.try_clone() else { return };
        if BufReader::new(reader_stream).read_line(&mut line).is_err() {
            return;
        }
        let answer = match serde_json::from_str::<Value>(&line) {
            Err(e) => json!({"code": 6, "msg": format!("etcd-ipam agent: request is not JSON: {e}")}),
            Ok(request) => {
                self.handle(&request).unwrap_or_else(|e| json!({"code": e.cni_code(), "msg": e.to_string()}))
            }
        };
        let mut out = answer.to_string();
        out.push('\n');
        let _ = (&stream).write_all(out.as_bytes());
    }

    /// Serves `listener` until the process ends.
    pub fn serve(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming().flatten() {
            let agent = self.clone();
            std::thread::spawn(move || agent.serve_connection(stream));
        }
    }
}
