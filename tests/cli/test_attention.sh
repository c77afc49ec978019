#!/usr/bin/env bash
# CLI test of `qkv attention` (run by ctest with the qkv binary as $1): the seed-002 shapes, the
# 4 × 4 self-attention table (rows sum to 1, seed-deterministic), and the heatmap files.
set -euo pipefail
QKV=${1:?usage: test_attention.sh path/to/qkv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
png_size() {
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"
    od -An -tu1 -j16 -N8 "$1" | awk '{printf "%dx%d\n", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}'
}

"$QKV" attention --seed 3 --out "$TMP/a" > "$TMP/out.txt" || fail "qkv attention exited $?"
for s in "Q shape: (2, 10, 8)" "K shape: (2, 10, 8)" "V shape: (2, 10, 8)" "output shape: (2, 10, 8)"; do
    grep -qF "$s" "$TMP/out.txt" || fail "missing '$s'"
done
# The table: a header with the 4 tokens, then one row per token; each row's 4 weights sum to 1.
grep -qE '^ +I +love +deep +learning +row sum$' "$TMP/out.txt" || fail "table header"
awk '$1 ~ /^(I|love|deep|learning)$/ && NF == 6 && $2 ~ /^[0-9.]+$/ {
         n++; s = $2 + $3 + $4 + $5
         if (s < 0.9997 || s > 1.0003 || $6 != "1.0000") { print "row " $1 " sums to " s; bad = 1 }
         for (i = 2; i <= 5; i++) if ($i < 0 || $i > 1) { print "weight out of [0,1]: " $i; bad = 1 } }
     END { if (n != 4) { print "expected 4 rows, got " n; bad = 1 } exit bad }' "$TMP/out.txt" ||
    fail "attention table"
want=$(sed -n 's/.*self_attention.png and .svg (\([0-9]*x[0-9]*\) px).*/\1/p' "$TMP/out.txt")
[ -n "$want" ] && [ "$(png_size "$TMP/a/self_attention.png")" = "$want" ] ||
    fail "self_attention.png is $(png_size "$TMP/a/self_attention.png"), printed '$want'"
head -c 200 "$TMP/a/self_attention.svg" | grep -q '<svg' || fail "self_attention.svg is not an SVG"

# Same seed -> same table; another seed -> another table.
"$QKV" attention --seed 3 --out "$TMP/b" > "$TMP/out2.txt"
diff <(grep -E '^(I|love|deep|learning) ' "$TMP/out.txt") <(grep -E '^(I|love|deep|learning) ' "$TMP/out2.txt") ||
    fail "same seed gave a different table"
"$QKV" attention --seed 4 --out "$TMP/c" > "$TMP/out3.txt"
! diff -q <(grep -E '^(I|love|deep|learning) ' "$TMP/out.txt") <(grep -E '^(I|love|deep|learning) ' "$TMP/out3.txt") > /dev/null ||
    fail "seeds 3 and 4 gave the same table"

# --out naming an existing file: a usage error (exit 2) naming the flag, before any output.
touch "$TMP/file"
set +e
"$QKV" attention --out "$TMP/file" > "$TMP/o4.txt" 2> "$TMP/e4.txt"; rc=$?
set -e
[ "$rc" = 2 ] || { cat "$TMP/e4.txt"; fail "attention --out FILE: exit $rc, want 2"; }
grep -qF "qkv: error: --out '$TMP/file' is an existing file, not a folder" "$TMP/e4.txt" ||
    { cat "$TMP/e4.txt"; fail "attention --out FILE: message"; }
[ ! -s "$TMP/o4.txt" ] || fail "attention --out FILE printed the tables before failing"
echo "test_attention: ok"
