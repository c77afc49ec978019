#!/usr/bin/env bash
# test_interrupt's kill-note test (InterruptGuard.TheSecondSignalCarriesOutTheArmedKillNote) makes,
# kills over and checks a file in the temporary folder: its name must be its own process's. A file
# of another run (here one at the per-user name the test used before) is left alone, and runs at
# the same time (three rounds of four) all pass and leave nothing behind.
# Usage: test_killnote_concurrent.sh /path/to/test_io
set -euo pipefail
BIN="$1"
TMPDIR="$(mktemp -d)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
filter=--gtest_filter=InterruptGuard.TheSecondSignalCarriesOutTheArmedKillNote
other="$TMPDIR/qkv_killnote_test_$(id -u).safetensors.tmp.1"
echo "another run's" > "$other"
"$BIN" "$filter" > "$TMPDIR/log" 2>&1 || { cat "$TMPDIR/log"; fail "the kill-note test failed"; }
grep -q "1 test" "$TMPDIR/log" || { cat "$TMPDIR/log"; fail "the kill-note test did not run"; }
[ "$(cat "$other" 2> /dev/null)" = "another run's" ] || fail "the kill-note test wrote or removed another run's file"
rm "$other"
for round in 1 2 3; do
  pids=()
  for i in 1 2 3 4; do
    # (A background job of a script starts with SIGINT ignored, which the test's guard keeps.)
    env --default-signal=INT "$BIN" "$filter" > "$TMPDIR/log.$round.$i" 2>&1 &
    pids+=($!)
  done
  for i in 1 2 3 4; do
    wait "${pids[$((i - 1))]}" || { cat "$TMPDIR/log.$round.$i"; fail "round $round, run $i of 4 at once failed"; }
  done
done
left="$(ls -A "$TMPDIR" | grep qkv_killnote_test_ || true)"
[ -z "$left" ] || fail "left behind: $left"
echo "ok"
