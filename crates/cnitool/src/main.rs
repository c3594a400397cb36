//! `cnitool`: attach a network namespace to a CNI network by hand, and inspect what is
//! attached. Compatible with the reference cnitool's commands and environment variables.

#![forbid(unsafe_code)]

mod attachments;
mod cli;
mod commands;
mod completions;
#[cfg(feature = "demo")]
mod demo;
mod validate;

use cli::{Command, Invocation};
use commands::{Context, Failure};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match cli::parse(&args) {
        Ok(Invocation::Help(text)) => {
            print!("{text}");
            0
        }
        Ok(Invocation::Run(command, options)) => {
            let name = command_name(&command);
            match run(command, &Context::from_env(options)) {
                Ok(()) => 0,
                Err(Failure(message)) => {
                    eprintln!("cnitool {name}: {message}");
                    1
                }
            }
        }
        Err(usage) => {
            eprintln!("cnitool: {usage}\nRun 'cnitool --help' for usage.");
            2
        }
    };
    std::process::exit(code);
}

/// Dispatches a parsed command. A new subcommand adds a `cli::Command` variant, its parsing
/// in `cli::parse_command`, and an arm here calling its own module.
fn run(command: Command, ctx: &Context) -> Result<(), Failure> {
    match command {
        Command::Add { network, netns } => commands::add(ctx, &network, &netns),
        Command::Check { network, netns } => commands::check(ctx, &network, &netns),
        Command::Del { network, netns } => commands::del(ctx, &network, &netns),
        Command::Gc { network } => commands::gc(ctx, &network),
        Command::Status { network } => commands::status(ctx, &network),
        Command::List { network } => attachments::list(ctx, network.as_deref()),
        Command::Inspect { container } => attachments::inspect(ctx, &container),
        Command::Completions { shell } => {
            print!("{}", completions::script(shell));
            Ok(())
        }
        Command::Validate { target } => validate::validate(ctx, &target),
        Command::Version { plugin_type } => commands::version(ctx, plugin_type.as_deref()),
        #[cfg(feature = "demo")]
        Command::Demo { network } => demo::demo(ctx, network.as_deref()),
        #[cfg(not(feature = "demo"))]
        Command::Demo { .. } => Err(Failure("this cnitool was built without the `demo` feature".into())),
    }
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Add { .. } => "add",
        Command::Check { .. } => "check",
        Command::Del { .. } => "del",
        Command::Gc { .. } => "gc",
        Command::Status { .. } => "status",
        Command::List { .. } => "list",
        Command::Inspect { .. } => "inspect",
        Command::Completions { .. } => "completions",
        Command::Validate { .. } => "validate",
        Command::Version { .. } => "version",
        Command::Demo { .. } => "demo",
    }
}
