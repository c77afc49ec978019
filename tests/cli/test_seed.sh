#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): --seed of nw, attention and train takes a whole
# number from 0 to 2^64 - 1. A negative or overflowing value is a usage error naming the flag
# (CLI11 alone read both as 18446744073709551615 without a word); the largest value is accepted.
source "$(dirname "$0")/lib.sh" "$1"
cd "$T"
for cmd in nw attention train; do
  extra=()
  [ "$cmd" = train ] && extra=(--preset d2l)
  for bad in -1 18446744073709551616 99999999999999999999999 1.5 abc; do
    run_rc 2 "$cmd" "${extra[@]}" --out "$T/o" --seed "$bad"
    err_has "qkv: error: --seed: " "an integer from 0 to 18446744073709551615"
  done
  run_rc 2 "$cmd" "${extra[@]}" --out "$T/o" --seed ""  # as any flag given ""
  err_has "qkv: error: --seed: empty value"
  [ ! -e "$T/o" ] || fail "$cmd --seed BAD created --out"
done
run_rc 0 attention --seed 18446744073709551615 --out "$T/a"
out_has "seed 18446744073709551615)"
echo "test_seed: ok"
