# examples/python/chapter.py --quick runs end to end (seconds) and draws its heatmaps.
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_chapter_quick(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "chapter.py"), "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "love" in r.stdout and "=> " in r.stdout and "trained 30 steps" in r.stdout
    if importlib.util.find_spec("matplotlib") is not None:
        for f in ("nw-predictions.png", "nw-attention.png", "self-attention.png", "cross-attention.png"):
            assert (tmp_path / f).stat().st_size > 1000, f
