//! Parsing with `--completions SHELL` added to every program's own arguments.

use clap::{value_parser, Arg, ArgMatches, Command, Parser};
use clap_complete::Shell;

const COMPLETIONS: &str = "completions";

/// Parses the process's arguments into `T`, exiting as clap does on `--help`, `--version`
/// and errors (status 2), and printing a completion script on `--completions SHELL`.
pub fn parse<T: Parser>() -> T {
    parse_from(std::env::args_os())
}

/// [`parse`] over given arguments (the first is the program name).
pub fn parse_from<T, I>(args: I) -> T
where
    T: Parser,
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString> + Clone,
{
    parse_from_with_scripts(args, script)
}

/// [`parse`] for a program that writes completion scripts of its own (richer than the
/// generated ones for some shells): `--completions SHELL` prints `scripts(command, shell)`,
/// which may hand the shells it has nothing better for to [`script`].
pub fn parse_with_scripts<T: Parser>(scripts: impl Fn(&mut Command, Shell) -> String) -> T {
    parse_from_with_scripts(std::env::args_os(), scripts)
}

/// [`parse_with_scripts`] over given arguments (the first is the program name).
pub fn parse_from_with_scripts<T, I>(args: I, scripts: impl Fn(&mut Command, Shell) -> String) -> T
where
    T: Parser,
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let mut command = command::<T>();
    match completions_request(&command, &args) {
        Some(Ok(shell)) => {
            print!("{}", scripts(&mut command, shell));
            std::process::exit(0);
        }
        Some(Err(e)) => e.exit(),
        None => {}
    }
    let matches = command.clone().get_matches_from(args);
    if completion_shell(&matches).is_some() {
        let message = "--completions SHELL is given alone";
        command.error(clap::error::ErrorKind::ArgumentConflict, message).exit();
    }
    T::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit())
}

/// `--completions SHELL` alone on the command line (so that a program's required
/// subcommand or positional arguments are not asked for), parsed with only that argument.
fn completions_request(command: &Command, args: &[std::ffi::OsString]) -> Option<Result<Shell, clap::Error>> {
    let first = args.get(1)?.to_str()?;
    let alone = (first == "--completions" && args.len() == 3)
        || (first.starts_with("--completions=") && args.len() == 2);
    if !alone {
        return None;
    }
    let only_completions = Command::new(command.get_name().to_string()).arg(completions_arg().required(true));
    Some(only_completions.try_get_matches_from(args).map(|m| completion_shell(&m).expect("required")))
}

/// `T`'s clap command with `--completions SHELL` added: what [`parse`] parses with.
pub fn command<T: Parser>() -> Command {
    T::command().arg(completions_arg())
}

fn completions_arg() -> Arg {
    Arg::new(COMPLETIONS)
        .long(COMPLETIONS)
        .value_name("SHELL")
        .value_parser(value_parser!(Shell))
        .help("Print a completion script for SHELL (bash, zsh, fish, elvish, powershell) and exit")
}

fn completion_shell(matches: &ArgMatches) -> Option<Shell> {
    matches.get_one::<Shell>(COMPLETIONS).copied()
}

/// The completion script of `command` for `shell`.
pub fn script(command: &mut Command, shell: Shell) -> String {
    let name = command.get_bin_name().unwrap_or(command.get_name()).to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, command, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{FromArgMatches, Subcommand};

    /// A program with a required subcommand and a required positional argument: the
    /// shapes in which `--completions` alone must still be accepted.
    #[derive(Parser, Debug)]
    #[command(name = "demo", version)]
    struct Demo {
        #[command(subcommand)]
        verb: Verb,
    }

    #[derive(Subcommand, Debug)]
    enum Verb {
        Add { network: String },
    }

    fn request(args: &[&str]) -> Option<Result<Shell, clap::Error>> {
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        completions_request(&command::<Demo>(), &args)
    }

    #[test]
    fn completions_alone_is_accepted_where_a_subcommand_is_required() {
        assert_eq!(request(&["demo", "--completions", "bash"]).unwrap().unwrap(), Shell::Bash);
        assert_eq!(request(&["demo", "--completions=zsh"]).unwrap().unwrap(), Shell::Zsh);
    }

    #[test]
    fn the_script_names_the_programs_subcommands() {
        let text = script(&mut command::<Demo>(), Shell::Bash);
        assert!(text.contains("demo") && text.contains("add"), "{text}");
    }

    #[test]
    fn completions_beside_other_arguments_is_not_a_request_and_unknown_shells_are_errors() {
        assert!(request(&["demo", "--completions", "bash", "add", "n"]).is_none());
        assert!(request(&["demo", "add", "n"]).is_none());
        let matches =
            command::<Demo>().try_get_matches_from(["demo", "--completions", "bash", "add", "n"]).unwrap();
        assert!(completion_shell(&matches).is_some(), "parse_from refuses this one after parsing");
        assert!(request(&["demo", "--completions", "tcsh"]).unwrap().is_err());
    }

    #[test]
    fn a_program_with_scripts_of_its_own_parses_its_arguments_the_same_way() {
        let parsed: Demo = parse_from_with_scripts(["demo", "add", "net1"], |_, _| unreachable!());
        let Verb::Add { network } = parsed.verb;
        assert_eq!(network, "net1");
    }

    #[test]
    fn the_programs_own_arguments_still_parse() {
        let matches = command::<Demo>().try_get_matches_from(["demo", "add", "net1"]).unwrap();
        let Verb::Add { network } = Demo::from_arg_matches(&matches).unwrap().verb;
        assert_eq!(network, "net1");
    }
}
