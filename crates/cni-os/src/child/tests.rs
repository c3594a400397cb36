use super::*;
use crate::process::ended;
use std::os::unix::process::ExitStatusExt;

fn sh(script: &str) -> Command {
    let mut command = Command::new("sh");
    command.args(["-c", script]);
    command
}

fn within(limit: Duration) -> Limits {
    Limits::new(Instant::now() + limit)
}

/// Far enough that only a hang reaches it (and then the test fails on the error kind).
fn generous() -> Limits {
    within(Duration::from_secs(120))
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[test]
fn input_bigger_than_a_pipe_goes_in_while_the_output_comes_out() {
    // cat writes as it reads: with a blocking write of 4 MiB first, both pipes would fill
    // and the two processes wait on each other for ever.
    let input: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let done = run(&mut Command::new("cat"), &input, &generous()).unwrap();
    assert!(done.status.success());
    assert!(done.stdout == input, "{} bytes back of {}", done.stdout.len(), input.len());
    assert!(!done.stdout_truncated && !done.stderr_truncated);
}

#[test]
fn a_child_that_never_reads_its_input_still_finishes() {
    let input = vec![b'x'; 1 << 20];
    // One closes its stdin (writes then fail), one leaves it open unread (writes block).
    for script in ["exec 0<&-; echo done; echo note >&2", "sleep 0.1; echo done; echo note >&2"] {
        let done = run(&mut sh(script), &input, &generous()).unwrap();
        assert!(done.status.success(), "{script}");
        assert_eq!(text(&done.stdout), "done\n", "{script}");
        assert_eq!(text(&done.stderr), "note\n", "{script}");
    }
}

#[test]
fn at_the_deadline_the_whole_group_is_killed_and_reaped() {
    let outcome = run(&mut sh("sleep 600 & echo $!; wait"), b"", &within(Duration::from_millis(500)));
    let Err(Error::Timeout(partial)) = outcome else { panic!("expected a timeout, got {outcome:?}") };
    assert_eq!(partial.status.signal(), Some(libc::SIGKILL));
    // What it printed before the kill is kept: here, the grandchild's pid.
    let grandchild: u32 = text(&partial.stdout).trim().parse().unwrap();
    assert!(ended(grandchild), "the grandchild {grandchild} outlived the group kill");
}

#[test]
fn a_child_outside_a_group_of_its_own_is_killed_alone() {
    // Spawned without `prepare`: its pid leads no group, and the test's own group (which
    // it shares) must not be signalled.
    let child = sh("exec sleep 600").stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let outcome = finish(child, b"", &within(Duration::from_millis(200)));
    let Err(Error::Timeout(partial)) = outcome else { panic!("expected a timeout, got {outcome:?}") };
    assert_eq!(partial.status.signal(), Some(libc::SIGKILL));
    assert!(!crate::process::exists(pid), "reaped");
}

#[test]
fn a_grandchild_holding_the_output_open_does_not_hold_up_the_return() {
    // The background sleep inherits stdout and keeps it open for ten minutes; the shell
    // exits at once. Only the pipe grace lets this return before the generous deadline.
    let done = run(&mut sh("sleep 600 & echo $!"), b"", &generous()).unwrap();
    assert!(done.status.success());
    let grandchild: u32 = text(&done.stdout).trim().parse().unwrap();
    // It was let be (a normal exit kills nothing); clean it up.
    assert!(crate::process::exists(grandchild));
    crate::process::kill(grandchild, Signal::KILL).unwrap();
}

#[test]
fn output_past_the_cap_is_drained_and_dropped() {
    // 64 MiB on each stream against a 4 KiB cap: the child is never blocked on a full
    // pipe, and only the cap is kept.
    let script = "head -c 67108864 /dev/zero; head -c 67108864 /dev/zero >&2; echo end >&2";
    let done = run(&mut sh(script), b"", &generous().output_cap(4096)).unwrap();
    assert!(done.status.success());
    assert_eq!(done.stdout.len(), 4096);
    assert_eq!(done.stderr.len(), 4096);
    assert!(done.stdout_truncated && done.stderr_truncated);
}

#[test]
fn exit_codes_and_signals_are_reported() {
    let done = run(&mut sh("echo out; exit 7"), b"", &generous()).unwrap();
    assert_eq!(done.status.code(), Some(7));
    assert_eq!(text(&done.stdout), "out\n");
    let done = run(&mut sh("kill -TERM $$"), b"", &generous()).unwrap();
    assert_eq!(done.status.signal(), Some(libc::SIGTERM));
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let outcome = run(&mut Command::new("/nonexistent/ch-program"), b"", &generous());
    assert!(matches!(outcome, Err(Error::Spawn(ref e)) if e.kind() == ErrorKind::NotFound), "{outcome:?}");
}

/// The pids a script printed, one a line, before it was killed or ended.
fn printed_pids(bytes: &[u8]) -> Vec<u32> {
    text(bytes).lines().filter_map(|line| line.trim().parse().ok()).collect()
}

#[test]
fn a_child_printing_without_end_is_killed_at_the_deadline_with_its_output_capped() {
    // `yes` never exits and never stops writing, on both streams: the loop must neither
    // block on a full pipe nor keep more than the cap.
    let outcome = run(
        &mut sh("echo $$; yes >&2 & exec yes"),
        b"",
        &within(Duration::from_millis(500)).output_cap(4096),
    );
    let Err(Error::Timeout(partial)) = outcome else { panic!("expected a timeout, got {outcome:?}") };
    assert_eq!(partial.status.signal(), Some(libc::SIGKILL));
    assert_eq!((partial.stdout.len(), partial.stderr.len()), (4096, 4096));
    assert!(partial.stdout_truncated && partial.stderr_truncated);
    let child: u32 =
        text(&partial.stdout[..partial.stdout.iter().position(|&b| b == b'\n').unwrap()]).parse().unwrap();
    assert!(ended(child), "the child {child} outlived the kill");
}

#[test]
fn a_child_that_closes_its_output_and_lingers_is_still_killed_at_the_deadline() {
    // Both output pipes end at once: that must not pass for the child's end.
    let pid_dir = tempfile::Builder::new().prefix("sr-child").tempdir().unwrap();
    let pid_file = pid_dir.path().join("pid");
    let script = format!("echo $$ > {}; exec >&- 2>&-; sleep 600", pid_file.display());
    let outcome = run(&mut sh(&script), b"", &within(Duration::from_millis(500)));
    let Err(Error::Timeout(partial)) = outcome else { panic!("expected a timeout, got {outcome:?}") };
    assert_eq!(partial.status.signal(), Some(libc::SIGKILL));
    assert!(partial.stdout.is_empty() && partial.stderr.is_empty());
    let child: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(ended(child));
}

#[test]
fn grandchildren_holding_the_pipes_die_with_a_child_that_never_exits() {
    // Two grandchildren holding both pipes, one of them printing without end into stderr,
    // and a child that never exits: at the deadline the group goes, all three of them.
    let script = "sleep 600 & echo $!; (exec yes >&2) & echo $!; echo $$; sleep 600";
    let outcome = run(&mut sh(script), b"", &within(Duration::from_millis(500)).output_cap(1 << 16));
    let Err(Error::Timeout(partial)) = outcome else { panic!("expected a timeout, got {outcome:?}") };
    let pids = printed_pids(&partial.stdout);
    assert_eq!(pids.len(), 3, "{}", text(&partial.stdout));
    assert!(partial.stderr_truncated, "the printing grandchild was drained to the end");
    for pid in pids {
        assert!(ended(pid), "{pid} outlived the group kill");
    }
}

#[test]
fn a_grandchild_that_left_the_group_and_holds_the_pipe_does_not_hold_up_the_return() {
    // setsid takes the grandchild out of the child's group (a group kill would not reach
    // it); the child exits at once. The return is bounded by the pipe grace, not by the
    // grandchild, and the generous deadline is not reached.
    let done = run(&mut sh("setsid sleep 600 & echo $!"), b"", &generous()).unwrap();
    assert!(done.status.success());
    let grandchild: u32 = text(&done.stdout).trim().parse().unwrap();
    // Not ours to kill after a normal exit; the test cleans up.
    let _ = crate::process::kill(grandchild, Signal::KILL);
    assert!(ended(grandchild));
}
