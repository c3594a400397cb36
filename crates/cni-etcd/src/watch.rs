//! A watch on a key prefix: the gateway's `/v3/watch` stream, read event by event.

use std::time::Duration;

use serde_json::json;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::Stream;
use crate::kv::{encode, int_field, prefix_end, KeyValue};

/// One change to a watched key.
#[derive(Debug, Clone)]
pub enum Event {
    Put(KeyValue),
    /// The key was deleted (or its lease expired).
    Delete(KeyValue),
}

/// An open watch.
pub struct Watch {
    stream: Stream,
}

fn protocol(message: impl Into<String>) -> Error {
    Error::Protocol { path: "/v3/watch".into(), message: message.into() }
}

impl Watch {
    pub(crate) fn start(client: &mut Client, prefix: &[u8], start_revision: i64) -> Result<Watch> {
        let mut create = json!({"key": encode(prefix), "range_end": encode(&prefix_end(prefix))});
        if start_revision > 0 {
            create["start_revision"] = start_revision.to_string().into();
        }
        let body = json!({ "create_request": create }).to_string();
        let stream = client.stream_any("/v3/watch", body.as_bytes())?;
        Ok(Watch { stream })
    }

    /// The next batch of events; an empty batch when `timeout` passes without any (the
    /// caller gets to do its periodic work). An error when the stream breaks: the caller
    /// re-lists and watches again.
    pub fn next_events(&mut self, timeout: Duration) -> Result<Vec<Event>> {
        let message = match self.stream.next_message(timeout) {
            Ok(message) => message,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(Error::Unreachable { endpoints: "watch".into(), reason: e.to_string() }),
        };
        let value: serde_json::Value =
            serde_json::from_slice(&message).map_err(|e| protocol(format!("{e}")))?;
        if let Some(error) = value.get("error") {
            return Err(protocol(error.to_string()));
        }
        let result = &value["result"];
        if result["canceled"].as_bool() == Some(true) || int_field(result, "compact_revision") > 0 {
            return Err(protocol(format!("watch canceled: {result}")));
        }
        let events = result["events"].as_array().cloned().unwrap_or_default();
        Ok(events
            .iter()
            .filter_map(|event| {
                let kv = KeyValue::from_json(&event["kv"])?;
                Some(if event["type"].as_str() == Some("DELETE") {
                    Event::Delete(kv)
                } else {
                    Event::Put(kv)
                })
            })
            .collect())
    }
}
