#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): results and conflicts that must be refused
# before any output is written or a model is loaded, and messages that name the file or flag.
source "$(dirname "$0")/lib.sh" "$1"

# ---- qkv nw: a kernel so narrow that it underflows for every training point gives no result ----
run_rc 2 nw --kernel-width 1e-30 --out "$T/nw"
err_has "qkv: error: --kernel-width 1e-30: the Gaussian kernel underflows" "test query x = 0"
[ ! -e "$T/nw" ] || fail "nw --kernel-width 1e-30 wrote $(ls "$T/nw")"
grep -q nan "$T/out" && fail "nw printed a NaN"
run_rc 0 nw --kernel-width 1e-19 --out "$T/nw"  # narrow, but every query keeps its nearest point
out_has "test MSE against the true function: 0."
run_rc 0 nw --epochs 1 --out "$T/nw1"
out_has "1 epoch, loss"
