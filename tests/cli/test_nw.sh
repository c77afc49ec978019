#!/usr/bin/env bash
# CLI test of `qkv nw` (run by ctest with the qkv binary as $1): PyTorch parity of every epoch on
# the seed program's 150 points (tests/fixtures/nw_seed_*.csv from tools/gen_fixtures.py), the
# printed lines, the plot files (PNG IHDR size), the other modes, input/usage errors, and no
# outputs left from an earlier run that this run did not write.
source "$(dirname "$0")/lib.sh" "${1:?usage: test_nw.sh path/to/qkv}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIX=$ROOT/tests/fixtures

# ---- the seed program on PyTorch's data ----
"$QKV" nw --data "$FIX/nw_seed_data.csv" --out "$T/nw" > "$T/out.txt" || fail "qkv nw exited $?"
# Every epoch's loss and w within 1e-4 relative of PyTorch (history.csv keeps 9 digits).
paste -d, <(grep -v '^#' "$FIX/nw_seed_history.csv" | tail -n +2) <(tail -n +2 "$T/nw/history.csv") |
    awk -F, 'function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
             { n++; if ($1 != $4) { print "epoch mismatch " $1 " " $4; bad = 1 }
               if (rel($5, $2) > 1e-4) { print "epoch " $1 ": loss " $5 " vs " $2; bad = 1 }
               if (rel($6, $3) > 1e-4) { print "epoch " $1 ": w " $6 " vs " $3; bad = 1 } }
             END { if (n != 20) { print "expected 20 epochs, got " n; bad = 1 } exit bad }' ||
    fail "history differs from PyTorch"
# The printed lines have the seed's format, from the same numbers.
grep -v '^#' "$FIX/nw_seed_history.csv" | tail -n +2 |
    awk -F, '{ printf "epoch %02d, loss = %.4f, w = %.4f\n", $1, $2, $3 }' > "$T/want.txt"
grep '^epoch ' "$T/out.txt" > "$T/got.txt"
diff "$T/want.txt" "$T/got.txt" || fail "printed epoch lines differ from PyTorch's"
# Plots: PNG + SVG of the fit, the attention heatmap and the loss curve.
for f in fit attention loss; do
    [ -s "$T/nw/$f.png" ] || fail "missing $f.png"
    head -c 200 "$T/nw/$f.svg" | grep -q '<svg' || fail "$f.svg is not an SVG"
done
[ "$(png_size "$T/nw/fit.png")" = "640x420" ] || fail "fit.png is $(png_size "$T/nw/fit.png")"
[ "$(png_size "$T/nw/loss.png")" = "640x420" ] || fail "loss.png is $(png_size "$T/nw/loss.png")"
want=$(sed -n 's/.*attention.png and .svg (\([0-9]*x[0-9]*\) px).*/\1/p' "$T/out.txt")
[ -n "$want" ] && [ "$(png_size "$T/nw/attention.png")" = "$want" ] ||
    fail "attention.png is $(png_size "$T/nw/attention.png"), printed '$want'"

# ---- generated data, D2L ZH preset, non-parametric ----
"$QKV" nw --seed 1 --epochs 3 --out "$T/gen" > "$T/gen.txt" || fail "generated run failed"
[ "$(grep -c '^epoch 0[1-3], loss = [0-9.]*, w = [0-9.]*$' "$T/gen.txt")" = 3 ] || fail "generated run: epoch lines"
grep -q '150 training points' "$T/gen.txt" || fail "seed preset should use 150 points"
grep -q 'test MSE against the true function' "$T/gen.txt" || fail "no test MSE"
"$QKV" nw --preset zh --out "$T/zh" > "$T/zh.txt" || fail "zh preset failed"
[ "$(grep -c '^epoch [1-5], loss [0-9]*\.[0-9]\{6\}$' "$T/zh.txt")" = 5 ] || fail "zh preset: 5 D2L-style epoch lines"
grep -q '50 training points' "$T/zh.txt" || fail "zh preset should use 50 points"
"$QKV" nw --kernel-width 0.5 --out "$T/np" > "$T/np.txt" || fail "non-parametric run failed"
grep -q 'no training' "$T/np.txt" || fail "non-parametric run should say so"
! grep -q '^epoch' "$T/np.txt" || fail "non-parametric run printed epochs"
[ -s "$T/np/attention.png" ] && [ ! -e "$T/np/history.csv" ] || fail "non-parametric outputs"

# ---- errors: bad rows with their line number (exit 1), usage errors (exit 2) ----
printf 'x,y\n1,2\n3,oops\n' > "$T/bad.csv"
set +e
"$QKV" nw --data "$T/bad.csv" --out "$T/e" 2> "$T/err.txt"; rc=$?
set -e
[ $rc = 1 ] || fail "bad CSV: exit $rc, want 1"
grep -q 'bad.csv:3: expected two numbers' "$T/err.txt" || fail "bad CSV message: $(cat "$T/err.txt")"
printf '1,2\nnan,3\n4,5\n' > "$T/nan.csv"
set +e
"$QKV" nw --data "$T/nan.csv" --out "$T/e" 2> "$T/err.txt"; rc=$?
set -e
[ $rc = 1 ] && grep -q 'nan.csv:2: values must be finite' "$T/err.txt" || fail "NaN row: exit $rc, $(cat "$T/err.txt")"
for args in "--n-train 1" "--n-train 0" "--epochs 0" "--preset zh --epochs 0" "--kernel-width 0.5 --epochs 3" "--data $FIX/nw_seed_data.csv --n-train 10" "--preset en" "--lr -1"; do
    set +e
    # shellcheck disable=SC2086
    "$QKV" nw $args --out "$T/e" > /dev/null 2>&1; rc=$?
    set -e
    [ $rc = 2 ] || fail "'qkv nw $args': exit $rc, want 2 (usage error)"
done
# ---- outputs match the run: --epochs 0 is refused before anything is written (an earlier run's
# loss plot would stay beside this run's fit); a --kernel-width run removes the earlier loss plot
# and history.csv ----
cp "$T/gen/history.csv" "$T/history.before"
set +e
"$QKV" nw --epochs 0 --out "$T/gen" > /dev/null 2> "$T/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -qF "qkv: error: --epochs: 0 is out of range: expected an integer from 1 to" "$T/err.txt" ||
    fail "--epochs 0: exit $rc, $(cat "$T/err.txt")"
cmp -s "$T/gen/history.csv" "$T/history.before" || fail "--epochs 0 changed history.csv"
"$QKV" nw --kernel-width 0.5 --out "$T/gen" > /dev/null || fail "non-parametric run into an earlier run's folder"
for f in loss.png loss.svg history.csv; do [ ! -e "$T/gen/$f" ] || fail "a --kernel-width run left $f"; done
[ -s "$T/gen/fit.png" ] && [ -s "$T/gen/attention.svg" ] || fail "non-parametric run: no fit or attention plot"

# ---- too many points to draw: refused before training, nothing written (it trained, wrote fit.png,
# then failed on attention.png) ----
set +e
"$QKV" nw --n-train 3901 --epochs 1 --out "$T/big" > /dev/null 2> "$T/err.txt"; rc=$?
set -e
# the help's range is what can be drawn (it said [2, 5000] and refused 5000 after the parse)
[ $rc = 2 ] && grep -qF "qkv: error: --n-train: 3901 is out of range: expected an integer from 2 to 3900" "$T/err.txt" ||
    fail "--n-train 3901: exit $rc, $(cat "$T/err.txt")"
"$QKV" nw --help > "$T/nw_help.out" || fail "nw --help"  # captured: grep -q in a pipe would SIGPIPE it
grep -qF -- "--n-train INT:[2, 3900]" "$T/nw_help.out" || fail "nw --help: $(grep -- --n-train "$T/nw_help.out")"
[ -z "$(ls -A "$T/big" 2>/dev/null)" ] || fail "--n-train 3901 wrote $(ls "$T/big")"
seq 1 5000 | awk '{ print $1 / 1000 "," $1 % 7 }' > "$T/big.csv"
set +e
"$QKV" nw --data "$T/big.csv" --epochs 1 --out "$T/big" > /dev/null 2> "$T/err.txt"; rc=$?
set -e
[ $rc = 1 ] && grep -qF "big.csv: 5000 training points make the attention heatmap" "$T/err.txt" ||
    fail "--data with 5000 rows: exit $rc, $(cat "$T/err.txt")"
[ -z "$(ls -A "$T/big" 2>/dev/null)" ] || fail "--data with 5000 rows wrote $(ls "$T/big")"
"$QKV" nw --n-train 1000 --epochs 1 --out "$T/mid" > /dev/null || fail "--n-train 1000 refused"
echo "test_nw: ok"
