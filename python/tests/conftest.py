# Shared fixtures: a tiny fra-eng corpus and a tiny model folder trained by the qkv CLI (QKV_BIN,
# set by ctest; else build/bin/qkv), so the tests need no downloaded data.
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ["Go.\tVa !", "I lost.\tJ'ai perdu.", "He's calm.\tIl est calme.", "I'm home.\tJe suis chez moi.",
         "We won.\tNous avons gagné.", "Thank you.\tMerci."]
# The CLI tests' tiny Transformer (tests/cli/test_train_translate.sh): seconds to train.
SMALL = ["--num-hiddens", "16", "--num-heads", "2", "--num-blks", "1", "--ffn-num-hiddens", "16",
         "--batch-size", "8", "--num-steps", "6", "--no-progress"]
SMALL_KW = dict(num_hiddens=16, num_heads=2, num_blks=1, ffn_num_hiddens=16, batch_size=8, num_steps=6)


def qkv_bin():
    b = os.environ.get("QKV_BIN") or str(ROOT / "build" / "bin" / "qkv")
    if not os.access(b, os.X_OK):
        pytest.skip(f"the qkv program is not built ({b}); set QKV_BIN")
    return b


@pytest.fixture(scope="session")
def fra_txt(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "fra.txt"
    p.write_text("".join(PAIRS[i % 6] + "\n" for i in range(1, 61)), encoding="utf-8")
    return p


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, fra_txt):
    out = tmp_path_factory.mktemp("run") / "model"
    r = subprocess.run([qkv_bin(), "train", "--data", str(fra_txt), "--preset", "demo", "--max-steps", "30",
                        "--out", str(out), *SMALL], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out
