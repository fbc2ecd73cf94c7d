#!/usr/bin/env python3
"""The size gate of rox's sources: no file over 800 lines, no function over 120 lines.

Usage: scripts/code-size.py [--list] [PATH...]
  PATH...  files or directories to check (default: every file git tracks)
  --list   also print every function over the limit's half, longest first

Every source file counts, test code too: Rust, Python, C (and headers) and shell, known by
their ending or, for scripts without one, their `#!` line; other files (docs, data, build
files) are not sources. Functions are measured in Rust (`fn`, nested ones counting in both),
Python (`def`, from the ast), C (a top-level brace block that follows a parenthesised
declarator) and shell (`name() {` ... `}`); a function runs from its first line to its closing
brace (Python: its last statement). No cargo and no crates: for Rust a small tokenizer
(comments, strings, raw strings, chars, lifetimes) and brace matching are all this needs.
"""
import ast
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FN_LINES = 120
SUFFIXES = {".rs": "rust", ".py": "python", ".c": "c", ".h": "c", ".sh": "shell"}
SHEBANGS = (("python", "python"), ("bash", "shell"), ("/sh", "shell"), ("busybox sh", "shell"))

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


def rust_functions(src):
    """(name, first line, lines) of every Rust function with a body."""
    toks = tokenize(src)
    functions = []
    for i, (kind, text, line) in enumerate(toks[:-1]):
        if kind == "ident" and text == "fn" and toks[i + 1][0] == "ident":
            end = item_end(toks, i)
            if toks[end][1] == "}":
                functions.append((toks[i + 1][1], line, toks[end][2] - line + 1))
    return functions


def python_functions(src):
    """(name, first line, lines) of every Python function, methods and nested ones too."""
    return [
        (n.name, n.lineno, n.end_lineno - n.lineno + 1)
        for n in ast.walk(ast.parse(src))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


C_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# A declarator's end: a name and its (possibly nested) parenthesised parameters.
C_DECLARATOR = re.compile(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$")


def c_functions(src):
    """(name, first line, lines) of every C function: a top-level `{` whose declaration (the
    text since the last top-level `;`, `}` or preprocessor line) ends in a declarator and holds
    no `=` (not an initializer)."""
    # Comments and literals blanked, newlines kept: line numbers stay right.
    code = C_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), src)
    functions, depth, decl, name, first = [], 0, "", None, 0
    for lineno, text in enumerate(code.split("\n"), 1):
        if depth == 0 and text.lstrip().startswith("#"):
            decl = ""
            continue
        for c in text:
            if depth == 0:
                if c == "{":
                    m = C_DECLARATOR.search(decl)
                    name = m.group(1) if m and "=" not in decl else None
                    first = lineno - decl.lstrip().count("\n")
                    depth, decl = 1, ""
                elif c in ";}":
                    decl = ""
                else:
                    decl += c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0 and name:
                    functions.append((name, first, lineno - first + 1))
        if depth == 0:
            decl += "\n"
    return functions


SHELL_FN = re.compile(r"^(\s*)(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?\s*(#.*)?$")


def shell_functions(src):
    """(name, first line, lines) of every shell function written `name() {` (or `{` on the
    next line) that ends at a `}` line of the same indentation."""
    lines = src.split("\n")
    functions = []
    for i, text in enumerate(lines):
        m = SHELL_FN.match(text)
        if not m:
            continue
        close = re.compile(re.escape(m.group(1)) + r"\}")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is not None:
            functions.append((m.group(2), i + 1, end - i + 1))
    return functions


FUNCTIONS = {
    "rust": rust_functions,
    "python": python_functions,
    "c": c_functions,
    "shell": shell_functions,
}


def kind(path):
    """The language of the source file `path`, or None if it is not one."""
    suffix = os.path.splitext(path)[1]
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    if suffix:
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(200).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    return next((k for word, k in SHEBANGS if word in first), None)


def source_files(args):
    if not args:
        out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
        paths = out.stdout.split("\n")
    else:
        paths = []
        for arg in args:
            if os.path.isdir(arg):
                for root, _, names in os.walk(arg):
                    paths += [os.path.join(root, f) for f in names]
            else:
                paths.append(arg)
    return sorted(p for p in paths if p and os.path.isfile(p) and not os.path.islink(p))


def main():
    args = sys.argv[1:]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    failures, long, checked = [], [], 0
    for path in source_files(args):
        lang = kind(path)
        if lang is None:
            continue
        checked += 1
        with open(path, encoding="utf-8") as f:
            src = f.read()
        lines = src.count("\n")
        if lines > MAX_FILE_LINES:
            failures.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES} per file)")
        for name, line, length in FUNCTIONS[lang](src):
            if length > MAX_FN_LINES:
                failures.append(
                    f"{path}:{line}: {lang} function {name} is {length} lines (at most {MAX_FN_LINES})"
                )
            if length > MAX_FN_LINES // 2:
                long.append((length, f"{path}:{line}: {name}"))
    if listing:
        for length, where in sorted(long, reverse=True):
            print(f"{length:5} {where}")
        sys.stdout.flush()
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(f"code-size: {len(failures)} over the limits in {checked} files", file=sys.stderr)
        return 1
    print(f"code-size: {checked} files within {MAX_FILE_LINES} lines, functions within "
          f"{MAX_FN_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
