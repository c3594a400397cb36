//! The node agent's protocol: a plugin process hands its ADD or DEL to a long-lived agent
//! on the node over a unix socket, and the agent runs it on its kept-alive etcd connection
//! with the node's block cached (one transaction per ADD instead of a connection and four
//! round trips). Why: see docs/multi-host.md, "Why a node agent" (figures).
//!
//! One JSON request per connection: `{"op": "add"|"del", "config": <the network
//! configuration>, "handle": "<container-id>/<ifname>"}`; the answer is
//! `{"address": ..., "gateway": ...}`, `{"released": <ip or null>}` or
//! `{"code": N, "msg": "..."}`.

use cni_cli::tracing;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni_os::socket::{Framing, Refusal, Server, Service};
use cni_types::trace::is_trace_id;
use serde_json::{json, Value};

use super::allocator::{Allocation, Allocator};
use super::batch::Batcher;
use super::config::EtcdIpamConf;
use super::error::EtcdIpamError;
use super::metrics::{op_label, AgentMetrics};

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

/// One request: the verb, the plugin's configuration, the attachment's handle and the
/// runtime's trace id (logged by the agent with a failure, as the plugin logs it).
fn request(op: &str, config: &[u8], handle: &str, trace: Option<&str>) -> Result<Value, EtcdIpamError> {
    let config: Value = serde_json::from_slice(config).map_err(|e| EtcdIpamError::Decode(e.to_string()))?;
    let mut request = json!({"op": op, "config": config, "handle": handle});
    if let Some(trace) = trace {
        request["trace"] = json!(trace);
    }
    Ok(request)
}

/// ADD through the agent.
pub fn allocate(
    socket: &Path,
    config: &[u8],
    handle: &str,
    trace: Option<&str>,
    timeout: Duration,
) -> Result<Allocation, EtcdIpamError> {
    let answer = exchange(socket, &request("add", config, handle, trace)?, timeout)?;
    let bad = || EtcdIpamError::Store(format!("node agent answered {answer}"));
    let address = answer["address"].as_str().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let gateway = answer["gateway"].as_str().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    Ok(Allocation { address, gateway })
}

/// DEL through the agent.
pub fn release(
    socket: &Path,
    config: &[u8],
    handle: &str,
    trace: Option<&str>,
    timeout: Duration,
) -> Result<(), EtcdIpamError> {
    exchange(socket, &request("del", config, handle, trace)?, timeout).map(|_| ())
}

/// How many network configurations the agent keeps an allocator (an etcd client and a
/// cached block) for; past that the least recently used one is dropped (its in-flight
/// requests finish on it). A node has a handful of networks; the cap only stops a client
/// that sends ever new configurations from growing the agent without end.
pub const MAX_CACHED_ALLOCATORS: usize = 64;

/// The agent: one allocator (one etcd connection, one cached block) per network
/// configuration it has been asked about, at most [`MAX_CACHED_ALLOCATORS`]; requests are
/// served by the workspace's root-only request server (`cni_os::socket`: 1 MiB, one
/// deadline per request, a fixed number of connections at once), and the concurrent ADDs
/// of one network are combined into shared transactions (see `batch`).
pub struct Agent {
    allocators: Mutex<AllocatorCache>,
    capacity: usize,
    metrics: Arc<AgentMetrics>,
}

#[derive(Default)]
struct AllocatorCache {
    by_config: HashMap<String, CachedAllocator>,
    /// Counts uses; the entry with the smallest `last_used` is the least recently used.
    clock: u64,
}

struct CachedAllocator {
    batcher: Arc<Batcher>,
    last_used: u64,
}

impl Default for Agent {
    fn default() -> Agent {
        Agent::with_capacity(MAX_CACHED_ALLOCATORS)
    }
}

impl Agent {
    /// An agent keeping at most `capacity` allocators (at least one).
    pub fn with_capacity(capacity: usize) -> Agent {
        Agent {
            allocators: Mutex::new(AllocatorCache::default()),
            capacity: capacity.max(1),
            metrics: Arc::default(),
        }
    }

    /// The agent's metrics (kept whether or not they are served).
    pub fn metrics(&self) -> Arc<AgentMetrics> {
        self.metrics.clone()
    }

    /// How many allocators are cached now.
    pub fn cached_allocators(&self) -> usize {
        self.allocators.lock().unwrap_or_else(|p| p.into_inner()).by_config.len()
    }

    fn allocator(&self, conf: EtcdIpamConf) -> Result<Arc<Batcher>, EtcdIpamError> {
        let key = format!(
            "{}|{}|{:?}|{:?}|{}|{}|{:?}",
            conf.network, conf.node, conf.endpoints, conf.pools, conf.block_len, conf.prefix, conf.tls
        );
        let mut cache = self.allocators.lock().unwrap_or_else(|p| p.into_inner());
        cache.clock += 1;
        let now = cache.clock;
        if let Some(existing) = cache.by_config.get_mut(&key) {
            existing.last_used = now;
            return Ok(existing.batcher.clone());
        }
        let mut client = conf.client()?;
        client.observe(self.metrics.observer());
        // The agents of different nodes start at different members (all at the first one,
        // that member's loss would move every node at once).
        client.prefer(conf.node.bytes().map(usize::from).sum());
        let batcher = Arc::new(Batcher::new(Allocator::new(conf, client)).observed(self.metrics.clone()));
        if cache.by_config.len() >= self.capacity {
            let oldest = cache.by_config.iter().min_by_key(|(_, c)| c.last_used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                cache.by_config.remove(&oldest);
            }
        }
        cache.by_config.insert(key, CachedAllocator { batcher: batcher.clone(), last_used: now });
        self.metrics.cached(cache.by_config.len());
        Ok(batcher)
    }

    fn handle(&self, request: &Value) -> Result<Value, EtcdIpamError> {
        let op = op_label(request["op"].as_str());
        let answer = self.answer(request);
        match &answer {
            Ok(_) if op == "add" => self.metrics.allocated(),
            Ok(_) => self.metrics.released(),
            Err(e) => self.metrics.failed(op, e),
        }
        answer
    }

    fn answer(&self, request: &Value) -> Result<Value, EtcdIpamError> {
        let conf = EtcdIpamConf::parse(request["config"].to_string().as_bytes())?;
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

    /// Serves `listener` until it fails (the process normally ends first).
    pub fn serve(self: Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        let server = Server::new(listener, Framing::Line, "etcd-ipam req");
        server.serve(Arc::new(Requests(self)))
    }
}

/// The agent as the request server sees it: one JSON line in, one out.
struct Requests(Arc<Agent>);

impl Service for Requests {
    fn handle(&self, request: Vec<u8>) -> Vec<u8> {
        let answer = match serde_json::from_slice::<Value>(&request) {
            Err(e) => {
                let error = EtcdIpamError::Decode(format!("request: {e}"));
                self.0.metrics.failed("other", &error);
                json!({"code": 6, "msg": format!("etcd-ipam agent: request is not JSON: {e}")})
            }
            Ok(request) => self.0.handle(&request).unwrap_or_else(|e| {
                // Successes are not logged (thousands a second); a failure is, with the
                // runtime's trace id when the plugin sent a well-formed one.
                // The op and handle are the client's: logged quoted and escaped.
                let trace = request["trace"].as_str().filter(|id| is_trace_id(id));
                tracing::warn!(
                    op = ?request["op"].as_str().unwrap_or("request"),
                    handle = ?request["handle"].as_str().unwrap_or_default(),
                    error = ?e.to_string(),
                    trace,
                    "request failed"
                );
                json!({"code": e.cni_code(), "msg": e.to_string()})
            }),
        };
        line(&answer)
    }

    fn refuse(&self, why: &Refusal) -> Option<Vec<u8>> {
        self.0.metrics.refused(why);
        let code = match why {
            Refusal::NotRoot { .. } => 4,
            Refusal::TooLarge { .. } | Refusal::Deadline { .. } => 6,
            Refusal::Io(_) => return None,
        };
        tracing::warn!(reason = %why, "refused a request");
        Some(line(&json!({"code": code, "msg": format!("etcd-ipam agent: {why}")})))
    }
}

fn line(answer: &Value) -> Vec<u8> {
    let mut out = answer.to_string().into_bytes();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_the_runtimes_trace_id_when_there_is_one() {
        let config = br#"{"name":"n","ipam":{"type":"etcd-ipam"}}"#;
        let traced =
            super::request("add", config, "c/eth0", Some("4bf92f3577b34da6a3ce929d0e0e4736")).unwrap();
        assert_eq!(traced["trace"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(traced["config"]["name"], "n");
        let plain = super::request("del", config, "c/eth0", None).unwrap();
        assert!(plain.get("trace").is_none(), "{plain}");
    }

    fn request(network: &str) -> Value {
        json!({"op": "del", "handle": "c/eth0", "config": {
            "cniVersion": "1.0.0", "name": network, "type": "etcd-ipam",
            "ipam": {"type": "etcd-ipam", "endpoints": ["http://127.0.0.1:9"], "node": "n",
                     "pools": ["10.1.0.0/16"]}}})
    }

    #[test]
    fn the_client_cache_is_bounded_and_keeps_the_recently_used() {
        let agent = Agent::with_capacity(4);
        for n in 0..4 {
            agent
                .allocator(
                    EtcdIpamConf::parse(request(&format!("net{n}"))["config"].to_string().as_bytes())
                        .unwrap(),
                )
                .unwrap();
        }
        let first = EtcdIpamConf::parse(request("net0")["config"].to_string().as_bytes()).unwrap();
        let kept = agent.allocator(first.clone()).unwrap();
        // A client sending ever new configurations: the cache never grows past its cap.
        for n in 4..200 {
            let conf =
                EtcdIpamConf::parse(request(&format!("net{n}"))["config"].to_string().as_bytes()).unwrap();
            agent.allocator(conf).unwrap();
            assert!(agent.cached_allocators() <= 4);
            // net0 stays in use, so it is never the one dropped.
            assert!(Arc::ptr_eq(&agent.allocator(first.clone()).unwrap(), &kept));
        }
    }
}
