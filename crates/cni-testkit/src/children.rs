//! The calling thread's child processes, for tests of code that starts helpers.

use std::time::Duration;

/// This thread's children (zombies included), by pid.
pub fn of_this_thread() -> Vec<u32> {
    let list = std::fs::read_to_string("/proc/thread-self/children").unwrap_or_default();
    list.split_whitespace().map(|pid| pid.parse().expect("a pid")).collect()
}

/// Whether process `pid` has exited (a zombie, or gone).
fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any byte.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits until `pid` has exited; panics after `limit`.
pub fn wait_until_exited(pid: u32, limit: Duration) {
    crate::poll::until(&format!("process {pid} exits"), limit, || has_exited(pid));
}
