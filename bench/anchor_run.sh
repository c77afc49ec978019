#!/usr/bin/env bash
# Issue 7: the quality-anchor protocol (shared/bench/quality_anchor.md) in qkv, then evaluation.
#   bench/anchor_run.sh PRESET OUT [extra qkv train flags...]   (--overwrite: replace a model in OUT)
# PRESET = anchor (the PyTorch script's exact protocol) or full (qkv's own recipe); the
# training budget is the preset's (20 minutes of training time, validation excluded).
# Writes OUT/train.log, OUT/eval_greedy.{log,json}, OUT/eval_beam4.{log,json}, and the time
# series of the load average in OUT/load.txt. BEAMS="1 4" (default) lists the beam sizes to
# evaluate. Run on an otherwise idle machine.
set -euo pipefail
PRESET="${1:?preset}"
OUT="${2:?output folder}"
shift 2
QKV="${QKV:-build/bin/qkv}"
# qkv train refuses a folder that holds a model unless --overwrite is given: say so before the
# logs of that earlier run are overwritten.
if [ -e "$OUT/model.safetensors" ] || [ -e "$OUT/checkpoint.safetensors" ] || [ -e "$OUT/config.json" ]; then
  case " $* " in
    *" --overwrite "*) ;;
    *) echo "anchor_run.sh: $OUT already holds a model; give another folder, or --overwrite to replace it" >&2
       exit 2 ;;
  esac
fi
mkdir -p "$OUT"
( while sleep 30; do echo "$(date -Is) $(cut -d' ' -f1-3 /proc/loadavg)"; done ) > "$OUT/load.txt" &
LOADPID=$!
trap 'kill $LOADPID 2>/dev/null || true' EXIT
echo "== $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg): qkv train --preset $PRESET $*" | tee "$OUT/train.log"
/usr/bin/time -v "$QKV" train --preset "$PRESET" --out "$OUT" --threads 2 --no-progress "$@" \
  >> "$OUT/train.log" 2> "$OUT/train.stderr"
grep -E "Maximum resident|Elapsed" "$OUT/train.stderr" >> "$OUT/train.log" || true
for beam in ${BEAMS:-1 4}; do
  mode=greedy; [ "$beam" != 1 ] && mode=beam$beam
  echo "== $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg): qkv eval --beam $beam" > "$OUT/eval_$mode.log"
  /usr/bin/time -v "$QKV" eval --model "$OUT" --beam "$beam" --threads 2 --no-progress \
    --hyp-out "$OUT/test_hyp_$mode.txt" --json "$OUT/eval_$mode.json" >> "$OUT/eval_$mode.log" 2> "$OUT/eval_$mode.stderr"
  grep -E "Maximum resident|Elapsed" "$OUT/eval_$mode.stderr" >> "$OUT/eval_$mode.log" || true
done
tail -3 "$OUT/train.log"; grep -E "BLEU|decoding" "$OUT"/eval_*.log
