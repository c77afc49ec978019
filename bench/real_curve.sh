#!/usr/bin/env bash
# The learning curve of a real-text run (issue 45): sacreBLEU and chrF2 on the test split at each
# checkpoint the run kept (qkv train --keep-checkpoints K writes OUT/checkpoints/model-step-N),
# against the training time at which it was saved (metrics.jsonl's validation or epoch record).
# Usage: bench/real_curve.sh RUN_DIR [QKV] [STEP...]   (default: every kept checkpoint; beam from
#        config.json, BEAM=1 for greedy; THREADS=N). One line per checkpoint on stdout:
#        step  train_seconds  BLEU  chrF2
set -euo pipefail
run="$1"; qkv="${2:-build/bin/qkv}"; shift $(( $# > 1 ? 2 : 1 ))
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
steps=("$@")
if [ ${#steps[@]} = 0 ]; then
  for f in "$run"/checkpoints/model-step-*.safetensors; do
    s="${f##*model-step-}"; steps+=("$((10#${s%.safetensors}))")
  done
fi
for step in "${steps[@]}"; do
  f=$(printf "%s/checkpoints/model-step-%09d.safetensors" "$run" "$step")
  [ -f "$f" ] || { echo "no checkpoint for step $step: $f" >&2; exit 1; }
  d="$work/step-$step"; mkdir -p "$d"
  for x in config.json spm.model src_vocab.txt tgt_vocab.txt; do ln -sf "$(realpath "$run/$x")" "$d/$x"; done
  ln -sf "$(realpath "$f")" "$d/model.safetensors"
  secs=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("step") == int(sys.argv[2]) and "train_seconds" in r and r["kind"] in ("val", "epoch"):
        print(round(r["train_seconds"])); break' "$run/metrics.jsonl" "$step")
  "$qkv" eval --model "$d" --no-progress ${BEAM:+--beam "$BEAM"} ${THREADS:+--threads "$THREADS"} \
    --json "$work/e.json" > "$work/e.out"
  python3 -c 'import json,sys
j = json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], "%.2f" % j["sacrebleu"]["score"], "%.2f" % j["chrf"]["score"])' \
    "$work/e.json" "$step" "${secs:-?}"
done
