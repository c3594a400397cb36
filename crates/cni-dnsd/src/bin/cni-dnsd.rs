//! `cni-dnsd`: the resolver of the `dnsname` plugin. Started on demand by the plugin (or by
//! systemd through `cni-dnsd.socket`); see the crate documentation.

#![forbid(unsafe_code)]

use cni_dns::StateDir;
use cni_dnsd::server::{log, Limits, Resolver, Settings};
use cni_metrics::prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: cni-dnsd [flags]
Answers container name lookups for the dnsname plugin's networks, on each network's gateway
address (at the port the network's record names: 1053 behind the plugin's redirect of port
53, or 53 itself), and forwards other names upstream.

  --state-dir DIR    the records the plugin writes [/run/cni/dnsname]; the control socket
                     is DIR/dnsd.sock (with systemd socket activation, the passed socket)
  --resolv-conf PATH upstream servers for networks without their own [/etc/resolv.conf]
  --pidfile PATH     write the pid there
  --max-forwards N   forwarded queries in flight at most [256]
  --max-tcp N        TCP clients at most [64]
  --metrics-address IP:PORT
                     serve /healthz and /metrics there [off]
  -h, --help         this text";

/// Every so often the records are read again even without a request, so a notification
/// lost to a crash between a plugin's write and its request is made up for.
const RESCAN: Duration = Duration::from_secs(30);

struct Args {
    settings: Settings,
    pid_file: Option<PathBuf>,
    metrics: Option<SocketAddr>,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut state = PathBuf::from(cni_dns::DEFAULT_STATE_DIR);
    let mut resolv_conf = PathBuf::from("/etc/resolv.conf");
    let mut pid_file = None;
    let mut metrics = None;
    let mut limits = Limits::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value =
            || inline.clone().or_else(|| iter.next().cloned()).ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|_| format!("{flag}: {v:?} is not a number"));
        match flag {
            "-h" | "--help" => return Ok(None),
            "--state-dir" => state = value()?.into(),
            "--resolv-conf" => resolv_conf = value()?.into(),
            "--pidfile" => pid_file = Some(value()?.into()),
            "--max-forwards" => limits.forwards = number(value()?)?,
            "--max-tcp" => limits.tcp_connections = number(value()?)?,
            "--metrics-address" => metrics = Some(cni_metrics::parse_address(&value()?)?),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(Some(Args {
        settings: Settings { state: StateDir::new(state), resolv_conf, limits },
        pid_file,
        metrics,
    }))
}

fn run(args: Args) -> std::io::Result<()> {
    let state = &args.settings.state;
    cni_dns::store::private_dir(state.root()).map_err(std::io::Error::other)?;
    // Whoever can talk to the resolver can make it reload: the socket is root's alone
    // (0600 in the 0700 state directory, peers checked), or the one systemd passes.
    let listener = match cni_os::socket::activated_listener()? {
        Some(l) => l,
        None => cni_os::socket::bind_private(&state.socket_path())?,
    };
    if let Some(pid_file) = &args.pid_file {
        cni_dns::store::write_atomic(pid_file, format!("{}\n", std::process::id()).as_bytes())
            .map_err(std::io::Error::other)?;
    }
    // Before any thread exists (capset is per thread).
    if let Err(e) = cni_dnsd::caps::keep_only(&[cni_dnsd::caps::CAP_NET_BIND_SERVICE]) {
        log(format_args!("could not drop capabilities: {e}"));
    }
    let resolver = Resolver::new(args.settings.clone());
    log(format_args!("started: state {}, {}", state.root().display(), resolver.reload()));
    if let Some(address) = args.metrics {
        let mut registry = Registry::default();
        resolver.metrics.register(&mut registry);
        let me = resolver.clone();
        let bound = cni_metrics::serve(address, registry, Box::new(move || me.health()))?;
        log(format_args!("metrics on http://{bound}/metrics"));
    }
    let rescanner = resolver.clone();
    std::thread::Builder::new().name("rescan".into()).spawn(move || loop {
        std::thread::sleep(RESCAN);
        rescanner.reload();
    })?;
    resolver.serve_control(listener)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cni-dnsd: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(format_args!("{e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_testkit::docs;

    /// docs/plugins/cni-dnsd.md documents exactly the flags the usage names, and the
    /// parser accepts each one.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        let page = docs::read_page(env!("CARGO_MANIFEST_DIR"), "cni-dnsd.md").unwrap();
        let documented = docs::table_keys(&page, "Flags");
        let problems = docs::compare("cni-dnsd.md", "flag", &docs::usage_flags(USAGE), &documented);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        for flag in documented {
            if let Err(e) = parse(&[format!("{flag}=1")]) {
                assert!(!e.starts_with("unknown argument"), "{flag}: {e}");
            }
        }
    }
}
