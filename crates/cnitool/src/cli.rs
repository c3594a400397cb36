//! cnitool's command line, declared with clap and parsed through cni-cli like every cni-rs
//! program's. The completion scripts (`completions`) are written from this declaration:
//! verbs, their summaries, options, and what each argument's values are (the value hints
//! and possible values below), so a verb or option added here is offered by every shell.

use cni_cli::clap::{self, Parser, Subcommand, ValueHint};
use cni_cli::Shell;
use std::time::Duration;

/// What `--help` adds after the verbs and options.
const AFTER_HELP: &str = "\
Environment:
  NETCONFPATH    directory of *.conflist / *.conf / *.json files (default /etc/cni/net.d)
  CNI_PATH       colon-separated plugin directories
  CAP_ARGS       JSON object of capability arguments, e.g. {\"portMappings\":[...]}
  CNI_ARGS       plugin arguments, strictly KEY=VALUE;KEY=VALUE
  CNI_IFNAME     interface name (overridden by --ifname)
  CNI_CACHE_DIR  result cache directory (overridden by --cache-dir)

The container ID is \"cnitool-\" + the first 20 hex digits of sha512(<absolute netns path>),
as the reference cnitool derives it. Results and listings are printed as JSON on stdout;
errors go to stderr with exit status 1 (2 for usage errors).
Run 'cnitool help <command>' for a command's details.";

/// Attach a network namespace to a CNI network by hand, and inspect attachments
#[derive(Parser, Debug)]
#[command(name = "cnitool", version, after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    pub options: Options,
    #[command(subcommand)]
    pub verb: Verb,
}

/// The options, accepted before or after any verb (as cnitool always has); each says which
/// verbs read it.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// Interface name inside the container (default: CNI_IFNAME, else eth0)
    #[arg(short, long, global = true, value_name = "NAME")]
    pub ifname: Option<String>,
    /// Result cache directory (default: CNI_CACHE_DIR, else /var/lib/cni)
    #[arg(long, global = true, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub cache_dir: Option<String>,
    /// Time limit of the whole operation, in seconds (default 60)
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// gc: keep this attachment (container ID, and interface when not the default;
    /// repeatable)
    #[arg(long, global = true, value_name = "ID[:IF]", value_parser = parse_keep)]
    pub keep: Vec<(String, Option<String>)>,
    /// validate: print the findings as a JSON array
    #[arg(long, global = true)]
    pub json: bool,
    /// handover: whose plugins take over (the Go reference plugins)
    #[arg(long, global = true, value_enum, value_name = "PLUGINS")]
    pub to: Option<HandoverTarget>,
    /// handover: print the iptables-restore scripts and the chains of ours that would go;
    /// change nothing
    #[arg(long, global = true)]
    pub dry_run: bool,
}

/// What the user asked for, in the order `--help` lists it.
#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum Verb {
    /// Run ADD through the network's plugins, print the result
    ///
    /// Runs ADD through every plugin of NETWORK (found in NETCONFPATH) for the namespace at
    /// NETNS, caches the result and prints it as JSON. Uses CNI_PATH, CAP_ARGS, CNI_ARGS,
    /// CNI_IFNAME, CNI_CACHE_DIR.
    Add {
        /// The network's name (the `name` of a file in NETCONFPATH)
        network: String,
        /// The namespace's path (/run/netns/NAME, /proc/PID/ns/net)
        #[arg(value_hint = ValueHint::FilePath)]
        netns: String,
    },
    /// Run CHECK against the cached ADD result
    ///
    /// Runs CHECK through every plugin with the cached ADD result. Needs cniVersion 0.4.0 or
    /// newer; does nothing when the list sets disableCheck.
    Check {
        /// The network's name (the `name` of a file in NETCONFPATH)
        network: String,
        /// The namespace's path (/run/netns/NAME, /proc/PID/ns/net)
        #[arg(value_hint = ValueHint::FilePath)]
        netns: String,
    },
    /// Run DEL (in reverse order, with the cached result)
    ///
    /// Runs DEL through the plugins in reverse order with the cached ADD result, then
    /// removes the cache entry.
    Del {
        /// The network's name (the `name` of a file in NETCONFPATH)
        network: String,
        /// The namespace's path (/run/netns/NAME, /proc/PID/ns/net)
        #[arg(value_hint = ValueHint::FilePath)]
        netns: String,
    },
    /// DEL cached attachments not kept, then GC every plugin
    ///
    /// Runs DEL for every cached attachment of NETWORK that is not kept (--keep), then
    /// (cniVersion 1.1.0 and newer) GC to every plugin with the kept attachments as valid.
    /// Without --keep every cached attachment of the network is deleted, as with the
    /// reference cnitool.
    Gc {
        /// The network's name (the `name` of a file in NETCONFPATH)
        network: String,
        /// Accepted for compatibility with the reference cnitool, and ignored
        #[arg(value_hint = ValueHint::FilePath)]
        netns: Option<String>,
    },
    /// Ask every plugin whether it is ready for ADDs
    ///
    /// Runs STATUS on every plugin (cniVersion 1.1.0 and newer; older lists are always
    /// ready).
    Status {
        /// The network's name (the `name` of a file in NETCONFPATH)
        network: String,
        /// Accepted for compatibility with the reference cnitool, and ignored
        #[arg(value_hint = ValueHint::FilePath)]
        netns: Option<String>,
    },
    /// Print the cached attachments, with their IPs, as JSON
    ///
    /// Prints the cached attachments (all, or those of NETWORK) as a JSON array: network,
    /// container ID, interface, namespace, the addresses of the cached result (`ips`), the
    /// CNI_ARGS and capability arguments, and the result itself.
    List {
        /// Only this network's attachments
        network: Option<String>,
    },
    /// Print everything cached about one container's attachments
    ///
    /// Prints, as a JSON array, every cached attachment of one container: what `list`
    /// shows, plus the network configuration it was made with and the cache file. CONTAINER
    /// is a container ID, an unambiguous prefix of one, or a namespace path (as given to
    /// add).
    Inspect {
        /// A container ID, an unambiguous prefix of one, or a namespace path
        container: String,
    },
    /// Report unknown keys, bad values, missing plugins, unsupported versions
    ///
    /// Loads the configuration file(s) as libcni does (a directory: every *.conflist, *.conf,
    /// *.json in it; a bare name: that network in NETCONFPATH) and reports, per plugin:
    ///   error    the plugin or its IPAM plugin is not in CNI_PATH, or does not support the
    ///            list's cniVersion (each plugin is asked VERSION: the only thing run);
    ///   error    a key the plugin does not read, with a did-you-mean (cni-rs plugins);
    ///   error    a value the plugin refuses (its own ADD validation, run dry: wrong types,
    ///            out of range), with the plugin's CNI error (cni-rs plugins);
    ///   warning  a capability enabled that the plugin never reads (cni-rs plugins);
    ///   note     a key spelt in another case than documented (accepted).
    /// Plugins that are not cni-rs's get the CNI_PATH and version checks only. Nothing on
    /// the network is touched. --json prints the findings as a JSON array of objects (file,
    /// network, pluginIndex, pluginType, severity, key, message, suggestion).
    /// Exit status: 0 no errors (warnings and notes allowed), 1 errors, 2 usage.
    #[command(verbatim_doc_comment)]
    Validate {
        /// A conflist file, a directory of configuration files, or a network's name
        #[arg(value_name = "CONFLIST|DIR|NETWORK", value_hint = ValueHint::AnyPath)]
        target: String,
    },
    /// Print a plugin's VERSION answer, or cnitool's own
    ///
    /// With a plugin type: runs VERSION on that plugin (found in CNI_PATH) and prints its
    /// answer. Without: prints cnitool's version and the spec versions it speaks, as JSON.
    Version {
        /// A plugin's type: its executable's name in CNI_PATH
        plugin_type: Option<String>,
    },
    /// Hand live attachments over to the reference plugins, before swapping back to them
    ///
    /// For every attachment in the result cache (or NETWORK's), writes the iptables state
    /// the Go reference plugins (Debian's 1.1.1) would have made for it (bridge/ptp ipMasq
    /// chains, portmap's hostport chains, the firewall's CNI-FORWARD rules), then removes
    /// the nftables state of ours, so that the reference's DEL and CHECK succeed and host
    /// ports keep answering once its binaries are back. One iptables-save and one
    /// iptables-restore per address family; running it again changes nothing. Needs root.
    Handover {
        /// Only this network's attachments
        network: Option<String>,
    },
    /// Attach a throwaway namespace, prove it works, detach
    ///
    /// Creates a throwaway container namespace and a throwaway host-side namespace, attaches
    /// the container to NETWORK (from NETCONFPATH) or to an embedded default network
    /// (bridge + host-local + portmap + firewall + tuning, like podman's), prints the
    /// result, proves connectivity with a TCP connection from the container to the host side
    /// of the bridge (and through the port mapping), runs CHECK, detaches and removes
    /// everything. The machine's own network is never touched. Needs root. Plugins come
    /// from CNI_PATH, else from the cni-plugins binary next to cnitool, else /opt/cni/bin.
    Demo {
        /// A network from NETCONFPATH instead of the embedded one
        network: Option<String>,
    },
    /// Print a completion script for SHELL (the same as --completions SHELL)
    ///
    /// Prints a completion script for the shell: verbs, options, help topics, shells, files
    /// where a verb takes a path. `cnitool --completions SHELL` prints the same.
    ///   bash: source <(cnitool completions bash)
    ///   zsh:  cnitool completions zsh > "${fpath[1]}/_cnitool"
    ///   fish: cnitool completions fish > ~/.config/fish/completions/cnitool.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell the script is for
        shell: Shell,
    },
}

/// The plugins `handover` prepares the node for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandoverTarget {
    /// The Go reference plugins (containernetworking-plugins 1.1.1's iptables layout)
    #[default]
    Reference,
}

impl Verb {
    /// The verb as typed, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Add { .. } => "add",
            Verb::Check { .. } => "check",
            Verb::Del { .. } => "del",
            Verb::Gc { .. } => "gc",
            Verb::Status { .. } => "status",
            Verb::List { .. } => "list",
            Verb::Inspect { .. } => "inspect",
            Verb::Validate { .. } => "validate",
            Verb::Version { .. } => "version",
            Verb::Handover { .. } => "handover",
            Verb::Demo { .. } => "demo",
            Verb::Completions { .. } => "completions",
        }
    }
}

/// `--timeout`: a positive, finite number of seconds (fractions allowed).
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| "not a number of seconds".to_string())?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err("must be a positive number of seconds".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `--keep ID[:IF]`: a container ID, and the interface when it is not the default.
fn parse_keep(text: &str) -> Result<(String, Option<String>), String> {
    Ok(match text.split_once(':') {
        Some((id, ifname)) => (id.to_string(), Some(ifname.to_string())),
        None => (text.to_string(), None),
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
    use cni_cli::clap::error::ErrorKind;
    use cni_cli::clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("cnitool").chain(args.iter().copied()))
    }

    #[test]
    fn the_declaration_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn verbs_and_options_anywhere_on_the_line() {
        let args = parse(&["add", "net", "/run/netns/x", "-i", "eth1"]).unwrap();
        assert_eq!(args.verb, Verb::Add { network: "net".into(), netns: "/run/netns/x".into() });
        assert_eq!(args.options.ifname.as_deref(), Some("eth1"));
        let args = parse(&["--ifname=eth2", "--cache-dir", "/tmp/c", "check", "net", "p"]).unwrap();
        assert_eq!(args.options.ifname.as_deref(), Some("eth2"));
        assert_eq!(args.options.cache_dir.as_deref(), Some("/tmp/c"));
        let args =
            parse(&["gc", "net", "/run/netns/x", "--keep", "c1", "--keep=c2:eth1", "--timeout", "1.5"])
                .unwrap();
        assert_eq!(args.verb, Verb::Gc { network: "net".into(), netns: Some("/run/netns/x".into()) });
        assert_eq!(args.options.keep, vec![("c1".into(), None), ("c2".into(), Some("eth1".into()))]);
        assert_eq!(args.options.timeout, Some(Duration::from_millis(1500)));
        let args = parse(&["validate", "--json", "--", "-odd-name"]).unwrap();
        assert_eq!(args.verb, Verb::Validate { target: "-odd-name".into() });
        assert!(args.options.json);
        let args = parse(&["completions", "fish"]).unwrap();
        assert_eq!(args.verb, Verb::Completions { shell: Shell::Fish });
    }

    #[test]
    fn usage_errors_name_what_is_wrong() {
        let kind = |args: &[&str]| parse(args).unwrap_err().kind();
        let no_verb = parse(&[]).unwrap_err();
        assert_eq!(no_verb.kind(), ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand);
        assert_eq!(no_verb.exit_code(), 2, "help on stderr, as a usage error");
        assert_eq!(kind(&["add", "net"]), ErrorKind::MissingRequiredArgument);
        assert_eq!(kind(&["add", "a", "b", "c"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["frobnicate"]), ErrorKind::InvalidSubcommand);
        assert_eq!(kind(&["add", "n", "p", "--bogus"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["add", "n", "p", "-i"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["completions", "tcsh"]), ErrorKind::InvalidValue);
        for bad in ["0", "-1", "inf", "NaN", "soon"] {
            let err = parse(&["add", "n", "p", &format!("--timeout={bad}")]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}");
            assert!(err.to_string().contains("--timeout"), "{err}");
        }
    }

    #[test]
    fn help_for_cnitool_and_for_each_verb() {
        let err = parse(&["--help"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DisplayHelp);
        assert!(err.to_string().contains("NETCONFPATH"), "{err}");
        for verb in Args::command().get_subcommands() {
            let name = verb.get_name();
            for args in [vec![name, "--help"], vec!["help", name]] {
                let text = parse(&args).unwrap_err().to_string();
                assert!(text.contains(&format!("Usage: cnitool {name}")), "{args:?}: {text}");
            }
        }
    }

    /// docs/plugins/cnitool.md documents exactly the verbs and the flags cnitool parses
    /// (with those clap and cni-cli add: `help`, `--help`, `--version`, `--completions`).
    #[test]
    fn the_page_documents_exactly_the_verbs_and_flags() {
        let mut command = cni_cli::command::<Args>();
        command.build();
        let manifest_dir = env!("CARGO_MANIFEST_DIR");
        cni_testkit::docs::assert_page_documents_exactly_the_flags(
            manifest_dir,
            "cnitool.md",
            &command,
            "--",
        );
        let page = cni_testkit::docs::read_page(manifest_dir, "cnitool.md").unwrap();
        let verbs = command.get_subcommands().map(|verb| verb.get_name().to_string()).collect();
        let problems = cni_testkit::docs::compare(
            "cnitool.md",
            "verb",
            &verbs,
            &cni_testkit::docs::table_keys(&page, "Verbs"),
        );
        assert!(problems.is_empty(), "{}", problems.join("\n"));
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
