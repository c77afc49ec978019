#!/usr/bin/env python3
"""ctest docs.readme: the README stays short and the documentation's links and tables stay whole.

Usage: check_docs.py REPO_ROOT

Checks (each failure is printed as FILE:LINE: what, and the exit code is 1):
  - README.md has at most 250 lines (the reference lives in docs/; issue 43);
  - every relative link or image in README.md, docs/**/*.md and tests/README.md names a file or
    folder that exists (the #fragment is not checked); http(s), mailto and same-page #links are
    not followed;
  - every markdown table in those files has as many cells in each row as in its header (GitHub
    renders a row with more cells cut and one with fewer padded, silently).
Links and tables inside fenced code blocks and inline code spans are ignored.
Standard library only (Debian's python3).
"""
import os
import re
import sys

MAX_README_LINES = 250

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def doc_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "tests", "README.md")]
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def prose_lines(text):
    """(line number, line with code spans blanked) for lines outside fenced code blocks."""
    fence = None
    for no, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s{0,3}(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield no, CODE_SPAN.sub(lambda s: s.group(1) + "x" * len(s.group(2)) + s.group(1), line)


def is_external(target):
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None or target.startswith("#")


def cells(row):
    """Cell count of a table row: unescaped pipes, leading and trailing ones not separating."""
    r = row.strip()
    n = len(re.findall(r"(?<!\\)\|", r)) + 1
    if r.startswith("|"):
        n -= 1
    if r.endswith("|") and not r.endswith("\\|"):
        n -= 1
    return n


def check_file(root, path, errors):
    rel = os.path.relpath(path, root)
    text = open(path, encoding="utf-8").read()
    lines = list(prose_lines(text))
    for no, line in lines:
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        m = REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if is_external(t):
                continue
            file_part = t.split("#", 1)[0].split("?", 1)[0]
            if not file_part:
                continue
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(dest):
                errors.append(f"{rel}:{no}: dead link '{t}' ({os.path.relpath(dest, root)} does not exist)")
    # tables: a header row, a separator row, then rows while lines start with '|'
    by_no = dict(lines)
    for no, line in lines:
        nxt = by_no.get(no + 1)
        if "|" in line and nxt is not None and TABLE_SEP.match(nxt) and "|" in nxt:
            want = cells(line)
            if cells(nxt) != want:
                errors.append(f"{rel}:{no + 1}: table separator has {cells(nxt)} cells, header {want}")
            k = no + 2
            while k in by_no and by_no[k].strip().startswith("|"):
                if cells(by_no[k]) != want:
                    errors.append(f"{rel}:{k}: table row has {cells(by_no[k])} cells, header {want}")
                k += 1


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n")[2], file=sys.stderr)
        return 2
    root = sys.argv[1]
    errors = []
    readme = os.path.join(root, "README.md")
    n = len(open(readme, encoding="utf-8").read().rstrip("\n").split("\n"))
    if n > MAX_README_LINES:
        errors.append(f"README.md: {n} lines, more than {MAX_README_LINES}: move reference text to docs/")
    files = doc_files(root)
    for f in files:
        check_file(root, f, errors)
    for e in errors:
        print(e)
    if errors:
        print(f"docs.readme: {len(errors)} problem(s)")
        return 1
    print(f"docs.readme: README.md {n} lines; links and tables of {len(files)} files checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
