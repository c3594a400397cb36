//! A process's resources from the kernel's own accounting under `/proc`.

use std::time::Duration;

/// CPU time process `pid` has used so far, user and system, over all its live threads:
/// the scheduler's own account (`/proc/PID/task/*/schedstat`, nanoseconds), where
/// `/proc/PID/stat` counts in 10 ms ticks, too coarse for processes that mostly sleep
/// and are compared by the millisecond. None once the process is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = Duration::ZERO;
    for task in tasks.flatten() {
        // A thread that ended between the listing and the read has nothing to add.
        if let Some(time) =
            std::fs::read_to_string(task.path().join("schedstat")).ok().and_then(|s| parse_schedstat(&s))
        {
            total += time;
        }
    }
    Some(total)
}

/// CPU time of the children process `pid` (`self` for this one) has waited for, user and
/// system (`cutime` + `cstime` of `/proc/PID/stat`, in 10 ms ticks: the only account of
/// processes that are gone).
pub fn waited_children_cpu_time(pid: &str) -> Duration {
    /// Linux reports these times in USER_HZ ticks, fixed at 100 a second for user space.
    const TICK: Duration = Duration::from_millis(10);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let fields: Vec<u32> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect())
        .unwrap_or_default();
    // After ')': state is index 0, so cutime (field 16) is index 13.
    let ticks = |i: usize| fields.get(i).copied().unwrap_or(0);
    TICK * (ticks(13) + ticks(14))
}

/// Resident memory of process `pid` in KiB (`VmRSS`); None once it exited.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_kib(&status)
}

fn parse_schedstat(schedstat: &str) -> Option<Duration> {
    Some(Duration::from_nanos(schedstat.split_whitespace().next()?.parse().ok()?))
}

fn parse_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_the_status_file() {
        assert_eq!(parse_rss_kib("Name:\tx\nVmHWM:\t  9 kB\nVmRSS:\t    4212 kB\n"), Some(4212));
        assert_eq!(parse_rss_kib("Name:\tzombie\n"), None);
        assert!(rss_kib(std::process::id()).is_some_and(|kib| kib > 0));
    }

    #[test]
    fn cpu_time_sums_the_schedulers_first_figure_over_threads() {
        assert_eq!(parse_schedstat("142259943 25044298 893\n"), Some(Duration::from_nanos(142_259_943)));
        assert_eq!(parse_schedstat(""), None);
        let busy = std::thread::spawn(|| (0..2_000_000u64).fold(0u64, |a, b| a.wrapping_add(b * b)));
        let result = busy.join().unwrap();
        assert!(result > 0);
        assert!(cpu_time(std::process::id()).is_some_and(|t| t > Duration::ZERO));
        assert_eq!(cpu_time(u32::MAX), None);
    }
}
