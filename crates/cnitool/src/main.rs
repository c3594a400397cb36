//! `cnitool`: attach a network namespace to a CNI network by hand, and inspect what is
//! attached. Compatible with the reference cnitool's commands and environment variables.

mod attachments;
mod cli;
mod commands;
mod completions;
#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "handover")]
mod handover;
mod validate;

use cli::{Args, Verb};
use commands::{Context, Failure};

fn main() {
    let Args { options, verb } = cni_cli::parse_with_scripts(completions::script);
    let name = verb.name();
    if let Err(Failure(message)) = run(verb, &Context::from_env(options)) {
        eprintln!("cnitool {name}: {message}");
        std::process::exit(1);
    }
}

/// Dispatches a parsed verb. A new verb adds a `cli::Verb` variant (the parser, the help
/// and the completion scripts follow from it) and an arm here calling its own module.
fn run(verb: Verb, ctx: &Context) -> Result<(), Failure> {
    match verb {
        Verb::Add { network, netns } => commands::add(ctx, &network, &netns),
        Verb::Check { network, netns } => commands::check(ctx, &network, &netns),
        Verb::Del { network, netns } => commands::del(ctx, &network, &netns),
        Verb::Gc { network, netns: _ } => commands::gc(ctx, &network),
        Verb::Status { network, netns: _ } => commands::status(ctx, &network),
        Verb::List { network } => attachments::list(ctx, network.as_deref()),
        Verb::Inspect { container } => attachments::inspect(ctx, &container),
        Verb::Validate { target } => validate::validate(ctx, &target),
        Verb::Version { plugin_type } => commands::version(ctx, plugin_type.as_deref()),
        #[cfg(feature = "handover")]
        Verb::Handover { network } => handover::handover(ctx, network.as_deref()),
        #[cfg(not(feature = "handover"))]
        Verb::Handover { .. } => Err(Failure("this cnitool was built without the `handover` feature".into())),
        #[cfg(feature = "demo")]
        Verb::Demo { network } => demo::demo(ctx, network.as_deref()),
        #[cfg(not(feature = "demo"))]
        Verb::Demo { .. } => Err(Failure("this cnitool was built without the `demo` feature".into())),
        Verb::Completions { shell } => {
            print!("{}", completions::script(&mut cni_cli::command::<Args>(), shell));
            Ok(())
        }
    }
}
