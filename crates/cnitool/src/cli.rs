//! Command-line parsing (hand-rolled: the tool starts in a millisecond and needs nothing
//! more than positional arguments and a few options).

use std::time::Duration;

pub const USAGE: &str = "\
cnitool: attach a network namespace to a CNI network by hand, and inspect attachments

Usage:
  cnitool add      <network> <netns>     run ADD through the network's plugins, print the result
  cnitool check    <network> <netns>     run CHECK against the cached ADD result
  cnitool del      <network> <netns>     run DEL (in reverse order, with the cached result)
  cnitool gc       <network> [<netns>]   DEL cached attachments not kept, then GC every plugin
  cnitool status   <network> [<netns>]   ask every plugin whether it is ready for ADDs
  cnitool list     [<network>]           print the cached attachments, with their IPs, as JSON
  cnitool inspect  <container>           print everything cached about one container's attachments
  cnitool validate <conflist|dir|network> [--json]
                                         report unknown keys, bad values, missing plugins,
                                         unsupported versions, unread capabilities
  cnitool version  [<plugin-type>]       print a plugin's VERSION answer, or cnitool's own
  cnitool demo     [<network>]           attach a throwaway namespace, prove it works, detach
  cnitool completions <shell>            print a completion script for bash, zsh or fish
  cnitool help     [<command>]           this text, or a command's (also <command> --help)

Options:
  -i, --ifname NAME     interface name inside the container (env CNI_IFNAME; default eth0)
      --cache-dir DIR   result cache directory (env CNI_CACHE_DIR; default /var/lib/cni)
      --timeout SECS    time limit of the whole operation (default 60)
      --keep ID[:IF]    gc: keep this attachment (container ID, interface; repeatable)
      --json            validate: print the findings as a JSON array
  -h, --help            show help

Environment:
  NETCONFPATH   directory of *.conflist / *.conf / *.json files (default /etc/cni/net.d)
  CNI_PATH      colon-separated plugin directories
  CAP_ARGS      JSON object of capability arguments, e.g. {\"portMappings\":[...]}
  CNI_ARGS      plugin arguments, strictly KEY=VALUE;KEY=VALUE
  CNI_IFNAME    interface name (overridden by --ifname)
  CNI_CACHE_DIR result cache directory (overridden by --cache-dir)

The container ID is \"cnitool-\" + the first 20 hex digits of sha512(<absolute netns path>),
as the reference cnitool derives it. Results and listings are printed as JSON on stdout;
errors go to stderr with exit status 1 (2 for usage errors).
";

/// Per-command help.
pub fn command_help(command: &str) -> Option<&'static str> {
    Some(match command {
        "add" => "Usage: cnitool add <network> <netns> [-i IFNAME] [--cache-dir DIR] [--timeout SECS]\n\nRuns ADD through every plugin of <network> (found in NETCONFPATH) for the namespace\nat <netns>, caches the result and prints it as JSON.\nUses CNI_PATH, CAP_ARGS, CNI_ARGS, CNI_IFNAME, CNI_CACHE_DIR.\n",
        "check" => "Usage: cnitool check <network> <netns> [-i IFNAME] [--cache-dir DIR] [--timeout SECS]\n\nRuns CHECK through every plugin with the cached ADD result. Needs cniVersion 0.4.0 or\nnewer; does nothing when the list sets disableCheck.\n",
        "del" => "Usage: cnitool del <network> <netns> [-i IFNAME] [--cache-dir DIR] [--timeout SECS]\n\nRuns DEL through the plugins in reverse order with the cached ADD result, then removes\nthe cache entry.\n",
        "gc" => "Usage: cnitool gc <network> [<netns>] [--keep CONTAINERID[:IFNAME]]... [--cache-dir DIR]\n\nRuns DEL for every cached attachment of <network> that is not kept, then (cniVersion\n1.1.0 and newer) GC to every plugin with the kept attachments as valid. Without --keep\nevery cached attachment of the network is deleted, as with the reference cnitool.\n<netns> is accepted for compatibility and ignored.\n",
        "status" => "Usage: cnitool status <network> [<netns>]\n\nRuns STATUS on every plugin (cniVersion 1.1.0 and newer; older lists are always ready).\n<netns> is accepted for compatibility and ignored.\n",
        "list" => "Usage: cnitool list [<network>] [--cache-dir DIR]\n\nPrints the cached attachments (all, or those of <network>) as a JSON array: network,\ncontainer ID, interface, namespace, the addresses of the cached result (`ips`), the\nCNI_ARGS and capability arguments, and the result itself.\n",
        "inspect" => "Usage: cnitool inspect <container> [--cache-dir DIR]\n\nPrints, as a JSON array, every cached attachment of one container: what `list` shows,\nplus the network configuration it was made with and the cache file. <container> is a\ncontainer ID, an unambiguous prefix of one, or a namespace path (as given to add).\n",
        "completions" => "Usage: cnitool completions <bash|zsh|fish>\n\nPrints a completion script for the shell: commands, options, help topics, shells.\n  bash: source <(cnitool completions bash)\n  zsh:  cnitool completions zsh > \"${fpath[1]}/_cnitool\"\n  fish: cnitool completions fish > ~/.config/fish/completions/cnitool.fish\n",
        "validate" => "Usage: cnitool validate <conflist file | directory | network> [--json]\n\nLoads the configuration file(s) as libcni does (a directory: every *.conflist, *.conf,\n*.json in it; a bare name: that network in NETCONFPATH) and reports, per plugin:\n  error    the plugin or its IPAM plugin is not in CNI_PATH, or does not support the\n           list's cniVersion (each plugin is asked VERSION: the only thing run);\n  error    a key the plugin does not read, with a did-you-mean (cni-rs plugins);\n  error    a value the plugin refuses (its own ADD validation, run dry: wrong types,\n           out of range), with the plugin's CNI error (cni-rs plugins);\n  warning  a capability enabled that the plugin never reads (cni-rs plugins);\n  note     a key spelt in another case than documented (accepted).\nPlugins that are not cni-rs's get the CNI_PATH and version checks only. Nothing on the\nnetwork is touched. --json prints the findings as a JSON array of objects (file,\nnetwork, pluginIndex, pluginType, severity, key, message, suggestion).\nExit status: 0 no errors (warnings and notes allowed), 1 errors, 2 usage.\n",
        "version" => "Usage: cnitool version [<plugin-type>]\n\nWith a plugin type: runs VERSION on that plugin (found in CNI_PATH) and prints its\nanswer. Without: prints cnitool's version and the spec versions it speaks.\n",
        "demo" => "Usage: cnitool demo [<network>]\n\nCreates a throwaway container namespace and a throwaway host-side namespace, attaches\nthe container to <network> (from NETCONFPATH) or to an embedded default network\n(bridge + host-local + portmap + firewall + tuning, like podman's), prints the result,\nproves connectivity with a TCP connection from the container to the host side of the\nbridge (and through the port mapping), runs CHECK, detaches and removes everything.\nThe machine's own network is never touched. Needs root. Plugins come from CNI_PATH,\nelse from the cni-plugins binary next to cnitool, else /opt/cni/bin.\n",
        "help" => "Usage: cnitool help [<command>]\n",
        _ => return None,
    })
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Add { network: String, netns: String },
    Check { network: String, netns: String },
    Del { network: String, netns: String },
    Gc { network: String },
    Status { network: String },
    List { network: Option<String> },
    Inspect { container: String },
    Completions { shell: Shell },
    Validate { target: String },
    Version { plugin_type: Option<String> },
    Demo { network: Option<String> },
}

/// The shells `completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    pub const NAMES: [&'static str; 3] = ["bash", "zsh", "fish"];

    fn parse(name: &str) -> Option<Shell> {
        match name {
            "bash" => Some(Shell::Bash),
            "zsh" => Some(Shell::Zsh),
            "fish" => Some(Shell::Fish),
            _ => None,
        }
    }
}

/// Every command with its one-line summary, in the order `--help` lists them: what the
/// completion scripts offer. A test keeps it in step with USAGE and the parser.
pub const COMMANDS: &[(&str, &str)] = &[
    ("add", "run ADD through the network's plugins"),
    ("check", "run CHECK against the cached ADD result"),
    ("del", "run DEL with the cached result"),
    ("gc", "DEL cached attachments not kept, then GC every plugin"),
    ("status", "ask every plugin whether it is ready"),
    ("list", "print the cached attachments with their IPs"),
    ("inspect", "print everything cached about one container"),
    ("validate", "report unknown keys, bad values, missing plugins, unsupported versions"),
    ("version", "print a plugin's VERSION answer, or cnitool's own"),
    ("demo", "attach a throwaway namespace, prove it works, detach"),
    ("completions", "print a completion script for bash, zsh or fish"),
    ("help", "show help"),
];

/// Every option: its names, whether it takes a value, and a summary (for completions).
pub const OPTIONS: &[(&[&str], bool, &str)] = &[
    (&["-i", "--ifname"], true, "interface name inside the container"),
    (&["--cache-dir"], true, "result cache directory"),
    (&["--timeout"], true, "time limit of the whole operation, in seconds"),
    (&["--keep"], true, "gc: keep this attachment (ID[:IF])"),
    (&["--json"], false, "validate: print the findings as a JSON array"),
    (&["-h", "--help"], false, "show help"),
];

/// Options that apply to several commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    pub ifname: Option<String>,
    pub cache_dir: Option<String>,
    pub timeout: Option<Duration>,
    /// gc: attachments to keep, as (container ID, interface name or None for the default).
    pub keep: Vec<(String, Option<String>)>,
    /// validate: findings as JSON.
    pub json: bool,
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Help(&'static str),
    Run(Command, Options),
}

/// Parses the arguments after the program name. The error is a usage message.
pub fn parse(args: &[String]) -> Result<Invocation, String> {
    let mut positional = Vec::new();
    let mut options = Options::default();
    let mut help = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline.clone().or_else(|| iter.next().cloned()).ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "-h" | "--help" => help = true,
            "--json" => options.json = true,
            "-i" | "--ifname" => options.ifname = Some(value(flag)?),
            "--cache-dir" => options.cache_dir = Some(value(flag)?),
            "--timeout" => {
                let text = value(flag)?;
                let secs: f64 =
                    text.parse().map_err(|_| format!("--timeout: {text:?} is not a number of seconds"))?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err(format!("--timeout: {text:?} must be positive"));
                }
                options.timeout = Some(Duration::from_secs_f64(secs));
            }
            "--keep" => {
                let text = value(flag)?;
                let (id, ifname) = match text.split_once(':') {
                    Some((id, ifname)) => (id.to_string(), Some(ifname.to_string())),
                    None => (text, None),
                };
                options.keep.push((id, ifname));
            }
            "--" => positional.extend(iter.by_ref().cloned()),
            _ if flag.starts_with('-') && flag.len() > 1 => return Err(format!("unknown option {flag}")),
            _ => positional.push(arg.clone()),
        }
    }
    let Some((name, rest)) = positional.split_first() else {
        return if help { Ok(Invocation::Help(USAGE)) } else { Err("missing command".into()) };
    };
    if help {
        return command_help(name).map(Invocation::Help).ok_or_else(|| format!("unknown command {name:?}"));
    }
    if name == "help" {
        return match rest.first() {
            None => Ok(Invocation::Help(USAGE)),
            Some(c) => command_help(c).map(Invocation::Help).ok_or_else(|| format!("unknown command {c:?}")),
        };
    }
    parse_command(name, rest).map(|command| Invocation::Run(command, options))
}

fn parse_command(name: &str, args: &[String]) -> Result<Command, String> {
    let arity = |min: usize, max: usize| -> Result<(), String> {
        if args.len() < min || args.len() > max {
            let expected = if min == max { format!("{min}") } else { format!("{min} to {max}") };
            return Err(format!("{name} takes {expected} arguments, got {}", args.len()));
        }
        Ok(())
    };
    let arg = |i: usize| args[i].clone();
    Ok(match name {
        "add" | "check" | "del" => {
            arity(2, 2)?;
            let (network, netns) = (arg(0), arg(1));
            match name {
                "add" => Command::Add { network, netns },
                "check" => Command::Check { network, netns },
                _ => Command::Del { network, netns },
            }
        }
        "gc" => {
            arity(1, 2)?;
            Command::Gc { network: arg(0) }
        }
        "status" => {
            arity(1, 2)?;
            Command::Status { network: arg(0) }
        }
        "list" => {
            arity(0, 1)?;
            Command::List { network: args.first().cloned() }
        }
        "inspect" => {
            arity(1, 1)?;
            Command::Inspect { container: arg(0) }
        }
        "completions" => {
            arity(1, 1)?;
            let shell = Shell::parse(&args[0])
                .ok_or_else(|| format!("completions: unknown shell {:?} (bash, zsh or fish)", args[0]))?;
            Command::Completions { shell }
        }
        "validate" => {
            arity(1, 1)?;
            Command::Validate { target: arg(0) }
        }
        "version" => {
            arity(0, 1)?;
            Command::Version { plugin_type: args.first().cloned() }
        }
        "demo" => {
            arity(0, 1)?;
            Command::Demo { network: args.first().cloned() }
        }
        other => return Err(format!("unknown command {other:?}")),
    })
}

/// `CNI_ARGS`, strictly as the reference cnitool reads it: `K=V` pairs separated by `;`,
/// each with exactly one `=` and a non-empty key.
pub fn parse_cni_args(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(';')
        .map(|pair| match pair.split('=').collect::<Vec<_>>()[..] {
            [key, value] if !key.is_empty() => Ok((key.to_string(), value.to_string())),
            _ => Err(format!("invalid CNI_ARGS pair {pair:?}: expected KEY=VALUE")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Invocation, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn commands_and_options() {
        let Invocation::Run(cmd, opts) = parse_strs(&["add", "net", "/run/netns/x", "-i", "eth1"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(cmd, Command::Add { network: "net".into(), netns: "/run/netns/x".into() });
        assert_eq!(opts.ifname.as_deref(), Some("eth1"));
        let Invocation::Run(cmd, opts) =
            parse_strs(&["gc", "net", "--keep", "c1", "--keep=c2:eth1", "--timeout", "1.5"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(cmd, Command::Gc { network: "net".into() });
        assert_eq!(opts.keep, vec![("c1".into(), None), ("c2".into(), Some("eth1".into()))]);
        assert_eq!(opts.timeout, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn help_everywhere_and_usage_errors() {
        assert_eq!(parse_strs(&["--help"]).unwrap(), Invocation::Help(USAGE));
        assert_eq!(parse_strs(&["help"]).unwrap(), Invocation::Help(USAGE));
        for (cmd, _) in COMMANDS {
            let Invocation::Help(text) = parse_strs(&[cmd, "--help"]).unwrap() else { panic!("{cmd}") };
            assert!(text.starts_with(&format!("Usage: cnitool {cmd}")), "{cmd}");
            assert_eq!(parse_strs(&["help", cmd]).unwrap(), Invocation::Help(text));
        }
        assert!(parse_strs(&[]).is_err());
        assert!(parse_strs(&["add", "net"]).unwrap_err().contains("2 arguments"));
        assert!(parse_strs(&["frobnicate"]).is_err());
        assert!(parse_strs(&["add", "n", "p", "--bogus"]).is_err());
        assert!(parse_strs(&["add", "n", "p", "--timeout", "0"]).is_err());
        assert!(parse_strs(&["add", "n", "p", "-i"]).is_err());
    }

    /// COMMANDS (what completions offer) is exactly what USAGE lists and the parser knows.
    #[test]
    fn the_command_table_matches_usage_and_parser() {
        let listed: Vec<&str> = USAGE
            .lines()
            .filter_map(|l| l.strip_prefix("  cnitool "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let table: Vec<&str> = COMMANDS.iter().map(|(name, _)| *name).collect();
        assert_eq!(listed, table);
        for name in table.iter().filter(|n| **n != "help") {
            let err = parse_strs(&[name, "a", "b", "c", "d"]).unwrap_err();
            assert!(err.contains("arguments"), "{name}: {err}");
        }
        for (names, takes_value, _) in OPTIONS {
            for name in *names {
                assert!(USAGE.contains(name), "{name}");
                let parsed = parse_strs(&["list", name, "1"]);
                assert!(!parsed.as_ref().is_err_and(|e| e.contains("unknown option")), "{name}");
                assert_eq!(parse_strs(&["list", name]).is_err(), *takes_value, "{name}");
            }
        }
    }

    #[test]
    fn inspect_and_completions_arguments() {
        let Invocation::Run(cmd, _) = parse_strs(&["inspect", "abc"]).unwrap() else { panic!() };
        assert_eq!(cmd, Command::Inspect { container: "abc".into() });
        let Invocation::Run(cmd, _) = parse_strs(&["completions", "fish"]).unwrap() else { panic!() };
        assert_eq!(cmd, Command::Completions { shell: Shell::Fish });
        assert!(parse_strs(&["completions", "tcsh"]).unwrap_err().contains("unknown shell"));
        assert!(parse_strs(&["inspect"]).is_err());
    }

    #[test]
    fn cni_args_are_strict() {
        assert_eq!(
            parse_cni_args("IgnoreUnknown=1;IP=10.0.0.2").unwrap(),
            vec![("IgnoreUnknown".into(), "1".into()), ("IP".into(), "10.0.0.2".into())]
        );
        assert!(parse_cni_args("").unwrap().is_empty());
        for bad in ["A", "A=1;", "A=1=2", "=1", "A=1;;B=2"] {
            assert!(parse_cni_args(bad).is_err(), "{bad}");
        }
    }
}
