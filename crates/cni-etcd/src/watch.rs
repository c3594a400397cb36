//! A watch on a key prefix: etcd's Watch stream on a connection of its own, read event
//! batch by event batch.

use std::time::Duration;

use tokio::runtime::Runtime;

use crate::client::{new_runtime, status_text, within, Client};
use crate::error::{Error, Result};
use crate::kv::{prefix_end, KeyValue};
use crate::proto::{self, method};
use crate::transport::{self, Dialer, Failure};

/// One change to a watched key.
#[derive(Debug, Clone)]
pub enum Event {
    Put(KeyValue),
    /// The key was deleted (or its lease expired).
    Delete(KeyValue),
}

/// An open watch. Its connection and runtime are its own, so reading it does not disturb
/// the client's calls (the overlay agent renews its lease between two waits for events).
pub struct Watch {
    answers: tonic::Streaming<proto::WatchResponse>,
    endpoint: String,
    dialer: Dialer,
    runtime: Runtime,
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Protocol { path: method::WATCH.into(), message: message.into() }
}

impl Watch {
    /// Opens the watch on the first member that accepts it, each given the client's
    /// timeout.
    pub(crate) fn start(client: &mut Client, prefix: &[u8], start_revision: i64) -> Result<Watch> {
        let runtime = new_runtime()?;
        let create = proto::WatchCreateRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            start_revision: start_revision.max(0),
            progress_notify: false,
        };
        let request = proto::WatchRequest { request_union: Some(proto::WatchRequestUnion::Create(create)) };
        let mut reasons = Vec::new();
        for _ in 0..client.endpoints().len() {
            let host = client.current_endpoint().to_string();
            let dialer = client.dialer().clone();
            let request = request.clone();
            let liveness = client.watch_liveness_setting();
            let open = async {
                let grpc = dialer.connect_with(&host, Some(liveness)).await?;
                transport::open_stream(grpc, method::WATCH, request)
                    .await
                    .map_err(|status| dialer.failure(status))
            };
            match runtime.block_on(within(client.timeout(), open)) {
                Ok(Ok(answers)) => return Ok(Watch { answers, endpoint: host, dialer, runtime }),
                Ok(Err(Failure::Broken(reason))) => reasons.push(format!("{host}: {reason}")),
                Ok(Err(Failure::Status(status))) => reasons.push(format!("{host}: {}", status_text(&status))),
                Ok(Err(Failure::TimedOut)) | Err(_) => reasons.push(format!("{host}: no answer in time")),
            }
            client.next_endpoint();
        }
        Err(client.unreachable(reasons))
    }

    /// The next batch of events; an empty batch when `timeout` passes without any (the
    /// caller gets to do its periodic work). An error when the stream breaks, or etcd
    /// cancels the watch (its start revision compacted away): the caller re-lists and
    /// watches again.
    pub fn next_events(&mut self, timeout: Duration) -> Result<Vec<Event>> {
        let answer = match self.runtime.block_on(within(timeout, self.answers.message())) {
            Err(_) => return Ok(Vec::new()),
            Ok(Ok(Some(answer))) => answer,
            Ok(Ok(None)) => return Err(self.broken("the member ended the watch".into())),
            Ok(Err(status)) => {
                let reason = match self.dialer.failure(status) {
                    Failure::Broken(reason) => reason,
                    Failure::Status(status) => status_text(&status),
                    Failure::TimedOut => "no answer in time".into(),
                };
                return Err(self.broken(reason));
            }
        };
        if answer.canceled || answer.compact_revision > 0 {
            return Err(protocol(format!(
                "watch canceled (compacted up to revision {}): {}",
                answer.compact_revision, answer.cancel_reason
            )));
        }
        Ok(answer
            .events
            .into_iter()
            .filter_map(|event| {
                let kv = KeyValue::from(event.kv?);
                Some(if event.r#type == proto::EVENT_DELETE { Event::Delete(kv) } else { Event::Put(kv) })
            })
            .collect())
    }

    fn broken(&self, reason: String) -> Error {
        Error::Unreachable { endpoints: self.endpoint.clone(), reason }
    }
}
