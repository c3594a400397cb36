//! Running a test binary under Debian's kernel in QEMU (`tools/kernel-rig`), for tests
//! that need kernel features this machine's kernel lacks (ipvlan, 802.1q vlan, vrf,
//! dummy, bridge VLAN filtering).
//!
//! The pattern, one VM per test binary rather than per test: the tests that need the rig
//! are `#[ignore = "..."]`d and call [`require_rig`] first, and one ordinary test calls
//! [`run_ignored_tests_in_rig`], which boots the VM once, runs this same binary inside it
//! with `--ignored`, prints what it printed and fails unless every one of them passed.
//! So `cargo test` and `cargo nextest run` run them all with no flag, and a rig that
//! cannot start is a failing test, never a skipped one.

use std::path::PathBuf;
use std::process::Command;

/// Set by `tools/kernel-rig` for the command it runs in the guest.
pub const IN_RIG_ENV: &str = "CNI_RS_IN_KERNEL_RIG";

/// Whether this process runs inside the kernel rig's guest.
pub fn in_rig() -> bool {
    std::env::var_os(IN_RIG_ENV).is_some_and(|v| v == "1")
}

/// Panics unless inside the rig: a rig-only test run by hand on the host (`--ignored`)
/// says why it cannot work instead of failing on a missing kernel feature.
pub fn require_rig() {
    assert!(
        in_rig(),
        "this test needs the kernel rig (it is run inside it by the binary's rig test; by hand: \
         tools/kernel-rig -- <test binary> --ignored --exact <name>)"
    );
}

/// `tools/kernel-rig` of this workspace.
pub fn rig_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/kernel-rig")
}

/// What a command run in the rig printed, and its exit status.
#[derive(Debug)]
pub struct RigOutput {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args` in the rig (booting a VM, building the kernel cache first if it is
/// cold). Panics if the script cannot be started at all.
pub fn run_in_rig(program: impl Into<PathBuf>, args: &[&str]) -> RigOutput {
    crate::ns::require_root();
    let script = rig_script();
    let output = Command::new(&script)
        .arg("--")
        .arg(program.into())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("starting {}: {e}", script.display()));
    RigOutput {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs this test binary's ignored tests (the rig-only ones) in one VM and panics unless
/// every one of them passed (a run passing fewer means some did not run); prints the
/// guest's output either way, so the failing test is visible in the host's report.
pub fn run_ignored_tests_in_rig() {
    let exe = std::env::current_exe().expect("current_exe");
    let expected = ignored_test_count(&exe);
    assert!(expected > 0, "{} holds no ignored (rig-only) tests", exe.display());
    // Two threads: the guest has at most a few CPUs and tests mostly wait on the kernel.
    let out = run_in_rig(exe, &["--ignored", "--test-threads=2"]);
    println!("--- kernel rig stdout:\n{}", out.stdout);
    eprintln!("--- kernel rig stderr:\n{}", out.stderr);
    assert_eq!(out.status, Some(0), "tests in the kernel rig failed (125 = the rig itself failed)");
    let passed = passed_count(&out.stdout);
    assert_eq!(passed, expected, "the kernel rig passed {passed} of the binary's {expected} rig-only tests");
}

/// How many ignored tests the test binary `exe` holds, as its own `--list --ignored` says:
/// the count the rig must pass, derived rather than kept by hand.
fn ignored_test_count(exe: &std::path::Path) -> usize {
    let out = std::process::Command::new(exe)
        .args(["--list", "--ignored", "--format", "terse"])
        .output()
        .expect("list the test binary's ignored tests");
    assert!(out.status.success(), "{} --list --ignored failed", exe.display());
    listed_tests(&String::from_utf8_lossy(&out.stdout))
}

/// The number of `name: test` lines in libtest's terse `--list` output.
fn listed_tests(list: &str) -> usize {
    list.lines().filter(|line| line.ends_with(": test")).count()
}

/// The number in libtest's `test result: ok. N passed` line.
fn passed_count(stdout: &str) -> usize {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::passed_count;

    #[test]
    fn counts_passed_tests_from_libtest_summary() {
        let out = "running 3 tests\ntest a ... ok\n\ntest result: ok. 3 passed; 0 failed; 0 ignored\n";
        assert_eq!(passed_count(out), 3);
        assert_eq!(passed_count("test result: FAILED. 1 passed; 2 failed"), 0);
    }

    #[test]
    fn counts_tests_not_benches_in_a_terse_list() {
        assert_eq!(super::listed_tests("dummy::add_check_del: test\nvlan::mtu: test\nspeed: bench\n"), 2);
        assert_eq!(super::listed_tests(""), 0);
    }
}
