#!/usr/bin/env bash
# The translation part of `make demo` (called at the end of scripts/demo.sh): trains D2L's
# Transformer on real English–French pairs with the demo preset (about 4 minutes on 2 cores),
# translates held-out sentences, scores the held-out split with corpus BLEU and draws the
# attention heatmaps. Usage: scripts/demo_translation.sh path/to/qkv [output folder]
set -euo pipefail
QKV="${1:-build/bin/qkv}"
OUT="${2:-out/translation}"
# qkv finds the data via --data, $QKV_DATA or ../shared/data/fra-eng.zip and otherwise says where
# to download it.
"$QKV" train --preset demo --out "$OUT"
echo
echo "--- qkv translate"
"$QKV" translate --model "$OUT" --show-source "i lost ." "he's calm ." "i'm home ." "we are friends ." \
  "she is happy ." "i like tea ." "they left ."
echo
echo "--- qkv eval: corpus BLEU-4 on the first 1000 held-out pairs"
"$QKV" eval --model "$OUT" --limit 1000 --show 5 --no-progress
echo
echo "--- qkv heatmap \"i'm home .\""
"$QKV" heatmap --model "$OUT" "i'm home ." --out "$OUT/attention"
echo "model folder: $OUT (loss curve: $OUT/loss.png, attention: $OUT/attention-*.png)"
