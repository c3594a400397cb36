//! The resolver's control socket: one request line, one reply line, over a root-only unix
//! stream socket in the state directory.
//!
//! Requests: `reload` (re-read the state directory now; the reply comes after the new
//! records are served), `status`, `lookup <network> <name>` (what the resolver answers for
//! `<name>` on that network, for the plugin's CHECK). Replies start with `ok` or `error`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The longest request or reply line either side accepts.
pub const MAX_LINE: usize = 4096;

/// The field a `status` reply ends with when some gateway address could not be listened
/// on: the first such error, quoted. Written by the resolver ([`push_listen_error`]) and
/// read by the plugin's STATUS ([`listen_error`]) from this one definition; being the
/// last field, its value is read to the end of the line, spaces and all.
const LISTEN_ERROR: &str = " listen_error=";

/// Appends the listen-error field for `error` to a `status` line (the resolver's side).
pub fn push_listen_error(status: &mut String, error: &str) {
    status.push_str(LISTEN_ERROR);
    status.push_str(&format!("{error:?}"));
}

/// The listen-error field of a `status` reply, `listen_error="…"` whole, if it has one.
pub fn listen_error(status: &str) -> Option<&str> {
    status.find(LISTEN_ERROR).map(|at| &status[at + 1..])
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nobody answers on the socket: the resolver is not running.
    #[error("the resolver is not running ({0})")]
    NotRunning(std::io::Error),
    #[error("talking to the resolver: {0}")]
    Io(#[from] std::io::Error),
    #[error("the resolver says: {0}")]
    Refused(String),
}

/// Sends one request and returns the reply after `ok ` (or an error).
pub fn request(socket: &Path, line: &str, timeout: Duration) -> Result<String, ControlError> {
    let mut stream = UnixStream::connect(socket).map_err(ControlError::NotRunning)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(format!("{line}\n").as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).take_line(&mut reply)?;
    let reply = reply.trim_end();
    match reply.split_once(' ').unwrap_or((reply, "")) {
        ("ok", rest) => Ok(rest.to_string()),
        ("error", rest) => Err(ControlError::Refused(rest.to_string())),
        _ => Err(ControlError::Refused(format!("unexpected reply {reply:?}"))),
    }
}

/// Reading a line with a bound, for both sides.
pub trait TakeLine {
    fn take_line(&mut self, buf: &mut String) -> std::io::Result<usize>;
}

impl<R: BufRead> TakeLine for R {
    fn take_line(&mut self, buf: &mut String) -> std::io::Result<usize> {
        let n = std::io::Read::take(&mut *self, MAX_LINE as u64).read_line(buf)?;
        if n >= MAX_LINE && !buf.ends_with('\n') {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "line too long"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plugin reads back the whole error the resolver wrote, spaces included (a
    /// word-by-word reading kept only `listen_error="10.88.0.1:53:`).
    #[test]
    fn the_listen_error_is_read_back_whole() {
        let mut status = "pid=7 networks=1 attachments=2 listening=1 problems=1".to_string();
        assert_eq!(listen_error(&status), None);
        push_listen_error(&mut status, "10.88.0.1:53: Address already in use (os error 98)");
        assert_eq!(
            listen_error(&status),
            Some(r#"listen_error="10.88.0.1:53: Address already in use (os error 98)""#)
        );
    }
}
