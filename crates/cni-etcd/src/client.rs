//! The etcd client: calls on a kept-open HTTP/2 connection, failing over to the next
//! configured member when one is down or without a leader. Synchronous for its users: a
//! current-thread tokio runtime of the client's own runs each call to its end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tonic::client::Grpc;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::error::{Error, Result};
use crate::kv::{kvs, prefix_end, revision, KeyValue, Txn, TxnResponse};
use crate::proto::{self, method};
use crate::tls::Tls;
use crate::transport::{self, Dialer, Failure, Liveness, WATCH_LIVENESS};
use crate::watch::Watch;

/// What etcd answers for a lease (or key) that does not exist.
const GRPC_NOT_FOUND: i64 = Code::NotFound as i64;

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

/// Whether etcd's error answer is the member's momentary state rather than the request's
/// fault: another member, or the same one after the election, may serve it. etcd gives the
/// two election errors no code of their own (gRPC "unknown"): its clients, etcd's Go client
/// too, know them by their wording.
fn is_transient(status: &Status) -> bool {
    let message = status.message();
    status.code() == Code::Unavailable
        || message.contains("no leader")
        || message.contains("raft proposal dropped")
        || message.contains("leader changed")
}

/// An error answer as people read it: "NotFound: etcdserver: requested lease not found".
pub(crate) fn status_text(status: &Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
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

/// A member's own view of the cluster (etcd's Maintenance/Status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// The id of the member that answered.
    pub member_id: u64,
    /// The id of the leader it follows; 0 while it knows of none.
    pub leader: u64,
}

impl MemberStatus {
    /// Whether the member that answered leads the cluster.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// Talks to one etcd cluster through any of its members. Its calls block the calling
/// thread (which must not itself be running an async runtime) until they end.
pub struct Client {
    endpoints: Vec<String>,
    current: usize,
    dialer: Dialer,
    /// Made at the first call: a client that is never used (etcd-ipam's plugin in agent
    /// mode) costs no runtime.
    runtime: Option<Runtime>,
    /// The connection to the current member, once one answered on it.
    connection: Option<Grpc<Channel>>,
    timeout: Duration,
    observer: Option<Observer>,
    /// The pings of this client's watches.
    watch_liveness: Liveness,
}

/// Told of every call: how long it took and whether etcd answered it (an answer that is
/// an error of etcd's own counts as answered). The daemons' metrics hang here.
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
        let dialer = Dialer::new(tls.map(|tls| tls.config));
        Ok(Client {
            endpoints,
            current: 0,
            dialer,
            runtime: None,
            connection: None,
            timeout,
            observer: None,
            watch_liveness: WATCH_LIVENESS,
        })
    }

    /// Starts at another member: clients of one host spread over the cluster.
    pub fn prefer(&mut self, index: usize) {
        self.current = index % self.endpoints.len();
        self.connection = None;
    }

    /// Reports every later call to `observer`.
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(observer);
    }

    /// How this client's later watches notice a member that vanished without closing the
    /// connection (default [`WATCH_LIVENESS`]: a ping every 15 s, 15 s to answer it).
    pub fn watch_liveness(&mut self, liveness: Liveness) {
        self.watch_liveness = liveness;
    }

    pub(crate) fn watch_liveness_setting(&self) -> Liveness {
        self.watch_liveness
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// The member calls go to now; [`Client::next_endpoint`] moves on.
    pub(crate) fn current_endpoint(&self) -> &str {
        &self.endpoints[self.current]
    }

    pub(crate) fn next_endpoint(&mut self) {
        self.connection = None;
        self.current = (self.current + 1) % self.endpoints.len();
    }

    pub(crate) fn unreachable(&self, reasons: Vec<String>) -> Error {
        Error::Unreachable { endpoints: self.endpoints.join(","), reason: reasons.join("; ") }
    }

    /// One call of `path`. Members are tried in turn (the current one twice when its
    /// kept-open connection turns out closed: a member closing an idle connection has not
    /// failed), each waiting [`FIRST_PATIENCE`] for an answer, then twice that, and so on.
    /// When every member refused the connection (or answered with something that is not an
    /// answer) the call fails at once; while members are up but without a leader, rounds go
    /// on for [`CALL_TIMEOUTS`] timeouts. Requests are safe to repeat: writes of this
    /// crate's users are guarded by compares.
    fn call<Req, Resp>(&mut self, path: &'static str, request: Req) -> Result<Resp>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let started = Instant::now();
        let result = self.call_members(path, request);
        if let Some(observer) = &self.observer {
            observer(started.elapsed(), !matches!(result, Err(Error::Unreachable { .. })));
        }
        result
    }

    fn call_members<Req, Resp>(&mut self, path: &'static str, request: Req) -> Result<Resp>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
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
        // LeaseKeepAlive is a stream of requests and answers in gRPC; one of each renews once.
        let streaming = path == method::LEASE_KEEP_ALIVE;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let host = self.endpoints[self.current].clone();
            let reused = self.connection.is_some();
            let attempt = patience.min(remaining);
            let (connection, dialer, request) =
                (self.connection.take(), self.dialer.clone(), request.clone());
            let exchange = async move {
                let grpc = match connection {
                    Some(grpc) => grpc,
                    None => dialer.connect(&host).await?,
                };
                let answer = transport::call(grpc.clone(), path, request, streaming).await;
                Ok::<_, Failure>((grpc, answer.map_err(|status| dialer.failure(status))))
            };
            let outcome = match self.runtime()?.block_on(within(attempt, exchange)) {
                Err(_) => Err(Failure::TimedOut),
                Ok(Err(failure)) => Err(failure),
                Ok(Ok((grpc, answer))) => {
                    // The connection carried an answer (or etcd's refusal): keep it.
                    if !matches!(answer, Err(Failure::Broken(_))) {
                        self.connection = Some(grpc);
                    }
                    answer
                }
            };
            let host = &self.endpoints[self.current];
            match outcome {
                Ok(answer) => return Ok(answer),
                Err(Failure::TimedOut) => {
                    cluster_alive = true;
                    patience = (patience * 2).min(self.timeout);
                    reasons.push(format!("{host}: no answer within {attempt:?}"));
                }
                Err(Failure::Broken(_)) if reused && !retried_idle => {
                    retried_idle = true;
                    continue;
                }
                Err(Failure::Broken(reason)) => reasons.push(format!("{host}: {reason}")),
                Err(Failure::Status(status)) if is_transient(&status) => {
                    cluster_alive = true;
                    reasons.push(format!("{host}: {}", status_text(&status)));
                }
                Err(Failure::Status(status)) => {
                    let (code, message) = (status.code() as i64, status_text(&status));
                    return Err(Error::Server { path: path.into(), code, message });
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

    /// The client's runtime, made at its first use.
    fn runtime(&mut self) -> Result<&Runtime> {
        if self.runtime.is_none() {
            self.runtime = Some(new_runtime()?);
        }
        Ok(self.runtime.as_ref().expect("made above"))
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
        let request = proto::RangeRequest {
            key: key.to_vec(),
            range_end: end.map(<[u8]>::to_vec).unwrap_or_default(),
            serializable,
            keys_only,
        };
        let answer: proto::RangeResponse = self.call(method::RANGE, request)?;
        let revision = revision(answer.header.as_ref());
        Ok((kvs(answer), revision))
    }

    /// Writes `key` (attached to `lease` unless 0); returns the new revision.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64> {
        let request = proto::PutRequest { key: key.to_vec(), value: value.to_vec(), lease };
        let answer: proto::PutResponse = self.call(method::PUT, request)?;
        Ok(revision(answer.header.as_ref()))
    }

    /// Deletes `key`; returns how many keys went (0 or 1).
    pub fn delete(&mut self, key: &[u8]) -> Result<i64> {
        self.delete_range(key.to_vec(), Vec::new())
    }

    /// Deletes every key under `prefix`.
    pub fn delete_prefix(&mut self, prefix: &[u8]) -> Result<i64> {
        self.delete_range(prefix.to_vec(), prefix_end(prefix))
    }

    fn delete_range(&mut self, key: Vec<u8>, range_end: Vec<u8>) -> Result<i64> {
        let answer: proto::DeleteRangeResponse =
            self.call(method::DELETE_RANGE, proto::DeleteRangeRequest { key, range_end })?;
        Ok(answer.deleted)
    }

    pub fn txn(&mut self, txn: &Txn) -> Result<TxnResponse> {
        let answer: proto::TxnResponse = self.call(method::TXN, txn.to_proto())?;
        Ok(answer.into())
    }

    /// A new lease of `ttl` seconds; returns its id.
    pub fn lease_grant(&mut self, ttl: i64) -> Result<i64> {
        let answer: proto::LeaseGrantResponse =
            self.call(method::LEASE_GRANT, proto::LeaseGrantRequest { ttl, id: 0 })?;
        match answer.id {
            0 => Err(Error::Protocol {
                path: method::LEASE_GRANT.into(),
                message: format!("no lease id in the answer: {answer:?}"),
            }),
            id => Ok(id),
        }
    }

    /// Renews a lease once; returns its remaining TTL (0 or less: the lease is gone).
    pub fn lease_keepalive(&mut self, id: i64) -> Result<i64> {
        let answer: proto::LeaseKeepAliveResponse =
            self.call(method::LEASE_KEEP_ALIVE, proto::LeaseKeepAliveRequest { id })?;
        Ok(answer.ttl)
    }

    /// The lease's remaining TTL, or -1 when it has expired or never existed.
    pub fn lease_time_to_live(&mut self, id: i64) -> Result<i64> {
        let answer: proto::LeaseTimeToLiveResponse =
            self.call(method::LEASE_TIME_TO_LIVE, proto::LeaseTimeToLiveRequest { id, keys: false })?;
        Ok(answer.ttl)
    }

    pub fn lease_revoke(&mut self, id: i64) -> Result<()> {
        let answer: Result<proto::LeaseRevokeResponse> =
            self.call(method::LEASE_REVOKE, proto::LeaseRevokeRequest { id });
        match answer {
            // Already expired or revoked: what revoking is for is done.
            Err(Error::Server { code: GRPC_NOT_FOUND, .. }) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The current member's own view: its id and its leader's (tests and benchmarks find
    /// the leader with it).
    pub fn member_status(&mut self) -> Result<MemberStatus> {
        let answer: proto::StatusResponse = self.call(method::STATUS, proto::StatusRequest {})?;
        let member_id = answer.header.map_or(0, |header| header.member_id);
        Ok(MemberStatus { member_id, leader: answer.leader })
    }

    /// Watches every key under `prefix` from `start_revision` on (its own connection).
    pub fn watch_prefix(&mut self, prefix: &[u8], start_revision: i64) -> Result<Watch> {
        Watch::start(self, prefix, start_revision)
    }
}

/// `work`, or `Err` when `limit` passes first. (tokio's timer must be made inside the
/// runtime: this runs there.)
pub(crate) async fn within<T>(
    limit: Duration,
    work: impl std::future::Future<Output = T>,
) -> std::result::Result<T, ()> {
    tokio::time::timeout(limit, work).await.map_err(|_| ())
}

/// A runtime for one thread's calls: the IO driver for the connections, the timer for the
/// deadlines, nothing else.
pub(crate) fn new_runtime() -> Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::Unreachable { endpoints: String::new(), reason: format!("tokio runtime: {e}") })
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
