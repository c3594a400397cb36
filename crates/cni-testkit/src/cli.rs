//! The command-line conventions every cni-rs program keeps (see the `cni-cli` crate), checked
//! the same way for each binary: `--help` and `--version` answer on stdout with status 0,
//! `--completions SHELL` prints a script naming the program, and an unknown flag is
//! refused with status 2 and a message that names it.

use std::path::Path;
use std::process::{Command, Output};

fn run(binary: &Path, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Checks `binary`'s conventions; `subcommand` names where its flags live when it has
/// them under one (`["agent"]` for `etcd-ipam agent`), `name` is what `--version` and the
/// completion script call it.
pub fn assert_conventions(binary: &Path, subcommand: &[&str], name: &str) {
    let with =
        |extra: &[&str]| -> Vec<String> { subcommand.iter().chain(extra).map(|s| s.to_string()).collect() };
    let call = |extra: &[&str]| {
        let args = with(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        run(binary, &refs)
    };

    let help = call(&["--help"]);
    assert_eq!(help.status.code(), Some(0), "{name} --help: {help:?}");
    assert!(stdout(&help).contains("Usage:"), "{name} --help: {}", stdout(&help));
    assert!(stdout(&help).contains("--completions"), "{name} --help lists no --completions");

    let version = run(binary, &["--version"]);
    assert_eq!(version.status.code(), Some(0), "{name} --version: {version:?}");
    assert!(
        stdout(&version).starts_with(name) && stdout(&version).contains(env!("CARGO_PKG_VERSION")),
        "{name} --version: {}",
        stdout(&version)
    );

    let script = call(&["--completions", "bash"]);
    assert_eq!(script.status.code(), Some(0), "{name} --completions bash: {script:?}");
    assert!(
        stdout(&script).contains("complete") && stdout(&script).contains(name),
        "{name}: not a bash script"
    );

    let refused = call(&["--no-such-flag"]);
    assert_eq!(refused.status.code(), Some(2), "{name} --no-such-flag: {refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--no-such-flag"), "{name}: the refusal does not name the flag: {stderr}");
}
