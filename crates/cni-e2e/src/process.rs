//! Running external programs with a time limit and readable failures.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// How long one engine command may take before it is killed (a hung plugin must fail the
/// test, not hang CI).
pub const COMMAND_TIMEOUT_SECS: u32 = 90;

/// Runs `command` and returns its output; panics only when it cannot be started.
pub fn output_of(command: &mut Command, what: &str) -> Output {
    command.output().unwrap_or_else(|err| panic!("cannot run {what}: {err}"))
}

/// Runs `command`, panics with its stderr unless it succeeds, and returns its stdout.
pub fn stdout_of_success(command: &mut Command, what: &str) -> String {
    let output = output_of(command, what);
    assert!(output.status.success(), "{what} failed ({}):\n{}", output.status, describe(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Both streams of a finished command, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Makes the process `command` starts receive SIGKILL when the spawning thread dies, so a
/// test killed from outside (e.g. a runner's timeout) leaves no daemon behind.
pub fn die_with_parent(command: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and only calls prctl, which
    // is async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}
