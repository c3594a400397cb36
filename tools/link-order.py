#!/usr/bin/env python3
"""Writes crates/cni-plugins/link-order.txt: the functions plugin runs execute, for the linker.

`cargo build-plugins` hands the list to the linker (`--symbol-ordering-file`), which puts
those functions first and together. Why it matters: the kernel maps a program's code 64 KiB
around every page it touches (fault-around), so with the hot functions spread over the whole
binary each plugin run mapped nearly all of its code (peak RSS of a bridge ADD 3.5 MiB, and
page-table work on every exec and exit).

How: build the plugin binary the way `cargo build-plugins` does, minus the ordering and the
final strip (the symbol names are the same: both use the release profile); run the podman
default chain (bridge + host-local in process, portmap, firewall, tuning) and a plain
bridge network through our cnitool in throwaway network namespaces, each plugin under
callgrind; collect every function that ran, in the order the runs first reached it. glibc's
string functions are chosen at startup by CPU (callgrind's virtual CPU picks other ones
than real hardware), so all variants of those that ran are listed.

Run as root from the repository root after changes that move hot code between functions
(new crates, renamed modules, a new Rust toolchain): `sudo tools/link-order.py`. Needs
valgrind, iproute2 and nftables. A stale list costs memory, never correctness: functions
it does not name are laid out after the listed ones.

`tools/link-order.py --check` (CI runs it) does the same runs but writes nothing: it fails
when the functions those runs execute and the committed list does not name add up to more
than CHECK_SLACK_BYTES of code, listing the biggest, so the list cannot silently age.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "crates/cni-plugins/link-order.txt"
# A target directory of its own: cargo does not count `cargo rustc`'s extra flags as a
# change, so this build in target/release would pass for the shipping one (unordered and
# unstripped) and `cargo build-plugins` would keep it.
BUILD_DIR = ROOT / "target/link-order"
BINARY = BUILD_DIR / "release/cni-plugins"
PLUGINS = ["bridge", "host-local", "portmap", "firewall", "tuning"]
TAG = f"cnilo{os.getpid()}"


def run(*args, **kwargs):
    return subprocess.run(args, check=True, **kwargs)


def build() -> None:
    """The shipping build without `--symbol-ordering-file` and `-C strip=symbols`."""
    run("cargo", "rustc", "--release", "-p", "cni-plugins", "--bin", "cni-plugins", "--",
        "-C", "target-feature=+crt-static", "-C", "relocation-model=static", cwd=ROOT,
        env=dict(os.environ, CARGO_TARGET_DIR=str(BUILD_DIR)))


def code_symbols(binary: Path) -> dict[str, str]:
    """Name -> nm type of every function: t/T/w/W, and i for glibc's IFUNC resolvers."""
    out = run("nm", "--defined-only", str(binary), capture_output=True, text=True).stdout
    return {parts[2]: parts[1] for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3 and parts[1] in "tTwWi"}


def code_sizes(binary: Path) -> dict[str, int]:
    """Name -> size in bytes of every function nm knows the size of."""
    out = run("nm", "--defined-only", "-S", str(binary), capture_output=True, text=True).stdout
    return {parts[3]: int(parts[1], 16) for parts in (line.split() for line in out.splitlines())
            if len(parts) == 4 and parts[2] in "tTwWi"}


# How much executed code the committed list may miss before --check fails: a page. Runs
# differ a little from one to the next (a retried dump, a table that already exists), a
# new hot module differs by far more.
CHECK_SLACK_BYTES = 4096


def check(functions: list[str], sizes: dict[str, int]) -> int:
    """Compares the functions the runs executed with the committed list (see --check)."""
    committed = set(OUTPUT.read_text().split())
    missing = sorted((f for f in functions if f not in committed), key=lambda f: -sizes.get(f, 0))
    missing_bytes = sum(sizes.get(f, 0) for f in missing)
    hot_bytes = sum(sizes.get(f, 0) for f in functions)
    print(f"link-order.py --check: the runs executed {len(functions)} functions ({hot_bytes} bytes); "
          f"{len(missing)} of them ({missing_bytes} bytes) are not in {OUTPUT.relative_to(ROOT)}")
    if missing_bytes <= CHECK_SLACK_BYTES:
        return 0
    for f in missing[:20]:
        print(f"  {sizes.get(f, 0):7d}  {f}")
    print("link-order.py --check: the list no longer covers the hot path: "
          "run `sudo tools/link-order.py` and commit crates/cni-plugins/link-order.txt", file=sys.stderr)
    return 1


# valgrind cannot run the memory-sharing helper processes cni_os::detach starts; with this
# set, plugins do that work themselves.
NO_HELPERS = "CNI_RS_NO_HELPER_PROCESSES"


def write_wrappers(real: Path, wrappers: Path, profiles: Path) -> None:
    """CNI_PATH for cnitool: each plugin runs under callgrind, and finds its delegates (host-local)
    in the real directory, where they are this same executable and so run in process."""
    for name in PLUGINS:
        script = wrappers / name
        script.write_text(
            "#!/bin/sh\n"
            f"CNI_PATH={real} {NO_HELPERS}=1 exec valgrind -q --tool=callgrind --demangle=no --dump-instr=no "
            f"--callgrind-out-file={profiles}/$CNI_COMMAND.{name}.%p {real}/{name}\n")
        script.chmod(0o755)


def networks(conf_dir: Path, data_dir: Path) -> None:
    bridge = {"type": "bridge", "bridge": f"{TAG}0", "isGateway": True, "ipMasq": True,
              "hairpinMode": True,
              "ipam": {"type": "host-local", "dataDir": str(data_dir),
                       "routes": [{"dst": "0.0.0.0/0"}],
                       "ranges": [[{"subnet": "10.89.0.0/24", "gateway": "10.89.0.1"}]]}}
    (conf_dir / "10-podman.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "podman",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}},
                    {"type": "firewall", "backend": ""}, {"type": "tuning"}]}))
    (conf_dir / "20-plain.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "plain", "plugins": [bridge]}))


def exercise(real: Path, wrappers: Path, work: Path) -> None:
    """VERSION, then ADD/CHECK/DEL of two containers on each network, as a node would."""
    env = dict(os.environ, CNI_PATH=str(wrappers), NETCONFPATH=str(work / "conf"),
               CNI_CACHE_DIR=str(work / "cache"))
    host = f"{TAG}h"
    containers = [f"{TAG}c{i}" for i in range(2)]
    run("valgrind", "-q", "--tool=callgrind", "--demangle=no", "--dump-instr=no",
        f"--callgrind-out-file={work}/profiles/VERSION.bridge.%p", str(real / "bridge"),
        env=dict(env, CNI_COMMAND="VERSION"), input=b"{}", stdout=subprocess.DEVNULL)
    cnitool = ROOT / "target/debug/cnitool"
    for network in ["podman", "plain"]:
        for verb in ["add", "check"]:
            for port, ns in enumerate(containers, start=18080):
                mapping = {"hostPort": port, "containerPort": 80, "protocol": "tcp"}
                run("ip", "netns", "exec", host, str(cnitool), verb, network, f"/run/netns/{ns}",
                    env=dict(env, CAP_ARGS=json.dumps({"portMappings": [mapping]})),
                    stdout=subprocess.DEVNULL)
        for ns in reversed(containers):
            run("ip", "netns", "exec", host, str(cnitool), "del", network, f"/run/netns/{ns}",
                env=env, stdout=subprocess.DEVNULL)


COMMANDS = ["ADD", "DEL", "CHECK", "VERSION"]


def profile_rank(path: Path) -> tuple[int, int, int]:
    """Which run's functions come first: ADD before DEL before the rarer commands, bridge
    before the plugins after it in the chain, and the last run of each kind (the steady
    state: bridge and nftables tables already there) before the first."""
    command, plugin, pid = path.name.split(".")
    return COMMANDS.index(command), PLUGINS.index(plugin), -int(pid)


def executed_functions(profiles: Path) -> list[str]:
    """Function names from callgrind's outputs (`<command>.<plugin>.<pid>`), a run's
    functions after those of the runs ranked before it (see `profile_rank`). A bridge ADD,
    the one that matters most, thus finds all it runs together at the start."""
    seen: dict[str, None] = {}
    for path in sorted(profiles.iterdir(), key=profile_rank):
        names: dict[str, str] = {}
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
            if not m:
                continue
            if m.group(3):
                names[m.group(2)] = m.group(3).strip()
            if m.group(1) == "fn":
                seen.setdefault(names[m.group(2)], None)
    return list(seen)


IFUNC_VARIANT = re.compile(r"^(__[a-z]+?)_(sse2|ssse3|sse4_[12]|avx|avx2|avx512|evex|evex512|erms)")


# The C runtime's start-up code around `main`.
CRT_STARTUP = ["_start", "frame_dummy", "register_tm_clones", "deregister_tm_clones",
               "__do_global_dtors_aux"]


def startup_code(symbols: dict[str, str]) -> list[str]:
    """What runs natively but not as such under callgrind: the C runtime's start-up, the
    IFUNC resolvers glibc calls before `main`, every CPU variant of glibc's string functions
    (~95 KiB; which ones run depends on the machine, and valgrind replaces some of them
    with its own), and cni_os::detach, whose memory-sharing children valgrind cannot run."""
    resolvers = [name for name, kind in symbols.items() if kind == "i"]
    variants = sorted(s for s in symbols if IFUNC_VARIANT.match(s))
    detach = sorted(s for s in symbols if "7cni_net6detach" in s)
    return [s for s in CRT_STARTUP if s in symbols] + resolvers + variants + detach


def main() -> int:
    checking = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not checking:
        print("usage: tools/link-order.py [--check]", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("link-order.py: needs root (network namespaces, nftables)", file=sys.stderr)
        return 1
    for tool in ["valgrind", "ip", "nm"]:
        if not shutil.which(tool):
            print(f"link-order.py: {tool} not found", file=sys.stderr)
            return 1
    # cnitool only drives the runs (its own code is not what is profiled): the debug build,
    # which the test suite has already made in CI, instead of a second fat-LTO build.
    run("cargo", "build", "-p", "cnitool", cwd=ROOT)
    build()
    namespaces = [f"{TAG}h", f"{TAG}c0", f"{TAG}c1"]
    with tempfile.TemporaryDirectory(prefix="cni-link-order-") as tmp:
        work = Path(tmp)
        real, wrappers = work / "real", work / "wrappers"
        for d in [real, wrappers, work / "profiles", work / "conf", work / "cache", work / "ipam"]:
            d.mkdir()
        shutil.copy2(BINARY, real / "cni-plugins")
        run(str(real / "cni-plugins"), "install", str(real), stdout=subprocess.DEVNULL)
        write_wrappers(real, wrappers, work / "profiles")
        networks(work / "conf", work / "ipam")
        try:
            for ns in namespaces:
                run("ip", "netns", "add", ns)
            run("ip", "-n", namespaces[0], "link", "set", "lo", "up")
            exercise(real, wrappers, work)
        finally:
            for ns in namespaces:
                subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        symbols = code_symbols(real / "cni-plugins")
        executed = [f for f in executed_functions(work / "profiles") if f in symbols]
        startup = startup_code(symbols)
        functions = startup + [f for f in executed if f not in set(startup)]
        if checking:
            return check(executed, code_sizes(real / "cni-plugins"))
    OUTPUT.write_text("".join(f + "\n" for f in functions))
    print(f"wrote {len(functions)} functions to {OUTPUT.relative_to(ROOT)}; "
          "now run `cargo build-plugins`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
