#!/bin/bash
# Greedy decoding of the real-text model's 5,000 test sentences beside PyTorch 2.6 on the same
# weights (bench/RESULTS.md, "Decoding and the D2L step beside PyTorch 2.6 on a quiet machine"):
# qkv eval fp32 and int8, then bench/torch_real_translator.py in the trixie chroot
# (../shared/bench/torch2/), one thread each on core 1, alternated, ROUNDS rounds. Each prints its
# own decoding time. The chroot must see this checkout and RUNS at the same paths (a bind mount).
# Usage: [QKV=build/bin/qkv] [RUNS=runs] [ROUNDS=4] bench/decode_side_by_side.sh
# (RUNS holds real2-avg/, the model, and rd2/, `qkv data --preset real --out RUNS/rd2`.)
set -euo pipefail
Q=${QKV:-build/bin/qkv} R=$(realpath "${RUNS:-runs}")
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for r in $(seq 1 "${ROUNDS:-4}"); do
  echo "== round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for ct in fp32 int8; do
    taskset -c 1 "$Q" eval --model "$R/real2-avg" --src-file "$R/rd2/test.en" --ref-file "$R/rd2/test.fr" \
      --threads 1 --compute-type $ct --beam 1 --no-progress --show 0 --hyp-out "$T/$ct.hyp" > "$T/$ct.out" 2>&1
    echo "qkv $ct: $(grep -E 'greedy decoding|^BLEU|^chrF' "$T/$ct.out" | sed 's/.*pairs, //' | tr '\n' ' ')"
  done
  taskset -c 1 chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 OMP_NUM_THREADS=1 \
    python3 "$PWD/bench/torch_real_translator.py" --data "$R/rd2" --out "$T/torch_$r" \
    --load-qkv "$R/real2-avg/model.safetensors" --num-steps 64 --threads 1 --beam 1 2>&1 | grep -i "^decoded" | sed 's/^/torch: /'
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
