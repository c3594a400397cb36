#!/usr/bin/env python3
"""Where a W2 ADD's CPU time goes: by process and by phase (docs/benchmarks.md).

Runs `cni-bench --only-a --workloads W2` under `perf record -e cpu-clock -g` (CPU time, not
wall clock: the machines this runs on are shared), keeps the samples of the ADD phase (from
the first plugin exec to the first exec of the DEL phase) and splits them by process (the
runtime is cni-bench, which embeds libcni; an exec counts towards it until the new program
takes over) and by call stack: the first phase of PHASES whose pattern matches a frame of
the sample's stack wins. Prints milliseconds of CPU per ADD. Sampling inflates CPU time by
about a fifth: compare shares, or runs made the same way.

    sudo tools/w2-profile.py                      # the release plugins next to cni-bench
    sudo tools/w2-profile.py --a DIR -n 200       # a plugin directory (cni-bench's --a)

Needs root, `perf` (Debian package linux-perf) and `cargo build --release -p cni-bench &&
cargo build-plugins`. Function names need a binary with symbols: `--a` a directory made with
`cni-plugins install` from a build without `-C strip=symbols` (link-order.py's build in
target/link-order is one); with the stripped shipping binary the plugins' own user-space
frames all land in "other user space".
"""

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ("bridge", "portmap", "firewall", "tuning")
PROCESSES = ("cni-bench",) + PLUGINS

# (phase, pattern over the stack's function names); the first match wins.
PHASES = [
    ("nft: the kernel validating the table", r"nf_tables_validate|nft_table_validate|nft_chain_validate|nft_setelem_validate"),
    ("nft: the rest of commits and queries", r"nfnetlink_rcv|nf_tables_commit"),
    ("netlink socket release", r"netlink_release|__sock_release"),
    ("rtnetlink: links, addresses, routes", r"rtnetlink_rcv|rtnl_"),
    ("/proc/sys lookups, reads, writes", r"proc_sys_|__d_lookup\b"),
    ("ext4: file creation, rename, unlink", r"ext4_|vfs_tmpfile|vfs_rename|do_unlinkat"),
    ("glibc start-up: CPU probing", r"handle_amd|get_common_indices|update_active|get_extended_indices|init_cpu_features|init_cacheinfo|intel_check_word"),
    ("glibc start-up: readlink /proc/self/exe", r"_dl_get_origin"),
    ("posix_spawn child: signal reset", r"__libc_sigaction"),
    ("spawn, exec, page faults, exit", r"__spawni_child|execve|exc_page_fault|do_exit|do_group_exit|mmput|exit_mmap|clone3|kernel_clone"),
    ("setns, namespace files", r"__x64_sys_setns|nsfs|ns_get_path|proc_ns_"),
    ("pipes, poll, reaping", r"ppoll|do_sys_poll|wait4|pipe2|pipe_|ChildIo"),
]
RATE = 20000  # samples per second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", help="plugin directory (cni-bench --a)")
    parser.add_argument("-n", type=int, default=200, help="containers (default 200)")
    parser.add_argument("--bench", default=str(ROOT / "target/release/cni-bench"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "w2.perf"
        bench = [args.bench, "--only-a", "--workloads", "W2", "-n", str(args.n), "--rounds", "1"]
        if args.a:
            bench += ["--a", args.a]
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(RATE), "-g",
                        "-o", str(data), "--"] + bench, check=True, stdout=subprocess.DEVNULL)
        events = subprocess.run(["perf", "script", "-i", str(data), "--show-task-events"],
                                capture_output=True, text=True, check=True).stdout
        execs = [float(m.group(1)) for m in re.finditer(
            r"^\S+\s+\d+\s+([\d.]+): PERF_RECORD_COMM exec: (?:" + "|".join(PLUGINS) + r"):",
            events, re.M)]
        adds = len(PLUGINS) * args.n
        if len(execs) <= adds:
            print(f"w2-profile: expected more than {adds} plugin execs, saw {len(execs)}", file=sys.stderr)
            return 1
        window = f"{execs[0]:.6f},{execs[adds]:.6f}"
        stacks = subprocess.run(["perf", "script", "-i", str(data), "--time", window, "-F", "comm,ip,sym"],
                                capture_output=True, text=True, check=True).stdout

    tally = collections.defaultdict(collections.Counter)
    for block in stacks.split("\n\n"):
        lines = [line for line in block.strip().split("\n") if line.strip()]
        if not lines or lines[0].split()[0] not in PROCESSES:
            continue
        comm, frames = lines[0].split()[0], "\n".join(lines[1:])
        phase = next((name for name, pattern in PHASES if re.search(pattern, frames)), None)
        if phase is None:
            kernel = any(line.split()[0].startswith("ffffffff") for line in lines[1:2])
            phase = "other kernel" if kernel else "other user space"
        tally[comm][phase] += 1

    per_add = lambda samples: samples / RATE / args.n * 1000  # ms of CPU per ADD
    phases = [name for name, _ in PHASES] + ["other user space", "other kernel"]
    print("| phase | " + " | ".join(PROCESSES) + " | all |")
    print("|---|" + "---:|" * (len(PROCESSES) + 1))
    for phase in phases + ["total"]:
        row = [sum(tally[c].values()) if phase == "total" else tally[c][phase] for c in PROCESSES]
        if sum(row) == 0:
            continue
        cells = [f"{per_add(n):.2f}" if n else "" for n in row]
        print(f"| {phase} | " + " | ".join(cells) + f" | {per_add(sum(row)):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
