//! Waiting for what happens in the background — a veth pair going after DEL, a daemon
//! starting to answer, a lease being renewed, a peer's route appearing: one polling loop
//! for every test in the workspace.
//!
//! Limits here mean "never happens", not speed claims (speed is cni-bench's business), so
//! they are generous enough that a loaded machine cannot fail a test by being slow. The
//! loop backs off from 5 ms to 100 ms between checks: quick when the event is near, cheap
//! when a check is itself costly (a netlink dump of three hosts).

use std::time::{Duration, Instant};

/// The usual limit: long enough for a 2-core machine at a load of 10.
pub const EVENTUALLY: Duration = Duration::from_secs(20);

const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Calls `check` until it gives a value, for up to `limit`; `None` if it never did. For a
/// test that asserts on the absence, or reports the failure in its own words.
pub fn poll<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Waits up to `limit` until `check` gives a value and returns it; the test fails naming
/// `what` otherwise.
pub fn eventually<T>(what: &str, limit: Duration, check: impl FnMut() -> Option<T>) -> T {
    poll(limit, check).unwrap_or_else(|| panic!("still not so after {limit:?}: {what}"))
}

/// Waits up to `limit` until `condition` holds; the test fails naming `what` otherwise.
pub fn until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    eventually(what, limit, || condition().then_some(()))
}

/// Runs `work` on a thread of its own and waits up to `limit` for it to finish; the test
/// fails naming `what` otherwise (the thread is left behind, as a hung call cannot be
/// stopped from outside). For a call that must not wait out a much longer timeout of its
/// own: give it one far beyond `limit` (an hour), so a wrong call cannot pass by luck.
pub fn finishes<T: Send + 'static>(
    what: &str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let thread = std::thread::spawn(work);
    until(what, limit, || thread.is_finished());
    thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishes_returns_what_the_work_gave_and_fails_on_work_that_never_ends() {
        assert_eq!(finishes("a quick sum", EVENTUALLY, || 2 + 2), 4);
        let (_hold, wait) = std::sync::mpsc::channel::<()>();
        let hung = std::panic::catch_unwind(move || {
            finishes("work that waits for nobody", Duration::from_millis(50), move || wait.recv())
        });
        let message = *hung.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("work that waits for nobody"), "{message}");
    }

    #[test]
    fn poll_returns_the_first_value_the_check_gives() {
        let mut calls = 0;
        let found = poll(EVENTUALLY, || {
            calls += 1;
            (calls == 3).then_some(calls * 10)
        });
        assert_eq!(found, Some(30));
        assert_eq!(calls, 3);
    }

    #[test]
    fn poll_gives_up_after_the_limit_having_checked_at_least_twice() {
        let mut calls = 0;
        let found: Option<()> = poll(Duration::from_millis(30), || {
            calls += 1;
            None
        });
        assert_eq!(found, None);
        assert!(calls >= 2, "checked {calls} times");
    }

    #[test]
    #[should_panic(expected = "still not so after 10ms: the sky falls")]
    fn until_fails_naming_what_it_waited_for() {
        until("the sky falls", Duration::from_millis(10), || false);
    }
}
