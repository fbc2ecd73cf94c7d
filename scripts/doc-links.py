#!/usr/bin/env python3
"""The docs' link gate: every relative link in rox's Markdown resolves to a file, and every
`#anchor` to a heading of its target.

Usage: scripts/doc-links.py [FILE.md...]   (default: every .md file git tracks)

A link is `[text](target)` or `![alt](target)` outside fenced code blocks and inline code.
Links with a scheme (https:, mailto:) are not checked. A target's path is relative to the file
that links; `#anchor` alone is a heading of the same file. Anchors are made from ATX headings
(`#` to `######`) as GitHub makes them: the text lowercased, backticks dropped, every character
that is not a letter, digit, mark, space, `-` or `_` dropped, spaces turned into `-`; a repeated
anchor gets `-1`, `-2`, ... in order. Why: the docs cross-reference each other by file and
heading (docs/benchmarks/ holds the measurement history, one file per session), and a moved or
renamed heading should fail here, not leave a dead link.
"""
import re
import subprocess
import sys
import unicodedata
import urllib.parse
from pathlib import Path

LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`+[^`]*`+")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield n, line


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = (c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return "".join(kept).replace(" ", "-")


def anchors(text):
    """Every heading anchor of a Markdown text, repeats numbered as GitHub numbers them."""
    seen = {}
    out = set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def broken_links(path, read=lambda p: p.read_text()):
    """(line, target, why) of each link in `path` that does not resolve."""
    bad = []
    for n, line in prose_lines(read(path)):
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            target = m.group(1)
            if SCHEME.match(target):
                continue
            file, _, anchor = urllib.parse.unquote(target).partition("#")
            dest = (path.parent / file) if file else path
            if not dest.exists():
                bad.append((n, target, "no such file"))
            elif anchor and dest.suffix == ".md" and anchor not in anchors(read(dest)):
                bad.append((n, target, "no such heading"))
    return bad


def main(argv):
    files = [Path(a) for a in argv] or [
        Path(f) for f in subprocess.run(["git", "ls-files", "*.md"], capture_output=True,
                                        text=True, check=True).stdout.split()]
    bad = [(f, *b) for f in files for b in broken_links(f)]
    for f, n, target, why in bad:
        print(f"{f}:{n}: {target}: {why}")
    print(f"doc-links: {len(files)} Markdown files, {len(bad)} broken links")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
