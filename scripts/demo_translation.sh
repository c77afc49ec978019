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
# A second `make demo` keeps the model the first one trained (qkv train refuses a folder that holds
# a model unless --resume or --overwrite says what to do with it): a folder with a checkpoint is
# continued with --resume, which trains nothing once the demo's time budget is spent (and the rest
# of a run stopped with Ctrl-C otherwise); QKV_DEMO_OVERWRITE=1 trains a new one (--overwrite). A
# folder left by a run stopped before its first checkpoint (config.json, no model) holds nothing
# trained: it is replaced.
train=(train --preset demo --out "$OUT")
if [ "${QKV_DEMO_OVERWRITE:-0}" = 1 ]; then
  train+=(--overwrite)
elif [ -e "$OUT/checkpoint.safetensors" ]; then
  echo "$OUT already holds a demo model: continuing it (qkv train --resume; QKV_DEMO_OVERWRITE=1 trains a new one)"
  train=(train --resume --out "$OUT")
elif [ -e "$OUT/config.json" ] && [ ! -e "$OUT/model.safetensors" ]; then
  train+=(--overwrite)
fi
"$QKV" "${train[@]}"
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
