#!/usr/bin/env python3
"""Prints four codebase counts (duplicates, unsafe, ...) for one revision, measured the same way for any.

Usage, from the repository root:  tools/codebase-counts.py REV [REV ...]

Each REV is checked out into a temporary git worktree (removed afterwards, also on failure)
and measured with the tools of *this* checkout, so two revisions are compared by one ruler:

- dup: pairs of places sharing 6 or more lines, from `duplicates --seconds 300 --most 1`
  on the worktree: `identical` = all pairs minus those alike by shape alone; `all` = every pair.
- unsafe: `unsafe` blocks, functions, impls and traits (the keyword followed by `{`, `fn`,
  `impl`, `trait` or `extern`, in code: comments and strings are blanked first), in every
  tracked *.rs file outside crates/cni-os (the workspace lints forbid any there: 0), and
  outside crates/cni-net and crates/cni-os (the ruler of revisions when cni-net had some).
- pub items of cni-plugins: lines declaring a plainly `pub` mod/fn/struct/enum/trait/const/
  static/type (`pub(crate)` and `pub use` are not counted; methods of public types are) in the
  files reachable from crates/cni-plugins/src/lib.rs through `pub mod` declarations only.
- long fns: functions over 80 lines by tools/long-functions.py (`prod` ones in brackets).
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
LONG_LIMIT = 80
ROW = "{:<10} {:>20} {:>12} {:>15} {:>10} {:>14}"

_spec = importlib.util.spec_from_file_location("long_functions", os.path.join(TOOLS, "long-functions.py"))
long_functions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(long_functions)

UNSAFE = re.compile(r"\bunsafe\s*(\{|fn\b|impl\b|trait\b|extern\b)")
PUB_ITEM = re.compile(r"^\s*pub\s+(?:(?:const|async|unsafe|extern\s+\"C\")\s+)*(mod|fn|struct|enum|trait|const|static|type)\s+(\w+)")
PUB_MOD_FILE = re.compile(r"^\s*pub\s+mod\s+(\w+)\s*;", re.M)


def duplicate_pairs(tree):
    """(identical pairs, all pairs) that `duplicates` reports for `tree`."""
    run = subprocess.run(["duplicates", "--repo", tree, "--seconds", "300", "--most", "1"],
                         capture_output=True, text=True, check=True)
    head = run.stdout.splitlines()[0] if run.stdout else ""
    if head.startswith("no duplicates"):
        return 0, 0
    total = re.match(r"(\d+) pairs", head)
    shape = re.search(r"\((\d+) by shape alone", head)
    if not total:
        raise SystemExit(f"duplicates said something unexpected: {head!r}")
    total = int(total.group(1))
    return total - (int(shape.group(1)) if shape else 0), total


def unsafe_counts(tree):
    """(outside cni-os, outside cni-net and cni-os)."""
    outside_os = outside_both = 0
    for path in long_functions.rust_files(tree):
        if path.startswith("crates/cni-os/"):
            continue
        with open(os.path.join(tree, path), encoding="utf-8", errors="replace") as f:
            found = len(UNSAFE.findall(long_functions.blank(f.read())))
        outside_os += found
        if not path.startswith("crates/cni-net/"):
            outside_both += found
    return outside_os, outside_both


def module_file(directory, name):
    for candidate in (os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def public_items(lib_rs):
    """Plainly `pub` items in the files reachable from `lib_rs` through `pub mod x;`."""
    count, pending = 0, [(lib_rs, os.path.dirname(lib_rs))]
    while pending:
        path, children_dir = pending.pop()
        with open(path, encoding="utf-8", errors="replace") as f:
            code = long_functions.blank(f.read())
        count += sum(1 for line in code.split("\n") if PUB_ITEM.match(line))
        for name in PUB_MOD_FILE.findall(code):
            child = module_file(children_dir, name)
            if child:
                # A `mod.rs`/lib.rs keeps its children beside it; `x.rs` keeps them in `x/`.
                below = os.path.dirname(child) if child.endswith("mod.rs") else child[:-3]
                pending.append((child, below))
    return count


def long_function_counts(tree):
    run = subprocess.run([sys.executable, os.path.join(TOOLS, "long-functions.py"), tree, str(LONG_LIMIT)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.splitlines()
    return len(rows), sum(1 for row in rows if row.split()[1:2] == ["prod"])


def measure(rev):
    with tempfile.TemporaryDirectory(prefix="codebase-counts-") as parent:
        tree = os.path.join(parent, "tree")
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", tree, rev], check=True)
        try:
            identical, pairs = duplicate_pairs(tree)
            unsafe_os, unsafe_both = unsafe_counts(tree)
            lib = os.path.join(tree, "crates/cni-plugins/src/lib.rs")
            pub = public_items(lib) if os.path.isfile(lib) else 0
            long_all, long_prod = long_function_counts(tree)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], check=True)
    short = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True).stdout.strip()
    return ROW.format(short, f"{identical} ({pairs})", unsafe_os, unsafe_both, pub, f"{long_all} ({long_prod})")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(ROW.format("rev", "dup identical (all)", "unsafe !os", "unsafe !net!os", "pub items", "fns>80 (prod)"))
    for rev in sys.argv[1:]:
        print(measure(rev), flush=True)


if __name__ == "__main__":
    main()
