//! Running `iptables-save` / `iptables-restore`: the firewall's iptables backend (its
//! documented exception to "no process per operation") and the removal of state the
//! reference plugins left (`reference_state`). One read and at most one restore per
//! address family, under a host-wide lock so that read-then-write is not raced by
//! another of our plugin processes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni_sdk::{CniError, ErrorCode};

/// Directories searched after PATH: runtimes often start plugins with a minimal PATH.
const SBIN_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin"];
/// Serialises our read-modify-write of iptables tables across plugin processes.
const LOCK_FILE: &str = "/run/cni-rs/firewall-iptables.lock";
/// Seconds iptables-restore waits for the xtables lock held by other iptables users.
const XTABLES_WAIT: &str = "--wait=10";

/// IPv4 (`iptables-*`) or IPv6 (`ip6tables-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    V4,
    V6,
}

impl Proto {
    pub fn tool(self, what: &str) -> String {
        match self {
            Proto::V4 => format!("iptables-{what}"),
            Proto::V6 => format!("ip6tables-{what}"),
        }
    }
}

/// Finds a program in PATH or the usual sbin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn require_program(name: &str) -> Result<PathBuf, CniError> {
    find_program(name).ok_or_else(|| {
        CniError::new(
            ErrorCode::NotAvailable,
            format!("the iptables backend needs {name}, which is not installed"),
        )
    })
}

/// Whether both tools of a family are installed (for STATUS and for DEL, which has
/// nothing to remove where iptables never was).
pub fn available(proto: Proto) -> Result<(), CniError> {
    require_program(&proto.tool("restore"))?;
    require_program(&proto.tool("save"))?;
    Ok(())
}

/// Held while reading and rewriting a table; released on drop.
pub struct TableLock {
    _file: File,
}

pub fn lock() -> Result<TableLock, CniError> {
    let path = Path::new(LOCK_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CniError::new(ErrorCode::Io, format!("create {}: {e}", dir.display())))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| CniError::new(ErrorCode::Io, format!("open {LOCK_FILE}: {e}")))?;
    file.lock().map_err(|e| CniError::new(ErrorCode::Io, format!("lock {LOCK_FILE}: {e}")))?;
    Ok(TableLock { _file: file })
}

/// `iptables-save -t filter`.
pub fn save_filter(proto: Proto) -> Result<String, CniError> {
    save(proto, "filter")
}

/// `iptables-save -t <table>`.
pub fn save(proto: Proto, table: &str) -> Result<String, CniError> {
    let program = require_program(&proto.tool("save"))?;
    let out = Command::new(&program)
        .args(["-t", table])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CniError::internal(format!("run {}: {e}", program.display())))?;
    if !out.status.success() {
        return Err(CniError::internal(format!(
            "{} -t {table} failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    String::from_utf8(out.stdout)
        .map_err(|_| CniError::internal(format!("{} printed non-UTF-8", program.display())))
}

/// `iptables-restore --noflush` with `script` on stdin: all of it applies, or none.
pub fn restore(proto: Proto, script: &str) -> Result<(), CniError> {
    let program = require_program(&proto.tool("restore"))?;
    let mut child = Command::new(&program)
        .args(["--noflush", XTABLES_WAIT])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CniError::internal(format!("run {}: {e}", program.display())))?;
    let written = child.stdin.take().map(|mut stdin| stdin.write_all(script.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::internal(format!("wait for {}: {e}", program.display())))?;
    if let Some(Err(e)) = written {
        return Err(CniError::internal(format!("write to {}: {e}", program.display())));
    }
    if !out.status.success() {
        return Err(CniError::internal(format!(
            "{} --noflush failed ({}): {}\nscript:\n{script}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_not_available_code_50() {
        assert_eq!(find_program("cni-rs-no-such-iptables-restore"), None);
        let e = require_program("cni-rs-no-such-iptables-restore").unwrap_err();
        assert_eq!(e.code, 50);
        assert!(e.msg.contains("cni-rs-no-such-iptables-restore"), "{}", e.msg);
    }

    #[test]
    fn tool_names_per_family() {
        assert_eq!(Proto::V4.tool("restore"), "iptables-restore");
        assert_eq!(Proto::V6.tool("save"), "ip6tables-save");
    }
}
