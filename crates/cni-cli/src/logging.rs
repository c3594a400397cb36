//! The daemons' one logging setup: `tracing` events, one line each, on stderr.

use std::fmt;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The logging flags every daemon takes (`#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct LogArgs {
    /// Least severe events written
    #[arg(long, value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,
    /// Line format: `journald` adds priority prefixes, `text` a timestamp and the level;
    /// `auto` is `journald` when stderr is systemd's journal stream, `text` otherwise
    #[arg(long, value_enum, default_value_t = LogFormat::Auto)]
    pub log_format: LogFormat,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Text,
    Journald,
}

impl LogLevel {
    fn level(self) -> Level {
        match self {
            Self::Error => Level::ERROR,
            Self::Warn => Level::WARN,
            Self::Info => Level::INFO,
            Self::Debug => Level::DEBUG,
            Self::Trace => Level::TRACE,
        }
    }
}

/// Makes `program`'s events go to stderr from now on, as `args` says. Called once, first
/// thing in a daemon's `main`; a second call (or another global subscriber) is an error.
pub fn init_logging(program: &'static str, args: &LogArgs) -> Result<(), String> {
    let journald = match args.log_format {
        LogFormat::Auto => stderr_is_the_journal(),
        LogFormat::Text => false,
        LogFormat::Journald => true,
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(args.log_level.level())
        .with_writer(std::io::stderr)
        .event_format(Line { program, journald })
        .finish();
    tracing::subscriber::set_global_default(subscriber).map_err(|e| format!("logging: {e}"))
}

/// What a daemon logs once its metrics endpoint is bound: `metrics on http://ADDRESS/metrics`.
/// Test harnesses start daemons with `--metrics-address IP:0` and find the port the kernel
/// chose in this line ([`metrics_address_in`]); the two are written from these two
/// functions so they cannot drift apart.
pub fn metrics_line(bound: SocketAddr) -> String {
    format!("{METRICS_LINE_HEAD}{bound}{METRICS_LINE_TAIL}")
}

const METRICS_LINE_HEAD: &str = "metrics on http://";
const METRICS_LINE_TAIL: &str = "/metrics";

/// The address in a log line that ends with [`metrics_line`] (whatever the line format put
/// before it: time, level, program or a journald priority).
pub fn metrics_address_in(line: &str) -> Option<SocketAddr> {
    let rest = line.split_once(METRICS_LINE_HEAD)?.1;
    rest.strip_suffix(METRICS_LINE_TAIL)?.parse().ok()
}

/// systemd names the journal stream it connects stderr to in `JOURNAL_STREAM`
/// (`device:inode`); stderr redirected elsewhere by the unit or a shell no longer matches.
fn stderr_is_the_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else { return false };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else { return false };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// One event, one line: `<priority>message fields` for journald (which stamps time, unit
/// and pid itself), `time LEVEL program[pid]: message fields` otherwise.
struct Line {
    program: &'static str,
    journald: bool,
}

/// sd-daemon(3)'s prefixes: err, warning, info, debug.
fn journald_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        if self.journald {
            write!(writer, "<{}>", journald_priority(level))?;
        } else {
            SystemTime.format_time(&mut writer)?;
            write!(writer, " {level:>5} {}[{}]: ", self.program, std::process::id())?;
        }
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `program` writes for a warning and a debug event at `level` (per thread: no
    /// global subscriber is set, so tests do not share one).
    fn lines(journald: bool, level: Level) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .event_format(Line { program: "demo-daemon", journald })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(path = "/var/lib/x", "cannot save the lease");
            tracing::debug!("renewing");
        });
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn journald_lines_carry_the_priority_and_no_timestamp() {
        assert_eq!(lines(true, Level::DEBUG), "<4>cannot save the lease path=\"/var/lib/x\"\n<7>renewing\n");
    }

    #[test]
    fn text_lines_carry_time_level_program_and_pid() {
        let text = lines(false, Level::INFO);
        let line = text.lines().next().unwrap();
        let expected_tail =
            format!(" WARN demo-daemon[{}]: cannot save the lease path=\"/var/lib/x\"", std::process::id());
        assert!(line.ends_with(&expected_tail), "{line}");
        assert!(line.starts_with("20") && line.contains('T'), "no RFC 3339 time: {line}");
        assert_eq!(text.lines().count(), 1, "the debug event is below the level: {text}");
    }

    #[test]
    fn the_metrics_line_gives_back_its_address_in_every_format() {
        for bound in ["127.0.0.1:9471", "[::1]:40000"] {
            let bound: SocketAddr = bound.parse().unwrap();
            let line = metrics_line(bound);
            for logged in [format!("<6>{line}"), format!("2026-01-01T00:00:00Z  INFO d[1]: {line}")] {
                assert_eq!(metrics_address_in(&logged), Some(bound), "{logged}");
            }
        }
        assert_eq!(metrics_address_in("listening on /run/x.sock"), None);
        assert_eq!(metrics_address_in("metrics on http://localhost:1/metrics"), None);
    }

    #[derive(Parser)]
    struct Daemon {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn the_flags_default_to_info_and_auto_and_refuse_unknown_values() {
        let parsed = Daemon::try_parse_from(["d"]).unwrap();
        assert_eq!(parsed.log, LogArgs { log_level: LogLevel::Info, log_format: LogFormat::Auto });
        let parsed =
            Daemon::try_parse_from(["d", "--log-level", "debug", "--log-format", "journald"]).unwrap();
        assert_eq!(parsed.log.log_level, LogLevel::Debug);
        assert!(Daemon::try_parse_from(["d", "--log-level", "loud"]).is_err());
    }
}
