//! The etcd client: unary calls on kept-alive connections, failing over to the next
//! configured member when one is down or without a leader.

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

/// Talks to one etcd cluster through any of its members.
pub struct Client {
    endpoints: Vec<String>,
    current: usize,
    http: Http,
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
        Ok(Client { endpoints, current: 0, http, warm: false, observer: None })
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

    /// One unary call. Every member is tried once (the current one twice: a kept-alive
    /// connection the member closed while idle is not a failure of the member). Requests
    /// are safe to repeat: writes of this crate's users are guarded by compares.
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
        let mut reasons = Vec::new();
        let mut retried_idle = false;
        let mut tries = 0;
        while tries < self.endpoints.len() {
            let host = &self.endpoints[self.current];
            let reused = self.warm;
            match self.http.post(host, path, body.as_bytes()) {
                Err(e) => {
                    self.warm = false;
                    if reused && !retried_idle {
                        retried_idle = true;
                        continue;
                    }
                    reasons.push(format!("{host}: {e}"));
                    self.next_endpoint();
                    tries += 1;
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
                    if int_field(&answer, "code") == GRPC_UNAVAILABLE || status == 503 {
                        reasons.push(format!("{host}: {message}"));
                        self.next_endpoint();
                        tries += 1;
                        continue;
                    }
                    return Err(Error::Server { path: path.into(), message });
                }
            }
        }
        Err(self.unreachable(reasons))
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
            Err(Error::Server { message, .. }) if message.contains("not found") => Ok(()),
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
