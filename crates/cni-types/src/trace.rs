//! A distributed-tracing context carried from the runtime to its plugins.
//!
//! A runtime that traces its work hands the current span to every plugin it runs in the
//! environment variables `TRACEPARENT`, `TRACESTATE` and `BAGGAGE` (OpenTelemetry's
//! environment carriers, holding W3C Trace Context and Baggage values), so one pod's network
//! setup can be followed across the runtime, its plugins and the daemons they call. The
//! values come from whoever started the process: they are checked here, and a context that
//! does not parse is dropped rather than passed on or logged.

use std::fmt;

/// The environment variables of the context, in the order they are set.
pub const TRACE_VARS: [&str; 3] = ["TRACEPARENT", "TRACESTATE", "BAGGAGE"];

/// W3C Trace Context: vendors may keep up to 32 list members; 512 characters is the size
/// the specification asks carriers to propagate at least. Longer values are cut off at a
/// member boundary there; here they are dropped (a plugin has no vendor entries to keep).
const MAX_TRACESTATE: usize = 512;
/// W3C Baggage: a carrier must propagate at least 8192 bytes.
const MAX_BAGGAGE: usize = 8192;

/// A validated trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
    baggage: Option<String>,
}

/// Why a trace context was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTraceContext(String);

impl fmt::Display for InvalidTraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidTraceContext {}

impl TraceContext {
    /// A context from its three values; `traceparent` is required, the others optional
    /// (an empty one counts as absent).
    pub fn new(
        traceparent: &str,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Result<TraceContext, InvalidTraceContext> {
        check_traceparent(traceparent)?;
        let tracestate = optional(tracestate, "TRACESTATE", MAX_TRACESTATE)?;
        let baggage = optional(baggage, "BAGGAGE", MAX_BAGGAGE)?;
        Ok(TraceContext { traceparent: traceparent.to_string(), tracestate, baggage })
    }

    /// The context in an environment (`var` looks a variable up): `None` when there is no
    /// `TRACEPARENT` or the values are not a valid context.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<TraceContext> {
        let traceparent = var("TRACEPARENT")?;
        TraceContext::new(&traceparent, var("TRACESTATE").as_deref(), var("BAGGAGE").as_deref()).ok()
    }

    /// The variables to set for a child process (only those with a value).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("TRACEPARENT", self.traceparent.clone())];
        env.extend(self.tracestate.clone().map(|v| ("TRACESTATE", v)));
        env.extend(self.baggage.clone().map(|v| ("BAGGAGE", v)));
        env
    }

    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The trace id (32 lowercase hex digits): what log lines carry so that every process
    /// of one trace can be found.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the caller's span (16 hex digits).
    pub fn parent_span_id(&self) -> &str {
        &self.traceparent[36..52]
    }
}

/// Whether `id` is a trace id as [`TraceContext::trace_id`] gives it: 32 lowercase hex
/// digits, not all zero. A daemon checks the id a client sends before it logs it.
pub fn is_trace_id(id: &str) -> bool {
    id.len() == 32
        && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && id.bytes().any(|b| b != b'0')
}

/// The longest TRACEPARENT taken: a later version's extra fields are the caller's text,
/// carried into logs and the environment of the processes we start, so they are bounded.
const MAX_TRACEPARENT: usize = 256;

/// `version-traceid-parentid-flags`, lowercase hex: `00-<32>-<16>-<2>`. Version `ff` is
/// invalid; a later version may append fields after another `-` (printable ASCII, at most
/// [`MAX_TRACEPARENT`] characters in all); all-zero ids are invalid.
fn check_traceparent(value: &str) -> Result<(), InvalidTraceContext> {
    let bytes = value.as_bytes();
    if bytes.len() > MAX_TRACEPARENT {
        return Err(InvalidTraceContext(format!(
            "TRACEPARENT is {} bytes long, more than {MAX_TRACEPARENT}",
            bytes.len()
        )));
    }
    let invalid = |why: &str| Err(InvalidTraceContext(format!("TRACEPARENT {value:?}: {why}")));
    if bytes.len() < 55 {
        return invalid("too short");
    }
    let lower_hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let (version, trace_id, span_id, flags) = (&bytes[0..2], &bytes[3..35], &bytes[36..52], &bytes[53..55]);
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return invalid("not version-traceid-parentid-flags");
    }
    if ![version, trace_id, span_id, flags].iter().all(|part| lower_hex(part)) {
        return invalid("not lowercase hexadecimal");
    }
    if version == b"ff" {
        return invalid("version ff is invalid");
    }
    // Version 00 is exactly 55 characters; a later version may carry more after a '-'.
    if bytes.len() > 55 && (version == b"00" || bytes[55] != b'-') {
        return invalid("trailing characters");
    }
    if !bytes[55..].iter().all(|b| b.is_ascii_graphic()) {
        return invalid("a later version's fields hold other than printable ASCII");
    }
    if trace_id.iter().all(|&b| b == b'0') || span_id.iter().all(|&b| b == b'0') {
        return invalid("an all-zero id");
    }
    Ok(())
}

/// An optional header value: printable ASCII without control characters, within `max`.
fn optional(value: Option<&str>, name: &str, max: usize) -> Result<Option<String>, InvalidTraceContext> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.len() > max {
        return Err(InvalidTraceContext(format!("{name} is longer than {max} bytes")));
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(InvalidTraceContext(format!("{name} holds a character that is not printable ASCII")));
    }
    Ok(Some(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_context_gives_its_ids_and_its_variables() {
        let ctx = TraceContext::new(PARENT, Some("congo=t61rcWkgMzE"), Some("userId=alice")).unwrap();
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.parent_span_id(), "00f067aa0ba902b7");
        assert_eq!(
            ctx.env(),
            vec![
                ("TRACEPARENT", PARENT.to_string()),
                ("TRACESTATE", "congo=t61rcWkgMzE".to_string()),
                ("BAGGAGE", "userId=alice".to_string()),
            ]
        );
        let bare = TraceContext::new(PARENT, Some(""), None).unwrap();
        assert_eq!(bare.env(), vec![("TRACEPARENT", PARENT.to_string())]);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::new(bad, None, None).is_err(), "{bad:?} was accepted");
        }
        // A later version may carry more fields: printable, and bounded.
        let later = format!("01{}", &PARENT[2..]);
        assert!(TraceContext::new(&format!("{later}-x"), None, None).is_ok());
        assert!(TraceContext::new(&format!("{later}-{}", "x".repeat(200)), None, None).is_ok());
        let endless = format!("{later}-{}", "x".repeat(1 << 20));
        let refused = TraceContext::new(&endless, None, None).unwrap_err();
        assert!(refused.0.len() < 100, "the refusal does not echo a megabyte: {}", refused.0.len());
        for bad in ["-x\ny", "-x\u{1b}[2J", "-x y", "-\u{e9}"] {
            assert!(TraceContext::new(&format!("{later}{bad}"), None, None).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn oversized_or_unprintable_state_and_baggage_are_refused() {
        assert!(TraceContext::new(PARENT, Some(&"a".repeat(513)), None).is_err());
        assert!(TraceContext::new(PARENT, None, Some(&"b".repeat(8193))).is_err());
        assert!(TraceContext::new(PARENT, Some("a=b\nc=d"), None).is_err());
        assert!(TraceContext::new(PARENT, None, Some("k=\u{e9}")).is_err());
    }

    #[test]
    fn a_trace_id_is_32_lowercase_hex_digits_not_all_zero() {
        assert!(is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "00000000000000000000000000000000",
            "4bf9",
            "4bf92f3577b34da6a3ce929d0e0e4736\n",
        ] {
            assert!(!is_trace_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn from_env_drops_an_invalid_context() {
        let env = |k: &str| match k {
            "TRACEPARENT" => Some("garbage".to_string()),
            _ => None,
        };
        assert_eq!(TraceContext::from_env(env), None);
        assert_eq!(TraceContext::from_env(|_| None), None);
        let good = |k: &str| (k == "TRACEPARENT").then(|| PARENT.to_string());
        assert_eq!(TraceContext::from_env(good).unwrap().trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }
}
