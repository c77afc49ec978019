#!/usr/bin/env bash
# The translation part of `make demo` (called at the end of scripts/demo.sh): trains D2L's
# Transformer on real English–French pairs with the demo preset (about 4 minutes on 2 cores),
# translates held-out sentences, scores the held-out split with corpus BLEU and draws the
# attention heatmaps. Usage: scripts/demo_translation.sh path/to/qkv [model folder]
# The model goes to runs/qkv, the folder qkv translate, eval, serve, heatmap and info read when
# --model is not given, so `qkv translate "go ."` works right after the demo; the last lines say
# what to run next.
set -euo pipefail
QKV="${1:-build/bin/qkv}"
OUT="${2:-runs/qkv}"
# qkv finds the data via --data, $QKV_DATA or ../shared/data/fra-eng.zip and otherwise says where
# to download it.
# A second `make demo` keeps the model the first one trained (qkv train refuses a folder that holds
# a model unless --resume or --overwrite says what to do with it): a folder with a checkpoint of the
# demo preset is continued with --resume, which trains nothing once the demo's time budget is spent
# (and the rest of a run stopped with Ctrl-C otherwise); QKV_DEMO_OVERWRITE=1 trains a new one
# (--overwrite). A folder left by a run stopped before its first checkpoint (config.json, no model)
# holds nothing trained: qkv train replaces it. A model of another preset there (the user's own) is
# left alone: the demo trains into out/translation instead.
preset_of() { sed -n 's/^ *"preset": "\([^"]*\)".*/\1/p' "$1/config.json" 2> /dev/null | head -n 1; }
if [ "${QKV_DEMO_OVERWRITE:-0}" != 1 ] && [ -e "$OUT/model.safetensors" -o -e "$OUT/checkpoint.safetensors" ] &&
   OUT_PRESET=$(preset_of "$OUT") && [ "$OUT_PRESET" != demo ]; then
  echo "$OUT holds a model of another preset (${OUT_PRESET:-unknown}): the demo leaves it and trains into out/translation"
  OUT=out/translation
fi
train=(train --preset demo --out "$OUT")
if [ "${QKV_DEMO_OVERWRITE:-0}" = 1 ]; then
  train+=(--overwrite)
elif [ -e "$OUT/checkpoint.safetensors" ]; then
  echo "$OUT already holds a demo model: continuing it (qkv train --resume; QKV_DEMO_OVERWRITE=1 trains a new one)"
  train=(train --resume --out "$OUT")
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
# What to run next, as commands to copy: without --model when the model is in the default folder.
model=()
[ "$OUT" = runs/qkv ] || model=(--model "$OUT")
q() { printf '%q ' "$@"; }
echo
echo "next, from $PWD:"
echo "  $(q "$QKV" translate "${model[@]}")\"go .\" \"i like tea .\""
echo "  $(q "$QKV" eval "${model[@]}")--beam 4"
echo "  $(q "$QKV" serve "${model[@]}")  # then open http://127.0.0.1:8080/"
echo "  $(q "$QKV" heatmap "${model[@]}")\"he's calm .\"   # attention-*.png here"
