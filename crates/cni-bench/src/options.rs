//! Command-line options.

use clap::Parser;
use std::path::PathBuf;

/// A workload's short name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadId {
    W1,
    W1nm,
    W2,
    W3,
    W4,
    W5,
    W6,
    W7,
    Nft,
    Floor,
    Dhcp,
    Dhcp6,
    Dns,
    Macvlan,
    Soak,
    Podman,
    Cri,
}

impl WorkloadId {
    pub const ALL: [WorkloadId; 17] = [
        WorkloadId::W1,
        WorkloadId::W1nm,
        WorkloadId::W2,
        WorkloadId::W3,
        WorkloadId::W4,
        WorkloadId::W5,
        WorkloadId::W6,
        WorkloadId::W7,
        WorkloadId::Nft,
        WorkloadId::Macvlan,
        WorkloadId::Floor,
        WorkloadId::Dhcp,
        WorkloadId::Dhcp6,
        WorkloadId::Dns,
        WorkloadId::Soak,
        WorkloadId::Podman,
        WorkloadId::Cri,
    ];

    /// What runs when `--workloads` is not given: all but dhcp and dhcp6, which need dnsmasq and
    /// whose Go side takes seconds per ADD (it would not fit a full run's budget or CI's
    /// smoke run), soak, long by design, and podman and cri, which start whole containers.
    pub fn defaults() -> Vec<WorkloadId> {
        let named_only = |w: &WorkloadId| {
            matches!(
                w,
                WorkloadId::Dhcp
                    | WorkloadId::Dhcp6
                    | WorkloadId::Dns
                    | WorkloadId::Soak
                    | WorkloadId::Podman
                    | WorkloadId::Cri
            )
        };
        WorkloadId::ALL.into_iter().filter(|w| !named_only(w)).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            WorkloadId::W1 => "W1",
            WorkloadId::W1nm => "W1nm",
            WorkloadId::W2 => "W2",
            WorkloadId::W3 => "W3",
            WorkloadId::W4 => "W4",
            WorkloadId::W5 => "W5",
            WorkloadId::W6 => "W6",
            WorkloadId::W7 => "W7",
            WorkloadId::Nft => "nft",
            WorkloadId::Floor => "floor",
            WorkloadId::Dhcp => "dhcp",
            WorkloadId::Dhcp6 => "dhcp6",
            WorkloadId::Dns => "dns",
            WorkloadId::Macvlan => "macvlan",
            WorkloadId::Soak => "soak",
            WorkloadId::Podman => "podman",
            WorkloadId::Cri => "cri",
        }
    }

    fn parse(text: &str) -> Option<WorkloadId> {
        WorkloadId::ALL.into_iter().find(|w| w.name().eq_ignore_ascii_case(text))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub containers: usize,
    pub rounds: usize,
    pub workloads: Vec<WorkloadId>,
    pub dir_a: Option<PathBuf>,
    pub plugins_bin: Option<PathBuf>,
    pub dir_b: Option<PathBuf>,
    pub only_a: bool,
    pub json: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub smoke: bool,
    pub budget: std::time::Duration,
}

pub const DEFAULT_CONTAINERS: usize = 200;
pub const DEFAULT_ROUNDS: usize = 3;
pub const DEFAULT_BUDGET_SECS: u64 = 540;
pub const DEFAULT_B: &str = "/usr/lib/cni";
/// Where host-local and libcni keep their state in production. Measuring host-local in
/// /tmp instead measures /tmp's filesystem: on a test machine it is the most churned
/// directory there is, and ext4's inode allocation in such a directory was seen to cost
/// 0.7 ms per created file (25 µs elsewhere on the same filesystem).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni";

/// Times CNI plugins, ours (A) against the reference (B), over workloads W1..W7 and more,
/// as root. Each round runs every workload with A then B.
#[derive(Debug, Parser)]
#[command(name = "cni-bench", version)]
pub struct Args {
    /// Containers per workload [default: 200, 20 with --smoke; W4 uses 10*N ADDs into a /16]
    #[arg(short = 'n', value_name = "N", value_parser = positive)]
    containers: Option<usize>,
    /// Rounds, each running every workload with A then B [default: 3, 1 with --smoke; W4
    /// runs in the first round only]
    #[arg(long, value_name = "R", value_parser = positive)]
    rounds: Option<usize>,
    /// Start no further round that would end after this many seconds, so a full run ends
    /// within 10 minutes; the first round always runs
    #[arg(long, value_name = "SECONDS", value_parser = positive, default_value_t = DEFAULT_BUDGET_SECS as usize)]
    budget: usize,
    /// Comma-separated subset of W1,W1nm,W2,W3,W4,W5,W6,W7,nft,macvlan,floor,dhcp,dhcp6,dns,
    /// soak,podman,cri [default: all but dhcp, dhcp6 (DHCPv6, ours only: the reference has
    /// none) and dns, which need dnsmasq; soak, 8 workers x N ADD/DEL cycles (-n 1250 is the
    /// 10,000-cycle soak); podman, podman run --rm on the CNI backend and on netavark; and
    /// cri, RunPodSandbox through containerd's CRI plugin]
    #[arg(long, value_name = "LIST", value_parser = workloads)]
    workloads: Option<WorkloadList>,
    /// Plugin directory A [default: the release cni-plugins next to this binary, installed
    /// into a temp dir]
    #[arg(long = "a", value_name = "DIR", conflicts_with = "plugins_bin")]
    dir_a: Option<PathBuf>,
    /// The multi-call binary to install as A (instead of the one next to cni-bench)
    #[arg(long, value_name = "FILE")]
    plugins_bin: Option<PathBuf>,
    /// Plugin directory B [default: /usr/lib/cni, skipped if absent]
    #[arg(long = "b", value_name = "DIR")]
    dir_b: Option<PathBuf>,
    /// Run A alone (no comparison)
    #[arg(long, conflicts_with = "dir_b")]
    only_a: bool,
    /// Where a run keeps host-local reservations and libcni's result cache, in a fresh
    /// subdirectory removed afterwards (/var/lib/cni is where both live in production)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Write every sample and summary as JSON
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// N=20, one round, smaller W4: checks that everything runs
    #[arg(long)]
    smoke: bool,
}

/// `--workloads`: the workloads named, in order, each once.
#[derive(Debug, Clone)]
pub struct WorkloadList(Vec<WorkloadId>);

impl Args {
    /// The run the command line asks for: `--smoke`'s small values unless `-n` or
    /// `--rounds` say otherwise.
    pub fn into_options(self) -> Options {
        let (containers, rounds) = if self.smoke { (20, 1) } else { (DEFAULT_CONTAINERS, DEFAULT_ROUNDS) };
        Options {
            containers: self.containers.unwrap_or(containers),
            rounds: self.rounds.unwrap_or(rounds),
            workloads: self.workloads.map_or_else(WorkloadId::defaults, |list| list.0),
            dir_a: self.dir_a,
            plugins_bin: self.plugins_bin,
            dir_b: self.dir_b,
            only_a: self.only_a,
            json: self.json,
            state_dir: self.state_dir,
            smoke: self.smoke,
            budget: std::time::Duration::from_secs(self.budget as u64),
        }
    }
}

fn positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("needs a positive number, got {text:?}")),
    }
}

fn workloads(list: &str) -> Result<WorkloadList, String> {
    let mut chosen = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let id = WorkloadId::parse(part).ok_or_else(|| {
            format!(
                "unknown workload {part:?} (known: W1,W1nm,W2,W3,W4,W5,W6,W7,nft,macvlan,floor,dhcp,dhcp6,dns,soak,podman,cri)"
            )
        })?;
        if !chosen.contains(&id) {
            chosen.push(id);
        }
    }
    if chosen.is_empty() {
        return Err("names no workload".into());
    }
    Ok(WorkloadList(chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, clap::Error> {
        let argv = std::iter::once("cni-bench").chain(args.iter().copied());
        Args::try_parse_from(argv).map(Args::into_options)
    }

    #[test]
    fn defaults() {
        let o = run(&[]).unwrap();
        assert_eq!((o.containers, o.rounds, o.workloads.len()), (200, 3, 11));
        assert!(!o.only_a && !o.smoke && o.dir_b.is_none());
        assert_eq!(o.budget.as_secs(), 540);
        assert_eq!(run(&["--budget", "60"]).unwrap().budget.as_secs(), 60);
    }

    #[test]
    fn smoke_sets_small_values_that_explicit_flags_override() {
        let o = run(&["--smoke"]).unwrap();
        assert_eq!((o.containers, o.rounds), (20, 1));
        let o = run(&["-n", "5", "--smoke"]).unwrap();
        assert_eq!((o.containers, o.rounds), (5, 1));
    }

    #[test]
    fn workload_list_and_dirs() {
        let o = run(&["--workloads", "w1, W4,floor,W1,NFT", "--a", "/x", "--b", "/y", "--json", "o.json"])
            .unwrap();
        assert_eq!(o.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(run(&["--state-dir", "/srv/s"]).unwrap().state_dir, PathBuf::from("/srv/s"));
        assert_eq!(o.workloads, vec![WorkloadId::W1, WorkloadId::W4, WorkloadId::Floor, WorkloadId::Nft]);
        assert_eq!(o.dir_a, Some(PathBuf::from("/x")));
        assert_eq!(o.dir_b, Some(PathBuf::from("/y")));
        assert_eq!(o.json, Some(PathBuf::from("o.json")));
    }

    #[test]
    fn errors() {
        assert!(run(&["-n", "0"]).is_err());
        assert!(run(&["-n"]).is_err());
        assert!(run(&["--workloads", "W9"]).is_err());
        assert!(run(&["--only-a", "--b", "/y"]).is_err());
        assert!(run(&["--a", "/x", "--plugins-bin", "/p"]).is_err());
        assert!(run(&["--bogus"]).is_err());
        assert_eq!(run(&["--help"]).unwrap_err().kind(), clap::error::ErrorKind::DisplayHelp);
    }
}
