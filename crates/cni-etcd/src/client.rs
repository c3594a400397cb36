//! The etcd client: unary calls on kept-alive connections, failing over to the next
//! configured member when one is down or without a leader.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::http::Http;
use crate::http::Stream;
use crate::kv::{encode, int_field, kvs, prefix_end, KeyValue, Txn, TxnResponse};
use crate::tls::Tls;
use crate::watch::Watch;

/// gRPC's UNAVAILABLE, which the gateway passes on for "no leader", "request timed out"
/// and a member that is shutting down: another member may do better.
const GRPC_UNAVAILABLE: i64 = 14;
/// What etcd answers for a lease (or key) that does not exist.
const GRPC_NOT_FOUND: i64 = 5;

/// How long a call's first try waits for a member's answer before trying the next member
/// too (when there is one). A healthy member answers in milliseconds; one whose leader was
/// just killed holds the requests it forwarded until its own request timeout (seconds),
/// and without this every ADD in flight there would wait out the client's whole timeout.
/// Each later try of the call waits twice as long as the one before (up to the timeout),
/// so an answer that is merely slow still arrives. A try given up may still commit on its
/// member: every write of this crate's users is compare-guarded, so its repeat elsewhere
/// then loses the compare instead of writing twice.
pub const FIRST_PATIENCE: Duration = Duration::from_millis(250);

/// A call gives up after this many client timeouts in all, whatever number of members.
pub const CALL_TIMEOUTS: u32 = 2;

/// The pause between two rounds over the members when every one was up but could not
/// serve the call (an election under way).
const ROUND_PAUSE: Duration = Duration::from_millis(50);

/// Whether an error answer is the member's momentary state rather than the request's fault:
/// another member, or the same one after the election, may serve it. etcd gives the two
/// election errors no code of their own (gRPC "unknown"): its clients, etcd's Go client
/// too, know them by their wording.
fn is_transient(status: u16, answer: &Value, message: &str) -> bool {
    status == 503
        || int_field(answer, "code") == GRPC_UNAVAILABLE
        || message.contains("raft proposal dropped")
        || message.contains("leader changed")
}

/// The last failure on each member, for the error of a call that every member failed.
struct Reasons {
    members: usize,
    last: std::collections::VecDeque<String>,
}

impl Reasons {
    fn new(members: usize) -> Reasons {
        Reasons { members, last: std::collections::VecDeque::with_capacity(members) }
    }

    fn push(&mut self, reason: String) {
        if self.last.len() == self.members {
            self.last.pop_front();
        }
        self.last.push_back(reason);
    }

    fn into_vec(self) -> Vec<String> {
        self.last.into()
    }
}

/// Talks to one etcd cluster through any of its members.
pub struct Client {
    endpoints: Vec<String>,
    current: usize,
    http: Http,
    timeout: Duration,
    /// The current member has answered on a connection that may now be idle in the pool.
    warm: bool,
    observer: Option<Observer>,
}

/// Told of every unary call: how long it took and whether etcd answered it (an answer
/// that is an error of etcd's own counts as answered). The daemons' metrics hang here.
pub type Observer = Arc<dyn Fn(Duration, bool) + Send + Sync>;

/// `http://host:port` (or `host:port`) → `host:port` without TLS; `https://host:port` →
/// `host:port` with it. Every endpoint of one client must agree with `tls`: a CA given for
/// plain endpoints, or an `https://` endpoint without one, is a configuration mistake.
fn endpoint_host(url: &str, tls: bool) -> Result<String> {
    let host = match (url.strip_prefix("https://"), tls) {
        (Some(host), true) => host,
        (Some(_), false) => {
            return Err(Error::Config(format!(
                "endpoint {url}: an https:// endpoint needs the cluster's CA (caFile)"
            )))
        }
        (None, true) => {
            return Err(Error::Config(format!(
                "endpoint {url}: TLS files are configured, so endpoints must be https://"
            )))
        }
        (None, false) => url.strip_prefix("http://").unwrap_or(url),
    };
    let host = host.trim_end_matches('/');
    if host.is_empty() || !host.contains(':') || host.contains('/') {
        return Err(Error::Config(format!("endpoint {url:?} is not http(s)://host:port")));
    }
    Ok(host.to_string())
}

impl Client {
    /// A client for the members at `endpoints` (`http://host:port`). Nothing is connected
    /// before the first call.
    pub fn new(endpoints: &[impl AsRef<str>], timeout: Duration) -> Result<Client> {
        Client::with_tls(endpoints, timeout, None)
    }

    /// [`Client::new`] for `https://host:port` endpoints when `tls` is given.
    pub fn with_tls(endpoints: &[impl AsRef<str>], timeout: Duration, tls: Option<Tls>) -> Result<Client> {
        if endpoints.is_empty() {
            return Err(Error::Config("no endpoints".into()));
        }
        let endpoints =
            endpoints.iter().map(|e| endpoint_host(e.as_ref(), tls.is_some())).collect::<Result<Vec<_>>>()?;
        let http = Http::new(timeout, tls.as_ref());
        Ok(Client { endpoints, current: 0, http, timeout, warm: false, observer: None })
    }

    /// Starts at another member: clients of one host spread over the cluster.
    pub fn prefer(&mut self, index: usize) {
        self.current = index % self.endpoints.len();
        self.warm = false;
    }

    /// Reports every later call to `observer`.
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(observer);
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    fn next_endpoint(&mut self) {
        self.warm = false;
        self.current = (self.current + 1) % self.endpoints.len();
    }

    /// Opens a stream on the first member that answers its request with one.
    pub(crate) fn stream_any(&mut self, path: &str, body: &[u8]) -> Result<Stream> {
        let mut reasons = Vec::new();
        for _ in 0..self.endpoints.len() {
            let host = &self.endpoints[self.current];
            match self.http.post_stream(host, path, body) {
                Ok(stream) => return Ok(stream),
                Err(e) => reasons.push(format!("{host}: {e}")),
            }
            self.next_endpoint();
        }
        Err(self.unreachable(reasons))
    }

    fn unreachable(&self, reasons: Vec<String>) -> Error {
        Error::Unreachable { endpoints: self.endpoints.join(","), reason: reasons.join("; ") }
    }

    /// One unary call. Members are tried in turn (the current one twice when its kept-alive
    /// connection turns out closed: a member closing an idle connection has not failed),
    /// each waiting [`FIRST_PATIENCE`] for an answer, then twice that, and so on. When
    /// every member refused the connection the call fails at once; while members are up but
    /// without a leader, rounds go on for [`CALL_TIMEOUTS`] timeouts. Requests are safe to
    /// repeat: writes of this crate's users are guarded by compares.
    pub fn call(&mut self, path: &str, body: &Value) -> Result<Value> {
        let started = Instant::now();
        let result = self.call_members(path, body);
        if let Some(observer) = &self.observer {
            observer(started.elapsed(), !matches!(result, Err(Error::Unreachable { .. })));
        }
        result
    }

    fn call_members(&mut self, path: &str, body: &Value) -> Result<Value> {
        let body = body.to_string();
        let deadline = Instant::now() + self.timeout * CALL_TIMEOUTS;
        let mut reasons = Reasons::new(self.endpoints.len());
        let mut retried_idle = false;
        // With one member there is nobody to hedge to: it gets the whole timeout at once.
        let mut patience =
            if self.endpoints.len() > 1 { FIRST_PATIENCE.min(self.timeout) } else { self.timeout };
        let mut tries = 0;
        // Whether a member of this round is up but could not serve the call (no leader,
        // or no answer in time): the next round may find the new leader.
        let mut cluster_alive = false;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let host = &self.endpoints[self.current];
            let reused = self.warm;
            match self.http.post_within(host, path, body.as_bytes(), patience.min(remaining)) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    self.warm = false;
                    cluster_alive = true;
                    patience = (patience * 2).min(self.timeout);
                    reasons.push(format!("{host}: {e}"));
                }
                Err(e) => {
                    self.warm = false;
                    if reused && !retried_idle {
                        retried_idle = true;
                        continue;
                    }
                    reasons.push(format!("{host}: {e}"));
                }
                Ok((status, bytes)) => {
                    self.warm = true;
                    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
                        path: path.into(),
                        message: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
                    })?;
                    // Streaming endpoints called once wrap their answer in "result".
                    let answer = match answer.get("result") {
                        Some(inner) if status == 200 => inner.clone(),
                        _ => answer,
                    };
                    if status == 200 {
                        return Ok(answer);
                    }
                    let message = answer["message"].as_str().or(answer["error"].as_str()).unwrap_or("");
                    let message = format!("HTTP {status}: {message}");
                    if !is_transient(status, &answer, &message) {
                        let code = int_field(&answer, "code");
                        return Err(Error::Server { path: path.into(), code, message });
                    }
                    cluster_alive = true;
                    reasons.push(format!("{host}: {message}"));
                }
            }
            self.next_endpoint();
            tries += 1;
            if tries % self.endpoints.len() == 0 {
                // Every member refused the connection: the cluster is down, say so now.
                if !cluster_alive {
                    break;
                }
                cluster_alive = false;
                std::thread::sleep(ROUND_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
            }
        }
        Err(self.unreachable(reasons.into_vec()))
    }

    /// The key's value and revisions, if it exists.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.range(key, None, false, false).map(|(kvs, _)| kvs.into_iter().next())
    }

    /// Every key under `prefix` (values left out when `keys_only`), and the store's revision.
    pub fn get_prefix(&mut self, prefix: &[u8], keys_only: bool) -> Result<(Vec<KeyValue>, i64)> {
        self.range(prefix, Some(&prefix_end(prefix)), keys_only, false)
    }

    /// [`Client::get`] served from the member's own copy of the data, without a round of
    /// consensus: much cheaper, possibly a little stale. Right where the write that follows
    /// compares revisions anyway (a stale read then only loses the race and reads again).
    pub fn get_serializable(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.range(key, None, false, true).map(|(kvs, _)| kvs.into_iter().next())
    }

    /// [`Client::get_prefix`] served like [`Client::get_serializable`].
    pub fn get_prefix_serializable(
        &mut self,
        prefix: &[u8],
        keys_only: bool,
    ) -> Result<(Vec<KeyValue>, i64)> {
        self.range(prefix, Some(&prefix_end(prefix)), keys_only, true)
    }

    fn range(
        &mut self,
        key: &[u8],
        end: Option<&[u8]>,
        keys_only: bool,
        serializable: bool,
    ) -> Result<(Vec<KeyValue>, i64)> {
        let mut request = json!({"key": encode(key)});
        if let Some(end) = end {
            request["range_end"] = encode(end).into();
        }
        if keys_only {
            request["keys_only"] = true.into();
        }
        if serializable {
            request["serializable"] = true.into();
        }
        let answer = self.call("/v3/kv/range", &request)?;
        Ok((kvs(&answer), int_field(&answer["header"], "revision")))
    }

    /// Writes `key` (attached to `lease` unless 0); returns the new revision.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64> {
        let mut request = json!({"key": encode(key), "value": encode(value)});
        if lease != 0 {
            request["lease"] = lease.to_string().into();
        }
        let answer = self.call("/v3/kv/put", &request)?;
        Ok(int_field(&answer["header"], "revision"))
    }

    /// Deletes `key`; returns how many keys went (0 or 1).
    pub fn delete(&mut self, key: &[u8]) -> Result<i64> {
        let answer = self.call("/v3/kv/deleterange", &json!({"key": encode(key)}))?;
        Ok(int_field(&answer, "deleted"))
    }

    /// Deletes every key under `prefix`.
    pub fn delete_prefix(&mut self, prefix: &[u8]) -> Result<i64> {
        let request = json!({"key": encode(prefix), "range_end": encode(&prefix_end(prefix))});
        let answer = self.call("/v3/kv/deleterange", &request)?;
        Ok(int_field(&answer, "deleted"))
    }

    pub fn txn(&mut self, txn: &Txn) -> Result<TxnResponse> {
        let answer = self.call("/v3/kv/txn", &txn.to_json())?;
        Ok(TxnResponse::from_json(&answer))
    }

    /// A new lease of `ttl` seconds; returns its id.
    pub fn lease_grant(&mut self, ttl: i64) -> Result<i64> {
        let answer = self.call("/v3/lease/grant", &json!({"TTL": ttl.to_string()}))?;
        match int_field(&answer, "ID") {
            0 => Err(Error::Protocol { path: "/v3/lease/grant".into(), message: answer.to_string() }),
            id => Ok(id),
        }
    }

    /// Renews a lease once; returns its remaining TTL (0 or less: the lease is gone).
    pub fn lease_keepalive(&mut self, id: i64) -> Result<i64> {
        let answer = self.call("/v3/lease/keepalive", &json!({"ID": id.to_string()}))?;
        Ok(int_field(&answer, "TTL"))
    }

    /// The lease's remaining TTL, or -1 when it has expired or never existed.
    pub fn lease_time_to_live(&mut self, id: i64) -> Result<i64> {
        let answer = self.call("/v3/lease/timetolive", &json!({"ID": id.to_string()}))?;
        Ok(int_field(&answer, "TTL"))
    }

    pub fn lease_revoke(&mut self, id: i64) -> Result<()> {
        match self.call("/v3/lease/revoke", &json!({"ID": id.to_string()})) {
            // Already expired or revoked: what revoking is for is done.
            Err(Error::Server { code: GRPC_NOT_FOUND, .. }) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Watches every key under `prefix` from `start_revision` on (its own connection).
    pub fn watch_prefix(&mut self, prefix: &[u8], start_revision: i64) -> Result<Watch> {
        Watch::start(self, prefix, start_revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_and_port() {
        assert_eq!(endpoint_host("http://127.0.0.1:2379/", false).unwrap(), "127.0.0.1:2379");
        assert_eq!(endpoint_host("10.0.0.1:2379", false).unwrap(), "10.0.0.1:2379");
        assert_eq!(endpoint_host("https://10.0.0.1:2379", true).unwrap(), "10.0.0.1:2379");
        assert!(endpoint_host("http://host", false).is_err());
        let err = endpoint_host("https://10.0.0.1:2379", false).unwrap_err().to_string();
        assert!(err.contains("caFile"), "{err}");
        let err = endpoint_host("http://10.0.0.1:2379", true).unwrap_err().to_string();
        assert!(err.contains("https://"), "{err}");
    }
}
