#!/usr/bin/env bash
# qkv demo (`make demo` runs `bash scripts/demo.sh build/bin/qkv` from the repository root):
# the two seed programs with their defaults.
#   1. qkv nw         Nadaraya-Watson kernel regression with a learned width (seed 000):
#                     150 noisy points of 2.333 sin x + x^0.666, SGD lr 0.5, 20 epochs.
#   2. qkv attention  scaled dot-product attention with dropout on (2, 10, 8) inputs (seed 002)
#                     and the 4x4 self-attention matrix of "I love deep learning" (seed 000).
# Plots (PNG and SVG) go to out/nw and out/attention.
set -euo pipefail
QKV=${1:-build/bin/qkv}
[ -x "$QKV" ] || { echo "demo: qkv binary '$QKV' not found (build first: make build)" >&2; exit 1; }

echo "== 1/2  qkv nw  (Nadaraya-Watson attention pooling, the seed experiment)"
"$QKV" nw --out out/nw
echo
echo "== 2/2  qkv attention  (scaled dot-product attention and a 4-token self-attention map)"
"$QKV" attention --out out/attention
echo
echo "plots:"
for f in out/nw/fit out/nw/loss out/nw/attention out/attention/self_attention; do
    echo "  $f.png  $f.svg"
done
echo "  training history: out/nw/history.csv"

# ---- 3  translation (appended by the xfmr helper): D2L's Transformer on English-French -------
# Trains about 4 minutes with the demo preset, then translate / eval / heatmap; the model goes to
# runs/qkv, the folder the other commands read by default (qkv translate "go ." then works). Needs
# the fra-eng data (qkv says where to get it when it is missing). A second `make demo` keeps the
# model runs/qkv holds (--resume); QKV_DEMO_OVERWRITE=1 retrains it.
echo
echo "== 3  qkv train --preset demo, translate, eval, heatmap  (the Transformer on English-French)"
bash "$(dirname "$0")/demo_translation.sh" "$QKV" runs/qkv
