#!/usr/bin/env bash
# The qkv program's OpenMP waiting default (apps/qkv/main.cpp): passive unless the user chose a
# policy or a spin count. libgomp prints its settings at start-up with OMP_DISPLAY_ENV=verbose,
# once per exec, so a re-execution shows up as a second block.
source "$(dirname "$0")/lib.sh" "$1"
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
show() { env "$@" OMP_DISPLAY_ENV=verbose "$QKV" --version 2>&1 | grep -E "OMP_WAIT_POLICY|GOMP_SPINCOUNT" | tr -d " '" | paste -sd' '; }
got="$(show)"
case "$got" in "OMP_WAIT_POLICY="*" GOMP_SPINCOUNT="*" OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=0") ;;
  *) fail "no settings: want a re-exec with a passive policy (spin count 0), got: $got" ;; esac
[ "$(echo "$got" | wc -w)" = 4 ] || fail "no settings: want exactly one re-exec, got: $got"
got="$(show GOMP_SPINCOUNT=10000)"
[ "$got" = "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000" ] ||
  fail "GOMP_SPINCOUNT=10000: want it kept without a re-exec, got: $got"
got="$(show OMP_WAIT_POLICY=active)"
case "$got" in "OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT="*) ;; *) fail "OMP_WAIT_POLICY=active: want it kept, got: $got" ;; esac
[ "$(echo "$got" | wc -w)" = 2 ] || fail "OMP_WAIT_POLICY=active: re-executed: $got"
echo "ok"
