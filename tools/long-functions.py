#!/usr/bin/env python3
"""Lists the Rust functions longer than N lines, counted from the `fn` line to its closing brace.

Usage, from the repository root:  tools/long-functions.py [ROOT] [N]   (defaults: . and 80)
Count them:                        tools/long-functions.py | awk '{print $2}' | sort | uniq -c

Reads the *.rs files git tracks under ROOT (outside a checkout, every *.rs file below it).
Each line: length, `prod` or `test`, file:line, name. A function is `test` when #[test] (or
#[tokio::test]) stands in the three lines above it, or its file is under tests/ or benches/
or is named tests.rs. Strings (raw and multi-line ones too), chars and comments are blanked
before the braces are counted; a function nested in another is listed on its own as well.
"""
import os
import re
import subprocess
import sys

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')
RAW_STRING = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(\\.[^']*|[^\\'])'")


def spaces(text):
    """`text` with everything but its newlines turned into spaces."""
    return re.sub(r"[^\n]", " ", text)


def blank(text):
    """`text` with the contents of strings, chars and comments blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        raw = RAW_STRING.match(text, i)
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            closing = '"' + raw.group(1)
            end = text.find(closing, raw.end())
            end = n if end < 0 else end + len(closing)
        elif text[i] == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            end += 1
        elif text[i] == "'" and CHAR.match(text, i):
            end = CHAR.match(text, i).end()
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(spaces(text[i:end]))
        i = end
    return "".join(out)


def body_end(code, start):
    """The index of the line closing the function whose `fn` is at `start`, or None."""
    depth, opened = 0, False
    for j in range(start, len(code)):
        line = code[j]
        if not opened and ";" in line and "{" not in line:
            return None  # a declaration without a body (a trait's)
        for ch in line:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
        if opened and depth == 0:
            return j
    return None


def rust_files(root):
    listed = subprocess.run(["git", "-C", root, "ls-files", "*.rs"], capture_output=True, text=True)
    files = listed.stdout.split()
    if not files:
        for folder, _, names in os.walk(root):
            files += [os.path.relpath(os.path.join(folder, f), root) for f in names if f.endswith(".rs")]
    return files


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    for path in rust_files(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines, code = text.split("\n"), blank(text).split("\n")
        test_file = "/tests/" in "/" + path or path.endswith("tests.rs") or "/benches/" in path
        for i, line in enumerate(lines):
            found = FN.match(line)
            end = body_end(code, i) if found else None
            if end is None or end - i + 1 <= limit:
                continue
            above = " ".join(lines[max(0, i - 3):i])
            kind = "test" if test_file or "#[test]" in above or "::test]" in above else "prod"
            print(f"{end - i + 1:4d} {kind} {path}:{i + 1} {found.group(7)}")


if __name__ == "__main__":
    main()
