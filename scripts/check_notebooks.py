#!/usr/bin/env python3
"""Refuses notebooks stored with outputs (ctest notebooks.clean; docs/notebooks.md).

    scripts/check_notebooks.py [--strip] NOTEBOOK_OR_FOLDER...

Exit 1, naming each notebook and cell, when a code cell has outputs or an execution count, or the
notebook's metadata keeps widget state: what git holds must be the source, not one run's results
(their figures bloat the history and go stale). --strip clears them in place instead (exit 0).
Exit 2 for a path that is not a notebook or a folder, or a file that is not notebook JSON.
Standard library only (json), so it runs without Jupyter.
"""
import json
import sys
from pathlib import Path


def problems(nb):
    """(cell index, what) for each stored output, execution count or widget state in ``nb`` (a dict)."""
    found = []
    if "widgets" in nb.get("metadata", {}):
        found.append((None, "metadata.widgets (stored widget state)"))
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            found.append((i, f"{len(cell['outputs'])} stored output(s)"))
        if cell.get("execution_count") is not None:
            found.append((i, f"execution_count {cell['execution_count']}"))
    return found


def strip(nb):
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def notebooks(paths):
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.glob("*.ipynb"))
        elif p.suffix == ".ipynb" and p.is_file():
            yield p
        else:
            print(f"check_notebooks: {p}: not a .ipynb file or a folder", file=sys.stderr)
            sys.exit(2)


def main(argv):
    do_strip = "--strip" in argv
    paths = [a for a in argv if a != "--strip"]
    if not paths:
        sys.exit(__doc__)
    bad = 0
    seen = 0
    for path in notebooks(paths):
        seen += 1
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            print(f"check_notebooks: {path}: not notebook JSON ({e})", file=sys.stderr)
            return 2
        if do_strip:
            if problems(nb):
                path.write_text(json.dumps(strip(nb), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
                print(f"stripped {path}")
            continue
        for cell, what in problems(nb):
            where = "notebook metadata" if cell is None else f"cell {cell}"
            print(f"{path}: {where}: {what}; clear it (scripts/check_notebooks.py --strip {path})", file=sys.stderr)
            bad += 1
    if seen == 0:
        print("check_notebooks: no notebooks found in " + ", ".join(paths), file=sys.stderr)
        return 2
    if not do_strip:
        print(f"check_notebooks: {seen} notebook(s), {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
