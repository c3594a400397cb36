//! Command-line options.

use std::path::PathBuf;

pub const USAGE: &str = "usage: cni-bench [options]
  -n N                 containers per workload (default 200; W4 uses 10*N ADDs into a /16)
  --rounds R           rounds, each running every workload with A then B (default 3; W4
                       runs in the first round only)
  --budget SECONDS     start no further round that would end after this (default 540), so a
                       full run ends within 10 minutes; the first round always runs
  --workloads LIST     comma-separated subset of W1,W1nm,W2,W3,W4,W5,W6,W7,nft,macvlan,floor,dhcp,
                       dhcp6,dns,soak,podman,cri (default: all but dhcp, dhcp6 (DHCPv6, ours
                       only: the reference has none) and dns, which need dnsmasq, soak, 8
                       workers x N ADD/DEL cycles: -n 1250 is the 10,000-cycle soak, podman,
                       podman run --rm on the CNI backend and on netavark, and cri,
                       RunPodSandbox through containerd's CRI plugin)
  --a DIR              plugin directory A (default: the release `cni-plugins` next to this
                       binary, installed into a temp dir)
  --plugins-bin FILE   the multi-call binary to install as A (instead of the one next to cni-bench)
  --b DIR              plugin directory B (default /usr/lib/cni, skipped if absent)
  --only-a             run A alone (no comparison)
  --state-dir DIR      where a run keeps host-local reservations and libcni's result
                       cache, in a fresh subdirectory removed afterwards (default
                       /var/lib/cni, where both live in production)
  --json FILE          write every sample and summary as JSON
  --smoke              N=20, one round, smaller W4: checks that everything runs
  -h, --help           this text";

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

/// What the command line asked for: a run, or the help text.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    Run(Options),
    Help,
}

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut options = Options {
        containers: DEFAULT_CONTAINERS,
        rounds: DEFAULT_ROUNDS,
        workloads: WorkloadId::defaults(),
        dir_a: None,
        plugins_bin: None,
        dir_b: None,
        only_a: false,
        json: None,
        state_dir: PathBuf::from(DEFAULT_STATE_DIR),
        smoke: false,
        budget: std::time::Duration::from_secs(DEFAULT_BUDGET_SECS),
    };
    let mut containers = None;
    let mut rounds = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-n" => containers = Some(positive(&value("-n")?, "-n")?),
            "--rounds" => rounds = Some(positive(&value("--rounds")?, "--rounds")?),
            "--workloads" => options.workloads = workloads(&value("--workloads")?)?,
            "--a" => options.dir_a = Some(value("--a")?.into()),
            "--plugins-bin" => options.plugins_bin = Some(value("--plugins-bin")?.into()),
            "--b" => options.dir_b = Some(value("--b")?.into()),
            "--only-a" => options.only_a = true,
            "--json" => options.json = Some(value("--json")?.into()),
            "--state-dir" => options.state_dir = value("--state-dir")?.into(),
            "--smoke" => options.smoke = true,
            "--budget" => {
                options.budget =
                    std::time::Duration::from_secs(positive(&value("--budget")?, "--budget")? as u64)
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.smoke {
        options.containers = 20;
        options.rounds = 1;
    }
    options.containers = containers.unwrap_or(options.containers);
    options.rounds = rounds.unwrap_or(options.rounds);
    if options.only_a && options.dir_b.is_some() {
        return Err("--only-a and --b exclude each other".into());
    }
    if options.dir_a.is_some() && options.plugins_bin.is_some() {
        return Err("--a and --plugins-bin exclude each other".into());
    }
    Ok(Parsed::Run(options))
}

fn positive(text: &str, name: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{name} needs a positive number, got {text:?}")),
    }
}

fn workloads(list: &str) -> Result<Vec<WorkloadId>, String> {
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
        return Err("--workloads names no workload".into());
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(args.iter().map(|s| s.to_string()))? {
            Parsed::Run(o) => Ok(o),
            Parsed::Help => Err("help".into()),
        }
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
        assert!(run(&["--bogus"]).is_err());
        assert_eq!(parse(["--help".to_string()]), Ok(Parsed::Help));
    }
}
