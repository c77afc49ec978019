# examples/python/chapter.py --quick runs end to end (seconds), draws its heatmaps, and says what
# its quick model is: trained on 6 pairs it memorises, it reproduces them (issue 44: it printed
# "go . => s" for every sentence, with nothing saying the model was untrained).
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = {"go .": "va !", "i lost .": "j'ai perdu .", "he's calm .": "il est calme .",
              "i'm home .": "je suis chez moi ."}


def test_chapter_quick(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "chapter.py"), "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "love" in r.stdout and re.search(r"trained \d+ steps", r.stdout)
    assert "quick mode" in r.stdout and "not translation" in r.stdout
    got = dict(re.findall(r"^  (.+?) => (.*)$", r.stdout, re.M))
    assert set(got) == set(REFERENCES), r.stdout
    assert len(set(got.values())) == 4, f"the same output for different sentences: {got}"
    same = sum(got[s] == ref for s, ref in REFERENCES.items())
    assert same >= 3, f"the quick model did not learn its training pairs: {got}"
    assert f"{same} of 4 equal the book's references" in r.stdout
    if importlib.util.find_spec("matplotlib") is not None:
        for f in ("nw-predictions.png", "nw-attention.png", "self-attention.png", "cross-attention.png"):
            assert (tmp_path / f).stat().st_size > 1000, f
