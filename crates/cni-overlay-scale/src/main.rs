//! overlay-scale: the overlay agent at 10 to 100 simulated nodes (see the crate's docs).
//!
//! ```text
//! overlay-scale --nodes 10,25,50,100 --joins 5 --steady 20
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cni_overlay_scale::{run, Options, Report};

const USAGE: &str = "usage: overlay-scale [options]   (as root)
  --nodes N[,N...]   cluster sizes, one run each (default 10,25,50,100)
  --joins N          leave-and-join cycles measured per run (default 5)
  --steady SECONDS   how long the converged cluster is watched for its etcd load (default 20)
  --ttl SECONDS      the agents' lease TTL (default 10, the agent's own default)
  --limit SECONDS    the longest one phase may take before the run fails (default 300)
  --agent PATH       the cni-overlay-agent binary (default: the one next to this binary)
  --json PATH        also write every run's figures there as JSON";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM stop the run at its next check, so the owners' `Drop`s remove the
/// namespaces, processes and etcd (the default action would leave them behind).
fn install_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

struct Args {
    sizes: Vec<usize>,
    joins: usize,
    steady: u64,
    ttl: u64,
    limit: u64,
    agent: Option<std::path::PathBuf>,
    json: Option<std::path::PathBuf>,
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("{flag}: {value:?} is not a number"))
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        sizes: vec![10, 25, 50, 100],
        joins: 5,
        steady: 20,
        ttl: 10,
        limit: 300,
        agent: None,
        json: None,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--nodes" => {
                parsed.sizes = value.split(',').map(|n| number(flag, n)).collect::<Result<_, _>>()?
            }
            "--joins" => parsed.joins = number(flag, value)?,
            "--steady" => parsed.steady = number(flag, value)?,
            "--ttl" => parsed.ttl = number(flag, value)?,
            "--limit" => parsed.limit = number(flag, value)?,
            "--agent" => parsed.agent = Some(value.into()),
            "--json" => parsed.json = Some(value.into()),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    // 2..=250: at least one peer each; the pod network's /24s and the underlay's first /24.
    if let Some(bad) = parsed.sizes.iter().find(|&&n| !(2..=250).contains(&n)) {
        return Err(format!("--nodes {bad} is outside 2..250"));
    }
    if parsed.ttl < 2 {
        return Err(format!("--ttl {} is too short (at least 2)", parsed.ttl));
    }
    Ok(parsed)
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn row(r: &Report) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {:.1} | {:.3} | {:.1} | {:.3} | {:.1} | {} | {} | {} | {:.1} / {:.1} |",
        r.nodes,
        ms(cni_overlay_scale::simulation::percentile(&r.first_peers, 50)),
        ms(r.join_percentile(50)),
        ms(r.join_percentile(100)),
        ms(r.cold_start),
        r.cold_start_requests,
        r.steady_requests,
        r.join_requests,
        r.steady_cpu.as_secs_f64() * 1000.0,
        r.join_cpu.as_secs_f64() * 1000.0,
        r.rss_mean_kib,
        r.rss_max_kib,
        r.restarts,
        r.load.0,
        r.load.1,
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(&args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("overlay-scale: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    install_handlers();
    let agent =
        args.agent.clone().unwrap_or_else(|| cni_testkit::binaries::target_dir().join("cni-overlay-agent"));
    if !agent.exists() {
        eprintln!(
            "overlay-scale: {} is missing: cargo build -p cni-overlay (or --agent PATH)",
            agent.display()
        );
        return ExitCode::FAILURE;
    }
    println!(
        "| nodes | join, first peer p50 ms | join p50 ms | join max ms | cold start ms | etcd req per agent (cold start) | etcd req/s per \
         agent (steady) | etcd req per join | agent CPU ms/s (steady) | peers' CPU ms per join | RSS mean KiB | RSS max KiB | agent restarts | load \
         before / after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut reports = Vec::new();
    for &nodes in &args.sizes {
        let options = Options {
            nodes,
            joins: args.joins,
            steady: Duration::from_secs(args.steady),
            ttl: args.ttl,
            agent_binary: agent.clone(),
            limit: Duration::from_secs(args.limit),
            stop: &STOP,
        };
        match run(&options) {
            Ok(report) => {
                println!("{}", row(&report));
                reports.push(report.to_json());
            }
            Err(e) => {
                eprintln!("overlay-scale: {nodes} nodes: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&reports).expect("JSON of numbers");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("overlay-scale: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
