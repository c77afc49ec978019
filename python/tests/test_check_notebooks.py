# scripts/check_notebooks.py (ctest notebooks.clean): refuses notebooks stored with outputs.
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_check(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "check_notebooks.py"), *map(str, args)],
                          capture_output=True, text=True)


def test_check_notebooks_refuses_outputs(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# x"},
                    {"cell_type": "code", "metadata": {}, "source": "1", "execution_count": 3,
                     "outputs": [{"output_type": "execute_result", "data": {"text/plain": "1"},
                                  "metadata": {}, "execution_count": 3}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    p = tmp_path / "a.ipynb"
    p.write_text(json.dumps(nb))
    r = run_check(tmp_path)
    assert r.returncode == 1 and "cell 1: 1 stored output(s)" in r.stderr and "execution_count 3" in r.stderr
    assert run_check("--strip", p).returncode == 0
    r = run_check(p)
    assert r.returncode == 0, r.stderr
    assert json.loads(p.read_text())["cells"][1]["outputs"] == []
    (tmp_path / "b.txt").write_text("x")
    assert run_check(tmp_path / "b.txt").returncode == 2
    assert run_check(tmp_path / "empty-dir-that-is-missing").returncode == 2


def test_repository_notebooks_are_clean():
    r = run_check(ROOT / "notebooks")
    assert r.returncode == 0, r.stderr
