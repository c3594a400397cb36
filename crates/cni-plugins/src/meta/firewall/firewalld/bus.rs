//! A small client of firewalld's D-Bus API (`org.fedoraproject.FirewallD1`), over our
//! own synchronous wire code ([`super::wire`]).
//!
//! The bus and whoever owns firewalld's name on it are a peer, not part of us: every call
//! is bounded in time (a silent bus or firewalld cannot hang the plugin), every reply is
//! checked for its type and size before it is used, and text the peer sends (error
//! messages, zone names) is shortened and stripped of control characters before it
//! reaches a CNI error.

use std::path::Path;
use std::time::Duration;

use super::wire::{self, CallError, Conn, Value};

/// The standard variable naming the system bus, and the bus's address when it is unset.
pub const SYSTEM_BUS_ENV: &str = "DBUS_SYSTEM_BUS_ADDRESS";
const DEFAULT_SYSTEM_BUS_SOCKET: &str = "/run/dbus/system_bus_socket";

const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
const FIREWALLD_PATH: &str = "/org/fedoraproject/FirewallD1";
const ZONE_INTERFACE: &str = "org.fedoraproject.FirewallD1.zone";
const DBUS: &str = "org.freedesktop.DBus";
const DBUS_PATH: &str = "/org/freedesktop/DBus";

/// Connecting, authenticating and saying Hello: a live bus answers in milliseconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One method call. firewalld applies a source change to the kernel before it answers
/// (tens of milliseconds, more on a host with a large ruleset).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Zone names are short file names (`trusted`, `public`); a longer "zone" in a reply is
/// not firewalld's.
pub const MAX_ZONE_LEN: usize = 64;
/// How much of a peer's error text a CNI error carries.
const MAX_PEER_TEXT: usize = 200;

/// What went wrong talking to the bus or firewalld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusError {
    /// No bus, or firewalld's name has no owner on it.
    NotRunning(String),
    /// firewalld refused the call: its error code (`ZONE_CONFLICT`, `INVALID_ZONE`...) and
    /// message, both sanitised.
    Refused { code: String, message: String },
    /// A timeout, a broken connection, a reply of the wrong shape.
    Failed(String),
}

impl std::fmt::Display for BusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusError::NotRunning(why) => write!(f, "firewalld is not running ({why})"),
            BusError::Refused { message, .. } => write!(f, "firewalld refused: {message}"),
            BusError::Failed(why) => write!(f, "D-Bus: {why}"),
        }
    }
}

/// The system bus's address: `$DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
/// `None` when the variable is unset and the standard socket does not exist: then no
/// firewalld can run, and nothing is spent finding that out.
pub fn system_bus_address() -> Option<String> {
    match std::env::var(SYSTEM_BUS_ENV) {
        Ok(address) if !address.is_empty() => Some(address),
        _ => Path::new(DEFAULT_SYSTEM_BUS_SOCKET)
            .exists()
            .then(|| format!("unix:path={DEFAULT_SYSTEM_BUS_SOCKET}")),
    }
}

/// A connection to the system bus on which firewalld's name has an owner.
pub struct Firewalld {
    conn: std::cell::RefCell<Conn>,
}

/// Whether adding a source changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The source is now in the zone, put there by this call.
    New,
    /// It already was (someone else put it there: not ours to remove later).
    AlreadyThere,
}

impl Firewalld {
    /// Connects to the system bus and asks whether firewalld's name has an owner.
    /// `NotRunning` when there is no bus or no firewalld on it.
    pub fn connect() -> Result<Firewalld, BusError> {
        let address = system_bus_address().ok_or_else(|| {
            BusError::NotRunning(format!(
                "no system bus: {SYSTEM_BUS_ENV} is unset and {DEFAULT_SYSTEM_BUS_SOCKET} does not exist"
            ))
        })?;
        let path = wire::unix_path(&address).ok_or_else(|| {
            BusError::NotRunning(format!("system bus address {} is not unix:path=...", sanitize(&address)))
        })?;
        let conn = Conn::connect(path, CONNECT_TIMEOUT).map_err(|e| match e {
            CallError::Io(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                BusError::Failed(format!(
                    "the system bus did not complete the handshake within {}s",
                    CONNECT_TIMEOUT.as_secs()
                ))
            }
            // No socket, no one listening on it, or a bus that refuses us: no firewalld we
            // could use.
            e => BusError::NotRunning(format!("cannot connect to the system bus: {}", describe(e))),
        })?;
        let fw = Firewalld { conn: std::cell::RefCell::new(conn) };
        match fw.call(DBUS, DBUS_PATH, DBUS, "NameHasOwner", &[FIREWALLD])? {
            Value::Bool(true) => {}
            Value::Bool(false) => {
                return Err(BusError::NotRunning(format!("{FIREWALLD} has no owner on the system bus")))
            }
            other => return Err(unexpected("NameHasOwner", &other)),
        }
        Ok(fw)
    }

    /// `zone.addSource(zone, source)`.
    pub fn add_source(&self, zone: &str, source: &str) -> Result<Added, BusError> {
        match self.zone_call("addSource", &[zone, source]) {
            Ok(_) => Ok(Added::New),
            Err(BusError::Refused { code, .. }) if code == "ZONE_ALREADY_SET" => Ok(Added::AlreadyThere),
            Err(e) => Err(e),
        }
    }

    /// `zone.removeSource(zone, source)`; `Ok(false)` when the source was not in the zone,
    /// or the zone no longer exists (DEL and GC are idempotent).
    pub fn remove_source(&self, zone: &str, source: &str) -> Result<bool, BusError> {
        match self.zone_call("removeSource", &[zone, source]) {
            Ok(_) => Ok(true),
            Err(BusError::Refused { code, .. })
                if matches!(
                    code.as_str(),
                    "UNKNOWN_SOURCE" | "INVALID_ZONE" | "ZONE_CONFLICT" | "NOT_ENABLED"
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// `zone.getZoneOfSource(source)`: the zone the source is bound to, empty for none.
    pub fn zone_of_source(&self, source: &str) -> Result<String, BusError> {
        let zone = match self.zone_call("getZoneOfSource", &[source])? {
            Value::Str(zone) => zone,
            other => return Err(unexpected("getZoneOfSource", &other)),
        };
        if zone.len() > MAX_ZONE_LEN || zone.chars().any(|c| c.is_control()) {
            return Err(BusError::Failed(format!(
                "getZoneOfSource: the reply is not a zone name ({} bytes: {})",
                zone.len(),
                sanitize(&zone)
            )));
        }
        Ok(zone)
    }

    fn zone_call(&self, method: &str, args: &[&str]) -> Result<Value, BusError> {
        self.call(FIREWALLD, FIREWALLD_PATH, ZONE_INTERFACE, method, args)
    }

    fn call(
        &self,
        destination: &str,
        path: &str,
        interface: &str,
        method: &str,
        args: &[&str],
    ) -> Result<Value, BusError> {
        let mut conn = self.conn.borrow_mut();
        conn.call(destination, path, interface, method, args, CALL_TIMEOUT).map_err(|e| match e {
            CallError::Remote { name, message } => refused(&name, &message),
            CallError::Io(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                BusError::Failed(format!("{method}: no answer within {}s", CALL_TIMEOUT.as_secs()))
            }
            e => BusError::Failed(format!("{method}: {}", describe(e))),
        })
    }
}

fn describe(e: CallError) -> String {
    match e {
        CallError::Io(e) => e.to_string(),
        CallError::Protocol(why) => why,
        CallError::Remote { name, message } => sanitize(&format!("{name}: {message}")),
    }
}

fn unexpected(method: &str, value: &Value) -> BusError {
    let what = match value {
        Value::Str(_) => "a string".to_string(),
        Value::Bool(_) => "a boolean".to_string(),
        Value::Other(signature) => format!("signature {:?}", sanitize(signature)),
    };
    BusError::Failed(format!("{method}: unexpected reply ({what})"))
}

/// A D-Bus error reply. firewalld's own are `org.fedoraproject.FirewallD1.Exception` with
/// the message `CODE: detail`; the bus's own (`...DBus.Error.ServiceUnknown`, no owner)
/// mean firewalld went away.
fn refused(name: &str, detail: &str) -> BusError {
    if name == "org.freedesktop.DBus.Error.ServiceUnknown"
        || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
    {
        return BusError::NotRunning(format!("{FIREWALLD} has no owner on the system bus"));
    }
    if name == "org.freedesktop.DBus.Error.NoReply" || name == "org.freedesktop.DBus.Error.Timeout" {
        return BusError::Failed(format!("no answer within {}s", CALL_TIMEOUT.as_secs()));
    }
    let code: String = detail
        .split(':')
        .next()
        .filter(|c| !c.is_empty() && c.len() <= 40 && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
        .unwrap_or("")
        .to_string();
    let message = if detail.is_empty() { sanitize(name) } else { sanitize(detail) };
    BusError::Refused { code, message }
}

/// A peer's text made fit for an error message: control characters replaced, cut at
/// [`MAX_PEER_TEXT`] characters.
pub fn sanitize(text: &str) -> String {
    let mut out: String =
        text.chars().take(MAX_PEER_TEXT).map(|c| if c.is_control() { '?' } else { c }).collect();
    if text.chars().nth(MAX_PEER_TEXT).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firewalld_error_codes_are_read_from_the_message() {
        let e = refused(
            "org.fedoraproject.FirewallD1.Exception",
            "ZONE_ALREADY_SET: '10.0.0.1/32' already bound",
        );
        assert!(matches!(e, BusError::Refused { ref code, .. } if code == "ZONE_ALREADY_SET"), "{e:?}");
        let e = refused("org.fedoraproject.FirewallD1.Exception", "no code here");
        assert!(matches!(e, BusError::Refused { ref code, .. } if code.is_empty()), "{e:?}");
        assert!(matches!(refused("org.freedesktop.DBus.Error.ServiceUnknown", ""), BusError::NotRunning(_)));
    }

    #[test]
    fn peer_text_is_cut_and_stripped() {
        let long = "x".repeat(10_000);
        assert_eq!(sanitize(&long).len(), MAX_PEER_TEXT + 3);
        assert_eq!(sanitize("a\nb\x1b[31m"), "a?b?[31m");
    }
}
