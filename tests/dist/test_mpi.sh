#!/usr/bin/env bash
# MPI collectives, refusal of mismatched ranks, and a stuck rank stopping the job within the
# timeout (dist/communicator.h). Usage: test_mpi.sh PATH/mpi_probe
set -u
probe=$1
# Open MPI refuses root without these; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0 failed=0
check() { if eval "$2"; then pass=$((pass + 1)); else failed=$((failed + 1)); echo "FAIL: $1"; fi; }
out=$(mpirun -np 2 "$probe" collectives 2>&1); rc=$?
echo "$out"
check "collectives with 2 ranks exit 0" '[ $rc -eq 0 ]'
check "both ranks ok" '[ "$(grep -c ": ok" <<<"$out")" -eq 2 ]'
out=$(mpirun -np 3 "$probe" collectives 2>&1); rc=$?
check "collectives with 3 ranks" '[ $rc -eq 0 ] && [ "$(grep -c ": ok" <<<"$out")" -eq 3 ]'
for np in 2 3; do
  out=$(mpirun -np $np "$probe" grad_sync 2>&1); rc=$?
  echo "$out"
  check "grad_sync with $np ranks" '[ $rc -eq 0 ] && [ "$(grep -c "grad_sync ok" <<<"$out")" -eq $np ]'
done
out=$(mpirun -np 2 "$probe" mismatch 2>&1); rc=$?
echo "$out"
check "mismatch refused on every rank" '[ $rc -eq 0 ] && [ "$(grep -c "refused: --data differs between ranks: rank 1 has .file-b. against rank 0.s .file-a." <<<"$out")" -eq 2 ]'
t0=$SECONDS
out=$(QKV_DIST_TIMEOUT=2 timeout 60 mpirun -np 2 "$probe" hang 2>&1); rc=$?
dt=$((SECONDS - t0))
echo "$out" | head -5
check "a stuck rank stops the job (exit != 0, not the 60 s guard)" '[ $rc -ne 0 ] && [ $rc -ne 124 ]'
check "within the bound ($dt s)" '[ $dt -lt 30 ]'
check "rank 0 names rank 1" 'grep -q "qkv: rank 0: allreduce #1 (10 elements) did not complete within 2 s (QKV_DIST_TIMEOUT=2): rank(s) 1 never reached it" <<<"$out"'
echo "$pass passed, $failed failed"
[ $failed -eq 0 ]
