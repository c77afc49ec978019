#!/bin/bash
# Two qkv binaries side by side (bench/RESULTS.md, "The second redesign against the code before it"):
# decode time of the first N test sentences with greedy and beam 4 (alternated, R rounds, one
# thread on core CORE), whether the translations are identical, and the d2l preset's per-epoch
# training losses with each.
# Usage: bench/compare_binaries.sh OLD_QKV NEW_QKV MODEL_DIR SOURCES [N=1000] [R=3] [CORE=0]
set -euo pipefail
OLD=$1 NEW=$2 M=$3 SRC=$4 N=${5:-1000} R=${6:-3} CORE=${7:-0}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
head -"$N" "$SRC" > "$T/src"
for round in $(seq 1 "$R"); do
  for b in OLD NEW; do
    for beam in 1 4; do
      s=$(date +%s.%N)
      taskset -c "$CORE" "${!b}" translate --model "$M" --threads 1 --beam $beam -f "$T/src" > "$T/${b}_b$beam" 2>/dev/null
      echo "round $round $b beam $beam: $(echo "$(date +%s.%N) - $s" | bc) s"
    done
  done
done
for beam in 1 4; do
  cmp -s "$T/OLD_b$beam" "$T/NEW_b$beam" && echo "beam $beam: identical translations" || echo "beam $beam: translations differ"
done
for b in OLD NEW; do
  taskset -c "$CORE" "${!b}" train --preset d2l --epochs 10 --threads 1 --out "$T/d2l_$b" --no-progress > /dev/null 2>&1
  python3 -c "import json, sys; r = [json.loads(l) for l in open(sys.argv[1])]; print(sys.argv[2], 'd2l train losses', [round(x['train_loss'], 6) for x in r if 'train_loss' in x])" "$T/d2l_$b/metrics.jsonl" "$b"
done
