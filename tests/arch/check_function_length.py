#!/usr/bin/env python3
"""Fails when a function body in src/ (outside src/kernels/), apps/ or python/src/ is longer than
MAX_LINES lines (docs/architecture.md, "Conventions": a function that long holds several steps that
want names of their own; kernels are exempt, their loops are written out for speed).

A C++ reader good enough for this code base, not a parser: comments, string and character literals
are blanked, then braces are matched; a brace opened where a function may be defined (namespace or
class scope) whose text since the previous ';', '{' or '}' ends in a parameter list (')' plus
qualifiers, an initializer list or a trailing return type) and does not start with a control keyword
is a function body. Its length is the lines from the line of its name to its closing brace.
Usage: check_function_length.py REPO_ROOT [MAX_LINES]"""
import os
import re
import sys

ROOT = sys.argv[1]
MAX_LINES = int(sys.argv[2]) if len(sys.argv) > 2 else 120
SCOPES = [("src", ("src/kernels",)), ("apps", ()), ("python/src", ())]
CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s+\"C\"\s*$")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return)\b")


def blank(text):
    """Comments and literals as spaces (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(text):
    """(name line, length in lines, head) of each function body at namespace or class scope."""
    src = blank(text)
    stack, found, start = [], [], 0  # stack: (kind, open offset, head line)
    for i, c in enumerate(src):
        if c in ";{}":
            head = src[start:i]
            if c == "{":
                in_function = any(k == "function" for k, _, _ in stack)
                h = " ".join(head.split())
                is_function = (not in_function and not CONTAINER.search(h) and not CONTROL.match(h)
                               and re.search(r"\)\s*(const|noexcept|override|final|mutable|->[^{]*|:[^{]*|\s)*$", h)
                               and not h.rstrip().endswith("="))
                kind = "function" if is_function else ("block" if in_function else "container")
                first = len(head) - len(head.lstrip())
                stack.append((kind, i, src.count("\n", 0, start + first) + 1))
            elif c == "}" and stack:
                kind, _, line = stack.pop()
                if kind == "function":
                    end = src.count("\n", 0, i) + 1
                    found.append((line, end - line + 1, " ".join(src[start:i].split())[:0]))
            start = i + 1
    return found


def self_test():
    """The reader on tricky text: braces in strings, comments and raw strings, a class, a lambda."""
    body = "\n".join(f"    x += {i};" for i in range(125))
    text = (f'namespace a {{\nstruct S {{ int f() const {{ return 1; }} }};\n// {{ not a brace\n'
            f'int g(int x) {{\n    const char* s = "}}{{"; auto l = [&](int y) {{ return y; }};\n{body}\n'
            f'    return x + R"({{)"[0] + l(1);\n}}\nint h() {{ return \'}}\'; }}\n}}\n')
    got = sorted(length for _, length, _ in functions(text))
    want = [1, 1, 129]  # f, h, g: its head line, 127 lines, its closing brace
    if got != want:
        print(f"check_function_length: self-test: function lengths {got}, want {want}")
        sys.exit(1)


def main():
    self_test()
    long = []
    for top, exempt in SCOPES:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(dirpath, ROOT)
            if any(rel == e or rel.startswith(e + os.sep) for e in exempt):
                continue
            for name in sorted(names):
                if not name.endswith((".cpp", ".h", ".cc", ".hpp")):
                    continue
                path = os.path.join(dirpath, name)
                text = open(path, encoding="utf-8").read()
                lines = text.split("\n")
                for line, length, _ in functions(text):
                    if length > MAX_LINES:
                        long.append(f"{os.path.relpath(path, ROOT)}:{line}: {length} lines: {lines[line - 1].strip()[:90]}")
    if long:
        print(f"functions longer than {MAX_LINES} lines (split them into named steps):\n" + "\n".join(long))
        sys.exit(1)
    print(f"check_function_length: no function in src/ (outside kernels/), apps/ or python/src/ is longer than "
          f"{MAX_LINES} lines")


if __name__ == "__main__":
    main()
