//! The node agent's protocol: a plugin process hands its ADD or DEL to a long-lived agent
//! on the node over a unix socket, and the agent runs it on its kept-alive etcd connection
//! with the node's block cached (one transaction per ADD instead of a connection and four
//! round trips). Why: see docs/multi-host.md, "Why a node agent" (figures).
//!
//! One JSON request per connection, of two kinds:
//!
//! - `{"op": "run", "env": {<the plugin's CNI_* and trace variables>}, "config": <the
//!   network configuration>}`, sent by the plugin binary's relay before libc starts (see
//!   `cni_os::relay`): the agent runs the plugin's ADD or DEL itself, with the plugin's
//!   code ([`Hosted`]), and answers with the plugin's exit status, stdout and stderr
//!   (`cni_os::relay::answer`). That is what a plugin process costs here: a start
//!   without libc's, a read of stdin and one socket round trip.
//! - `{"op": "add"|"del", "config": <the network configuration>, "handle":
//!   "<container-id>/<ifname>"}`, sent by the full plugin (when the relay did not serve
//!   it) and by older plugins; the answer is `{"address": ..., "gateway": ...}`,
//!   `{"released": <ip or null>}` or `{"code": N, "msg": "..."}`.

use cni_cli::tracing;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni_os::relay;
use cni_os::socket::{Framing, Refusal, Server, Service};
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::trace::is_trace_id;
use cni_types::ErrorCode;
use serde_json::{json, Value};

use super::allocator::{Allocation, Allocator};
use super::batch::Batcher;
use super::config::EtcdIpamConf;
use super::error::EtcdIpamError;
use super::keys::handle_id;
use super::metrics::{op_label, AgentMetrics};
use super::plugin;

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
        // The agent's codes are those of `EtcdIpamError::cni_code` and the request server's
        // refusals; anything else is not an agent's answer.
        let code = match code {
            4 | 6 | 7 | 11 | 999 => code as u32,
            _ => 999,
        };
        return Err(EtcdIpamError::FromAgent { code, msg });
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
        self.count(op, &answer);
        answer
    }

    /// One answered request in the metrics: an allocation, a release or a failure of `op`.
    fn count<T>(&self, op: &'static str, outcome: &Result<T, EtcdIpamError>) {
        match outcome {
            Ok(_) if op == "add" => self.metrics.allocated(),
            Ok(_) => self.metrics.released(),
            Err(e) => self.metrics.failed(op, e),
        }
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

    /// A relayed plugin run: the plugin's verb, run here on `request`'s variables and
    /// configuration, answered with its exit status and output.
    fn run_relayed(&self, request: &Value) -> Vec<u8> {
        let env: HashMap<&str, &str> = request["env"]
            .as_object()
            .map(|vars| vars.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))).collect())
            .unwrap_or_default();
        let config = serde_json::to_vec(&request["config"]).unwrap_or_default();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let status = cni_sdk::run_with(
            &Hosted(self),
            &|key: &str| env.get(key).map(|v| v.to_string()),
            &mut config.as_slice(),
            &mut stdout,
            &mut stderr,
        );
        if status != 0 {
            // As for the agent's own requests, failures are logged, successes not; the
            // text is the plugin's, with the runtime's trace id when it sent one.
            let error = String::from_utf8_lossy(&stderr);
            tracing::warn!(command = ?env.get("CNI_COMMAND"), error = ?error.trim_end(), "relayed run failed");
        }
        relay::answer(status, &stdout, &stderr)
    }

    /// Serves `listener` until it fails (the process normally ends first).
    pub fn serve(self: Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        let server = Server::new(listener, Framing::Line, "etcd-ipam req");
        server.serve(Arc::new(Requests(self)))
    }
}

/// The plugin as the agent runs it for a relay: ADD and DEL on the agent's own
/// allocators (the configuration's `agentSocket` is where the request came from, not
/// where to send it); every other verb is the full plugin's, which the relay never sends.
struct Hosted<'a>(&'a Agent);

impl Hosted<'_> {
    fn counted<T>(&self, op: &'static str, outcome: Result<T, EtcdIpamError>) -> Result<T, CniError> {
        self.0.count(op, &outcome);
        Ok(outcome?)
    }
}

impl Plugin for Hosted<'_> {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = plugin::parse(req)?;
        let id = handle_id(&req.container_id, &req.ifname);
        let allocated = self.0.allocator(conf.clone()).and_then(|batcher| batcher.allocate(&id));
        Ok(plugin::result(&conf, self.counted("add", allocated)?))
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = plugin::parse(req)?;
        let id = handle_id(&req.container_id, &req.ifname);
        let released = self.0.allocator(conf).and_then(|batcher| batcher.release(&id));
        self.counted("del", released).map(drop)
    }

    fn check(&self, _: &Request) -> Result<(), CniError> {
        Err(not_relayed("CHECK"))
    }

    fn gc(&self, _: &Request) -> Result<(), CniError> {
        Err(not_relayed("GC"))
    }

    fn status(&self, _: &Request) -> Result<(), CniError> {
        Err(not_relayed("STATUS"))
    }

    fn about(&self) -> String {
        plugin::EtcdIpam.about()
    }
}

fn not_relayed(verb: &str) -> CniError {
    CniError::new(ErrorCode::InvalidEnvironment, format!("etcd-ipam agent: {verb} is not relayed"))
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
            Ok(request) if request["op"].as_str() == Some(relay::RUN_OP) => {
                return self.0.run_relayed(&request)
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
