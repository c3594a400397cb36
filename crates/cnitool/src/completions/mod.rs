//! `completions` and `--completions`: shell completion scripts written from the clap command
//! that parses cnitool's arguments, so they offer exactly what the parser accepts.
//!
//! For bash, zsh and fish they are richer than clap_complete's: verbs with their summaries,
//! the options (the ones only `cnitool` itself takes, such as `--version`, before the verb
//! only), the verbs as `help`'s topics, each positional argument's possible values (the
//! shells of `completions`) or files and directories where its value hint says it is a
//! path (the namespace of `add`, `check` and `del`, `validate`'s configuration,
//! `--cache-dir`). Network names and container IDs are not completed: that would run
//! cnitool, and read the cache, on every key press. Other shells get clap_complete's script.

mod bash;
mod fish;
mod zsh;

use cni_cli::clap::{Arg, ArgAction, Command, ValueHint};
use cni_cli::Shell;

/// The completion script of `command` (cnitool's, as cni-cli parses with) for `shell`.
pub fn script(command: &mut Command, shell: Shell) -> String {
    match shell {
        Shell::Bash => bash::script(&Spec::of(command)),
        Shell::Zsh => zsh::script(&Spec::of(command)),
        Shell::Fish => fish::script(&Spec::of(command)),
        _ => cni_cli::script(command, shell),
    }
}

/// What a word may be completed to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Values {
    Nothing,
    Words(Vec<String>),
    Files,
    Directories,
    /// The verbs (`help`'s topics).
    Verbs,
}

/// A verb, and what each of its positional arguments completes to, in order.
#[derive(Debug)]
struct Verb {
    name: String,
    about: String,
    positionals: Vec<Values>,
}

#[derive(Debug)]
struct Opt {
    short: Option<char>,
    long: Option<String>,
    about: String,
    /// The value's name (`DIR`) and what it completes to; `None` for a flag.
    value: Option<(String, Values)>,
    repeatable: bool,
    /// Accepted after the verb too (the global options and `--help`), not only before it.
    after_verb: bool,
}

impl Opt {
    /// `-i`, `--ifname`: as typed.
    fn spellings(&self) -> Vec<String> {
        let short = self.short.map(|c| format!("-{c}"));
        let long = self.long.as_ref().map(|l| format!("--{l}"));
        short.into_iter().chain(long).collect()
    }
}

/// What the scripts are written from: the program's verbs and options.
#[derive(Debug)]
struct Spec {
    program: String,
    verbs: Vec<Verb>,
    options: Vec<Opt>,
}

impl Spec {
    fn of(command: &mut Command) -> Spec {
        // Building adds what clap generates: `--help`, `--version`, the `help` verb.
        command.build();
        let verbs = command
            .get_subcommands()
            .filter(|verb| !verb.is_hide_set())
            .map(|verb| Verb {
                name: verb.get_name().to_string(),
                about: first_line(verb.get_about().map(ToString::to_string)),
                // A verb with verbs under it is clap's `help`, which holds a copy of each.
                positionals: if verb.has_subcommands() {
                    vec![Values::Verbs]
                } else {
                    verb.get_positionals().map(values).collect()
                },
            })
            .collect();
        let options = command
            .get_arguments()
            .filter(|arg| !arg.is_positional() && !arg.is_hide_set())
            .map(|arg| Opt {
                short: arg.get_short(),
                long: arg.get_long().map(str::to_string),
                about: first_line(arg.get_help().map(ToString::to_string)),
                value: arg.get_action().takes_values().then(|| {
                    let name = arg.get_value_names().and_then(|n| n.first()).map(ToString::to_string);
                    (name.unwrap_or_else(|| "VALUE".into()), values(arg))
                }),
                repeatable: matches!(arg.get_action(), ArgAction::Append | ArgAction::Count),
                after_verb: arg.is_global_set() || matches!(arg.get_action(), ArgAction::Help),
            })
            .collect();
        Spec { program: command.get_name().to_string(), verbs, options }
    }

    fn verb_names(&self) -> Vec<&str> {
        self.verbs.iter().map(|v| v.name.as_str()).collect()
    }

    /// The arms of a shell `case` on the verb (bash's and zsh's) that complete its
    /// positional words: `add) case $N in 1) ACTION ;; esac ;;`, where `$N` is `position`
    /// (the word's number, `first` for the verb's first positional) and ACTION is
    /// `action(values)`, for the words that complete to something.
    fn verb_case_arms(
        &self,
        position: &str,
        first: usize,
        action: impl Fn(&Values) -> Option<String>,
    ) -> String {
        self.verbs
            .iter()
            .filter_map(|verb| {
                let arms: String = (first..)
                    .zip(&verb.positionals)
                    .filter_map(|(n, values)| Some(format!(" {n}) {} ;;", action(values)?)))
                    .collect();
                (!arms.is_empty())
                    .then(|| format!("        {}) case {position} in{arms} esac ;;\n", verb.name))
            })
            .collect()
    }

    /// Every spelling of the options that take a value.
    fn valued_spellings(&self) -> Vec<String> {
        self.options.iter().filter(|o| o.value.is_some()).flat_map(Opt::spellings).collect()
    }
}

/// What `arg`'s values complete to: its possible values, else a path where its hint says so.
fn values(arg: &Arg) -> Values {
    let words: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !words.is_empty() {
        return Values::Words(words);
    }
    match arg.get_value_hint() {
        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::ExecutablePath => Values::Files,
        ValueHint::DirPath => Values::Directories,
        _ => Values::Nothing,
    }
}

fn first_line(text: Option<String>) -> String {
    text.unwrap_or_default().lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Args;

    fn cnitool() -> Command {
        let mut command = cni_cli::command::<Args>();
        command.build();
        command
    }

    /// How each shell's script spells an option's offer (`--cache-dir`, fish `-l cache-dir`).
    fn offers_option(shell: Shell, script: &str, long: &str) -> bool {
        match shell {
            Shell::Fish => script.contains(&format!(" -l {long} ")),
            _ => {
                let spelled = format!("--{long}");
                script.match_indices(&spelled).any(|(at, _)| {
                    let next = script[at + spelled.len()..].chars().next();
                    !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                })
            }
        }
    }

    fn offers_verb(shell: Shell, script: &str, verb: &str) -> bool {
        match shell {
            Shell::Bash => script.lines().any(|l| {
                l.trim_start().starts_with("local verbs=") && l.split(['"', ' ']).any(|w| w == verb)
            }),
            Shell::Zsh => script.contains(&format!("\n    '{verb}:")),
            _ => script.contains(&format!("-n __fish_use_subcommand -a {verb} ")),
        }
    }

    /// Adding a verb, or an option anywhere in the parser, without the scripts offering it
    /// fails here: each script must offer every verb and every option every verb accepts.
    #[test]
    fn every_script_offers_every_verb_and_every_option_the_parser_accepts() {
        let command = cnitool();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = script(&mut cni_cli::command::<Args>(), shell);
            for verb in command.get_subcommands() {
                assert!(
                    offers_verb(shell, &text, verb.get_name()),
                    "{shell}: verb {}\n{text}",
                    verb.get_name()
                );
                for option in verb.get_arguments().chain(command.get_arguments()) {
                    if let Some(long) = option.get_long() {
                        assert!(
                            offers_option(shell, &text, long),
                            "{shell}: {} --{long}\n{text}",
                            verb.get_name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_spec_reads_hints_values_and_where_options_go_from_the_parser() {
        let spec = Spec::of(&mut cni_cli::command::<Args>());
        let verb = |name: &str| spec.verbs.iter().find(|v| v.name == name).unwrap();
        assert_eq!(verb("add").positionals, [Values::Nothing, Values::Files]);
        assert_eq!(verb("validate").positionals, [Values::Files]);
        assert_eq!(verb("help").positionals, [Values::Verbs]);
        let shells: Vec<String> = ["bash", "elvish", "fish", "powershell", "zsh"].map(String::from).into();
        assert_eq!(verb("completions").positionals, [Values::Words(shells.clone())]);
        let option = |long: &str| spec.options.iter().find(|o| o.long.as_deref() == Some(long)).unwrap();
        assert_eq!(option("cache-dir").value, Some(("DIR".into(), Values::Directories)));
        assert_eq!(option("completions").value, Some(("SHELL".into(), Values::Words(shells))));
        assert_eq!(option("ifname").spellings(), ["-i", "--ifname"]);
        assert!(option("keep").repeatable && option("keep").after_verb);
        assert!(
            option("help").after_verb && !option("version").after_verb && !option("completions").after_verb
        );
        assert_eq!(option("json").value, None);
    }

    #[test]
    fn other_shells_get_clap_completes_script() {
        let text = script(&mut cni_cli::command::<Args>(), Shell::Elvish);
        assert!(text.contains("cnitool") && text.contains("validate"), "{text}");
    }
}
