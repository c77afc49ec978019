#!/usr/bin/env bash
# CLI test of `qkv attention` (run by ctest with the qkv binary as $1): the seed-002 shapes, the
# 4 × 4 self-attention table (rows sum to 1, seed-deterministic), and the heatmap files.
source "$(dirname "$0")/lib.sh" "${1:?usage: test_attention.sh path/to/qkv}"

"$QKV" attention --seed 3 --out "$T/a" > "$T/out.txt" || fail "qkv attention exited $?"
for s in "Q shape: (2, 10, 8)" "K shape: (2, 10, 8)" "V shape: (2, 10, 8)" "output shape: (2, 10, 8)"; do
    grep -qF "$s" "$T/out.txt" || fail "missing '$s'"
done
# The table: a header with the 4 tokens, then one row per token; each row's 4 weights sum to 1.
grep -qE '^ +I +love +deep +learning +row sum$' "$T/out.txt" || fail "table header"
awk '$1 ~ /^(I|love|deep|learning)$/ && NF == 6 && $2 ~ /^[0-9.]+$/ {
         n++; s = $2 + $3 + $4 + $5
         if (s < 0.9997 || s > 1.0003 || $6 != "1.0000") { print "row " $1 " sums to " s; bad = 1 }
         for (i = 2; i <= 5; i++) if ($i < 0 || $i > 1) { print "weight out of [0,1]: " $i; bad = 1 } }
     END { if (n != 4) { print "expected 4 rows, got " n; bad = 1 } exit bad }' "$T/out.txt" ||
    fail "attention table"
want=$(sed -n 's/.*self_attention.png and .svg (\([0-9]*x[0-9]*\) px).*/\1/p' "$T/out.txt")
[ -n "$want" ] && [ "$(png_size "$T/a/self_attention.png")" = "$want" ] ||
    fail "self_attention.png is $(png_size "$T/a/self_attention.png"), printed '$want'"
head -c 200 "$T/a/self_attention.svg" | grep -q '<svg' || fail "self_attention.svg is not an SVG"

# Same seed -> same table; another seed -> another table.
"$QKV" attention --seed 3 --out "$T/b" > "$T/out2.txt"
diff <(grep -E '^(I|love|deep|learning) ' "$T/out.txt") <(grep -E '^(I|love|deep|learning) ' "$T/out2.txt") ||
    fail "same seed gave a different table"
"$QKV" attention --seed 4 --out "$T/c" > "$T/out3.txt"
! diff -q <(grep -E '^(I|love|deep|learning) ' "$T/out.txt") <(grep -E '^(I|love|deep|learning) ' "$T/out3.txt") > /dev/null ||
    fail "seeds 3 and 4 gave the same table"

# --out naming an existing file: a usage error (exit 2) naming the flag, before any output.
touch "$T/file"
set +e
"$QKV" attention --out "$T/file" > "$T/o4.txt" 2> "$T/e4.txt"; rc=$?
set -e
[ "$rc" = 2 ] || { cat "$T/e4.txt"; fail "attention --out FILE: exit $rc, want 2"; }
grep -qF "qkv: error: --out '$T/file' is an existing file, not a folder" "$T/e4.txt" ||
    { cat "$T/e4.txt"; fail "attention --out FILE: message"; }
[ ! -s "$T/o4.txt" ] || fail "attention --out FILE printed the tables before failing"
echo "test_attention: ok"
