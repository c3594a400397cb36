//! Running external programs with a time limit and readable failures.

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
