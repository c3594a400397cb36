//! overlay-scale: the overlay agent at 10 to 250 simulated nodes (see the cni_bench::overlay_scale docs).
//!
//! ```text
//! overlay-scale --nodes 10,25,50,100 --joins 5 --steady 20
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cni_bench::overlay_scale::{run, Options, Report};

/// The overlay agent at 10 to 250 simulated nodes, as root: join latency, convergence,
/// etcd load and RSS, one Markdown table row per cluster size.
#[derive(Debug, Parser)]
#[command(name = "overlay-scale", version)]
struct Args {
    /// Cluster sizes, one run each (2 to 250 nodes: at least one peer each, one /24 apiece)
    #[arg(long = "nodes", value_name = "N[,N...]", value_delimiter = ',', value_parser = cluster_size,
          default_value = "10,25,50,100")]
    sizes: Vec<usize>,
    /// Leave-and-join cycles measured per run
    #[arg(long, value_name = "N", default_value_t = 5)]
    joins: usize,
    /// How long the converged cluster is watched for its etcd load, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    steady: u64,
    /// The agents' lease TTL in seconds (the agent's own default; at least 2)
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    ttl: u64,
    /// The longest one phase may take before the run fails, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    limit: u64,
    /// The cni-overlay-agent binary [default: the one next to this binary]
    #[arg(long, value_name = "PATH")]
    agent: Option<std::path::PathBuf>,
    /// Also write every run's figures there as JSON
    #[arg(long, value_name = "PATH")]
    json: Option<std::path::PathBuf>,
}

/// One cluster size of `--nodes`.
fn cluster_size(value: &str) -> Result<usize, String> {
    let nodes: usize = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    if !(2..=250).contains(&nodes) {
        return Err(format!("{nodes} is outside 2..250"));
    }
    Ok(nodes)
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn row(r: &Report) -> String {
    format!(
        "| {} | {} | {} | {} | {} | {:.1} | {:.3} | {:.1} | {:.3} | {:.1} | {} | {} | {} | {:.1} / {:.1} |",
        r.nodes,
        ms(cni_bench::overlay_scale::simulation::percentile(&r.first_peers, 50)),
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
    let args: Args = cni_cli::parse();
    // Ctrl-C and SIGTERM stop the run at its next check, so the owners' `Drop`s remove the
    // namespaces, processes and etcd (the default action would leave them behind).
    let stop = cni_os::signal::stop_on_termination();
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
            stop,
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
