//! Playing a local unprivileged user in a test: the attacker who plants links and files
//! where a plugin running as root will read or write.

use std::process::{Command, Output};

/// The uid and gid of `nobody` / `nogroup`.
pub const NOBODY: u32 = 65534;

/// Runs the shell `script` as nobody:nogroup with no supplementary groups (util-linux's
/// `setpriv`). Through a shell on purpose: setpriv itself still holds root's capabilities
/// when it calls execve, so a path it executes directly is looked up with them; the shell,
/// like any process of that user, has none.
pub fn as_nobody(script: &str) -> Output {
    command_as_nobody("/bin/sh").args(["-c", script]).output().expect("setpriv (util-linux) runs")
}

/// `program` (an absolute path), to be run as nobody:nogroup with no supplementary groups.
pub fn command_as_nobody(program: &str) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups", "--"])
        .arg(program);
    command
}
