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
