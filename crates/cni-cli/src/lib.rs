//! What every cni-rs command-line program shares, so that all of them answer the same way.
//!
//! - **Arguments** are declared with clap's derive API and parsed with [`parse`]: `--help`,
//!   `--version` and error messages look alike everywhere, and every program accepts
//!   `--completions SHELL` (bash, zsh, fish, elvish, powershell), which prints a completion
//!   script generated from the very parser that reads the arguments, so the two cannot
//!   drift apart. A program with richer scripts of its own (cnitool) parses with
//!   [`parse_with_scripts`], feeding them from the same parser.
//! - **Drop-in binaries** whose reference takes Go-style flags (`dhcp daemon -socketpath P`)
//!   pass their arguments through [`go_style_flags`] first: Go's flag package accepts `-flag`
//!   and `--flag` alike, clap only the latter.
//! - **Daemons log** through `tracing`, set up by [`init_logging`]: one line per event on
//!   stderr, with a timestamp on a terminal or in a file, and with the priority prefix
//!   journald understands (`<3>`, `<4>`, `<6>`, `<7>`) and no timestamp of our own when
//!   stderr is systemd's journal stream. The line a daemon logs when its metrics endpoint is
//!   bound is [`metrics_line`], read back by test harnesses with [`metrics_address_in`].

mod completions;
mod logging;

pub use clap;
pub use clap_complete::Shell;
pub use completions::{command, parse, parse_from, parse_from_with_scripts, parse_with_scripts, script};
pub use logging::{init_logging, metrics_address_in, metrics_line, LogArgs, LogFormat, LogLevel};
pub use tracing;

use std::ffi::OsString;

/// Rewrites Go-style long flags (`-socketpath`, `-timeout=5s`) into clap's `--socketpath`,
/// `--timeout=5s`, leaving single-letter flags (`-h`), `--flags`, values and everything
/// after `--` alone. A value that begins with `-` must then be written `--flag=-value`,
/// as Go's flag package requires for negative numbers too.
pub fn go_style_flags<I>(args: I) -> Vec<OsString>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut seen_terminator = false;
    args.into_iter()
        .map(Into::into)
        .enumerate()
        .map(|(index, arg)| {
            if index == 0 || seen_terminator {
                return arg;
            }
            let Some(text) = arg.to_str() else { return arg };
            if text == "--" {
                seen_terminator = true;
                return arg;
            }
            let name = text.strip_prefix('-').unwrap_or("");
            let flag_name = name.split('=').next().unwrap_or("");
            let go_long_flag = !name.starts_with('-')
                && flag_name.len() > 1
                && flag_name.starts_with(|c: char| c.is_ascii_alphabetic());
            if go_long_flag {
                OsString::from(format!("-{text}"))
            } else {
                arg
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(args: &[&str]) -> Vec<String> {
        go_style_flags(args.iter().copied()).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn go_style_long_flags_become_double_dash_and_nothing_else_changes() {
        assert_eq!(
            rewritten(&[
                "dhcp",
                "-socketpath",
                "/run/x.sock",
                "-timeout=5s",
                "--debug",
                "-h",
                "value",
                "--",
                "-literal"
            ]),
            [
                "dhcp",
                "--socketpath",
                "/run/x.sock",
                "--timeout=5s",
                "--debug",
                "-h",
                "value",
                "--",
                "-literal"
            ]
        );
    }

    #[test]
    fn the_program_name_negative_numbers_and_lone_dashes_are_left_alone() {
        assert_eq!(rewritten(&["-weird-argv0", "-1", "-", "-5s"]), ["-weird-argv0", "-1", "-", "-5s"]);
    }
}
