#!/usr/bin/env python3
"""The size gate of rox's Rust: no source file over 800 lines, no function over 120 lines.

Usage: scripts/code-size.py [--list] [PATH...]
  PATH...  files or directories to check (default: every *.rs git tracks)
  --list   also print every production function over the limit's half, longest first

Test code is exempt, found from the code itself rather than from a list: files under a
`tests/`, `benches/` or `fuzz/` directory; items gated to tests (`#[test]`, or a `#[cfg(...)]`
that holds only when testing: `test`, or a feature in TEST_FEATURES); and the files of a module
whose `mod` declaration is so gated (rox-nic's testkit, benchkit, fuzzing). A function's length
runs from its `fn` line to its closing brace; a function nested in another counts in both.
No cargo and no crates: a small tokenizer (comments, strings, raw strings, chars, lifetimes)
and brace matching are all the Rust this needs.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FN_LINES = 120
# Cargo features that only test and fuzzing builds enable (qemu/rox-nic/Cargo.toml).
TEST_FEATURES = {"testkit", "fuzzing"}
TEST_DIRS = {"tests", "benches", "fuzz"}

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tokenize(src):
    """(kind, text, line) tokens of Rust source: kind is 'ident', 'str' (text: its contents,
    escapes as written), 'lit' (char, number) or 'punct' (one character); comments are
    dropped."""
    toks = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif c == '"':
            start, first, i = line, i + 1, i + 1
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    i += 1
                line += src[i] == "\n"
                i += 1
            toks.append(("str", src[first:i], start))
            i += 1
        elif c == "'":
            if src.startswith("\\", i + 1):  # '\n', '\'', '\u{..}'
                j = i + 2
                while src[j] != "'":
                    j += 1 + (src[j] == "\\")
                toks.append(("lit", "", line))
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":  # 'a', '{'
                toks.append(("lit", "", line))
                i += 3
            else:  # a lifetime or a label
                m = IDENT.match(src, i + 1)
                i = m.end() if m else i + 1
        elif IDENT.match(src, i):
            m = IDENT.match(src, i)
            word, j = m.group(), m.end()
            raw = re.compile(r'(#*)"').match(src, j) if word in ("r", "br", "cr") else None
            if raw:  # r"..", r#".."#: ends at the quote followed by as many hashes
                end = '"' + raw.group(1)
                k = src.find(end, raw.end())
                k = n if k < 0 else k
                toks.append(("str", src[raw.end() : k], line))
                line += src.count("\n", i, k)
                i = k + len(end)
            elif word in ("b", "c") and j < n and src[j] in "\"'":
                i = j  # b"..", b'x', c"..": the literal follows
            else:
                toks.append(("ident", word, line))
                i = j
        elif c.isdigit():
            m = re.compile(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?").match(src, i)
            toks.append(("lit", "", line))
            i = m.end()
        else:
            toks.append(("punct", c, line))
            i += 1
    return toks


def matching(toks, i):
    """Index of the token closing the bracket at toks[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for j in range(i, len(toks)):
        kind, text, _ = toks[j]
        if kind != "punct":
            continue
        if text in pairs:
            stack.append(pairs[text])
        elif text in ")]}":
            stack.pop()
            if not stack:
                return j
    return len(toks) - 1


def cfg_test_only(toks, lo, hi):
    """Whether the cfg predicate toks[lo:hi] holds only in test or fuzzing builds."""

    def parse(i):
        # -> (test_only, next index)
        kind, text, _ = toks[i]
        if text in ("any", "all", "not") and toks[i + 1][1] == "(":
            close = matching(toks, i + 1)
            args, j = [], i + 2
            while j < close:
                val, j = parse(j)
                args.append(val)
                if toks[j][1] == ",":
                    j += 1
            if text == "any":
                val = bool(args) and all(args)
            elif text == "all":
                val = any(args)
            else:
                val = False
            return val, close + 1
        if text == "feature" and toks[i + 1][1] == "=":
            return toks[i + 2][1] in TEST_FEATURES, i + 3
        j = i + 1
        if j < hi and toks[j][1] == "=":
            j += 2
        return text == "test", j

    return parse(lo)[0]


def attributes(toks, i):
    """The outer attributes starting at toks[i]: (test_only, #[path] or None, index after
    them)."""
    test_only, path = False, None
    while i + 1 < len(toks) and toks[i][1] == "#" and toks[i + 1][1] == "[":
        close = matching(toks, i + 1)
        name = toks[i + 2][1]
        if name == "test" and close == i + 3:
            test_only = True
        elif name == "cfg" and toks[i + 3][1] == "(":
            test_only |= cfg_test_only(toks, i + 4, matching(toks, i + 3))
        elif name == "path" and toks[i + 3][1] == "=":
            path = toks[i + 4][1]
        i = close + 1
    return test_only, path, i


def item_end(toks, i):
    """Index of the last token of the item starting at toks[i] (its `;` or closing brace)."""
    depth = 0
    for j in range(i, len(toks)):
        text = toks[j][1]
        if toks[j][0] != "punct":
            continue
        if text in "([":
            depth += 1
        elif text in ")]":
            depth -= 1
        elif depth == 0 and text == ";":
            return j
        elif depth == 0 and text == "{":
            return matching(toks, j)
    return len(toks) - 1


def scan(src):
    """(functions, gated modules) of one file: functions as (name, first line, lines) outside
    test-only items; gated modules as (name, #[path] or None) declared test-only."""
    toks = tokenize(src)
    functions, gated = [], []
    i = 0
    while i < len(toks):
        kind, text, line = toks[i]
        if text == "#" and i + 1 < len(toks) and toks[i + 1][1] == "[":
            test_only, path_attr, after = attributes(toks, i)
            if test_only:
                end = item_end(toks, after)
                decl = [t[1] for t in toks[after : end + 1]]
                if "mod" in decl and decl[-1] == ";":
                    gated.append((decl[decl.index("mod") + 1], path_attr))
                i = end + 1
            else:
                i = after
            continue
        if kind == "ident" and text == "fn" and i + 1 < len(toks) and toks[i + 1][0] == "ident":
            end = item_end(toks, i)
            if toks[end][1] == "}":
                functions.append((toks[i + 1][1], line, toks[end][2] - line + 1))
            i += 2  # nested functions are measured too
            continue
        i += 1
    return functions, gated


def module_paths(path, name, path_attr):
    """Files and directories the `mod name;` declared in `path` may live in."""
    here = os.path.dirname(path)
    if path_attr:
        return [os.path.normpath(os.path.join(here, path_attr))]
    stem = os.path.splitext(os.path.basename(path))[0]
    base = here if stem in ("lib", "main", "mod") else os.path.join(here, stem)
    return [os.path.join(base, name + ".rs"), os.path.join(base, name)]


def rust_files(args):
    if not args:
        out = subprocess.run(["git", "ls-files", "*.rs"], capture_output=True, text=True, check=True)
        return out.stdout.split()
    files = []
    for arg in args:
        if os.path.isdir(arg):
            for root, _, names in os.walk(arg):
                files += [os.path.join(root, f) for f in names if f.endswith(".rs")]
        else:
            files.append(arg)
    return files


def main():
    args = sys.argv[1:]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    files = sorted(f for f in rust_files(args) if not TEST_DIRS & set(f.split("/")[:-1]))
    scanned, test_modules = {}, []
    for path in files:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        functions, gated = scan(src)
        scanned[path] = (src.count("\n"), functions)
        for name, path_attr in gated:
            test_modules += module_paths(path, name, path_attr)

    def test_code(path):
        return any(path == m or path.startswith(m + "/") for m in test_modules)

    failures, long = [], []
    for path, (lines, functions) in scanned.items():
        if test_code(path):
            continue
        if lines > MAX_FILE_LINES:
            failures.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES} per file)")
        for name, line, length in functions:
            if length > MAX_FN_LINES:
                failures.append(
                    f"{path}:{line}: fn {name} is {length} lines (at most {MAX_FN_LINES})"
                )
            if length > MAX_FN_LINES // 2:
                long.append((length, f"{path}:{line}: fn {name}"))
    if listing:
        for length, where in sorted(long, reverse=True):
            print(f"{length:5} {where}")
        sys.stdout.flush()
    for failure in failures:
        print(failure, file=sys.stderr)
    checked = sum(1 for p in scanned if not test_code(p))
    if failures:
        print(f"code-size: {len(failures)} over the limits in {checked} files", file=sys.stderr)
        return 1
    print(f"code-size: {checked} files within {MAX_FILE_LINES} lines, functions within "
          f"{MAX_FN_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
