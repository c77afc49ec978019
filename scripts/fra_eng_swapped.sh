#!/usr/bin/env bash
# Writes French<TAB>English (fra-eng's columns swapped, gzip) to OUT, for training French→English
# from a TSV corpus (docs/training.md "Training on your own corpus", bench/RESULTS.md). The data: Tatoeba
# sentence pairs from www.manythings.org/anki (tatoeba.org), CC BY 2.0; never commit the output.
# Usage: scripts/fra_eng_swapped.sh OUT.tsv.gz [fra-eng.zip]   (default: $QKV_DATA, then ../shared/data/fra-eng.zip)
set -euo pipefail
out=${1:?usage: scripts/fra_eng_swapped.sh OUT.tsv.gz [fra-eng.zip]}
zip=${2:-${QKV_DATA:-../shared/data/fra-eng.zip}}
[ -f "$zip" ] || { echo "fra_eng_swapped.sh: '$zip' not found" >&2; exit 1; }
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
/usr/bin/python3 - "$zip" "$tmp" <<'PY'
import gzip, sys, zipfile
n = 0
with zipfile.ZipFile(sys.argv[1]) as z, gzip.open(sys.argv[2], "wt", encoding="utf-8") as out:
    for line in z.read("fra-eng/fra.txt").decode("utf-8").split("\n"):
        f = line.rstrip("\r").split("\t")
        if len(f) >= 2:
            out.write(f[1] + "\t" + f[0] + "\n")
            n += 1
print("%d pairs" % n, file=sys.stderr)
PY
mv "$tmp" "$out"
echo "wrote $out"
