#!/usr/bin/env bash
# MPI collectives, refusal of mismatched ranks, and a stuck rank stopping the job within the
# timeout (dist/communicator.h). Usage: test_mpi.sh PATH/mpi_probe
set -u
probe=$1
# Open MPI refuses root without these; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Under `make test-asan`: no leak check in processes mpirun starts. Open MPI's plugins (PMIx, hwloc,
# the MCA components, dlopen'ed and unloaded again before exit) leave their process-wide state
# behind in stacks LeakSanitizer cannot attribute to a library (frames in "<unknown module>"), so
# no suppression can match them. ASan's memory-error checks stay on; qkv's own leaks are checked
# by the single-process tests of the same code (test_dist, test_data_parallel, cli.test_train).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# The marker a rank leaves when it explains a lost rank (dist/mpi_communicator.cpp) goes to TMPDIR.
T0=$(mktemp -d); export TMPDIR="$T0"
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
check "mismatch refused on every rank" '[ $rc -eq 0 ] && [ "$(grep -c "refused: the ranks disagree on --data: rank 1 has .file-b. where rank 0 has .file-a." <<<"$out")" -eq 2 ]'
# rank 1 sleeps 120 s; the watchdog (2 s) must end the job long before, and before the guard's
# 60 s (a failure's bound only).
out=$(QKV_DIST_TIMEOUT=2 timeout 60 mpirun -np 2 "$probe" hang 2>&1); rc=$?
echo "$out" | head -5
check "a stuck rank stops the job (exit != 0, not the 60 s guard)" '[ $rc -ne 0 ] && [ $rc -ne 124 ]'
check "rank 0 names rank 1" 'grep -q "qkv: rank 0: allreduce #1 (10 elements) did not complete within 2 s (QKV_DIST_TIMEOUT=2): rank(s) 1 never reached it" <<<"$out"'
check "and says it lost rank 1, once" '[ "$(grep -c "^qkv: rank 1 lost (no answer within QKV_DIST_TIMEOUT=2 s in allreduce #1); no checkpoint was written yet (nothing to resume)$" <<<"$out")" = 1 ]'

# ---- data-parallel training (Trainer with a communicator; mpi_probe train) ----
st_diff() { /usr/bin/python3 "$(dirname "$0")/st_diff.py" "$@" | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p'; }
T=$(mktemp -d); trap 'rm -rf "$T" "$T0"' EXIT
train() { local np=$1 dir=$2; shift 2; mpirun -np "$np" "$probe" train "$T/$dir" "$@" > "$T/$dir.txt" 2> "$T/$dir.err" || { cat "$T/$dir.err"; return 1; }; }
# Tolerances. Loss: the 2-rank loss is the sum of two partial means instead of one mean, and the
# gradients sums of two shares: fp32 reordering, a few ulp per step; 1e-5 relative is ~100x what
# 20 steps showed (3e-8). Parameters: Adam moves each element by up to lr = 1e-3 per step and
# normalises the gradient, so an element whose gradient is rounding noise can move differently
# on the two sides; 1e-4 (a tenth of one step's largest move) says no update was changed by more
# than that over 20 steps (seen: 2.7e-6).
close_losses() { paste <(grep "^loss" "$1") <(grep "^loss" "$2") | awk '{d=$3-$6; if (d<0) d=-d; r=d/($3<0?-$3:$3); if (r>m) m=r; if ($2!=$5) bad=1} END {if (bad || NR!=20) exit 1; print m+0; exit (m > 1e-5)}'; }
check "1 process (mpirun -np 1), 20 steps" 'train 1 one 20 0 1 0'
check "2 ranks, overlapped reduction, 20 steps" 'train 2 two 20 0 1 0'
check "2 ranks, reduction after backward" 'train 2 two_after 20 0 0 0'
check "2 ranks again" 'train 2 two_again 20 0 1 0'
check "2-rank losses = 1-process losses within 1e-5 relative" 'close_losses "$T/one.txt" "$T/two.txt" > "$T/rel"'
echo "largest relative loss difference, 2 ranks vs 1: $(cat "$T/rel")"
# Validation is sharded (Trainer::evaluate_loss): rank r of 2 evaluates batches r, r + 2 of the 3
# (3, 3 and 2 pairs) and the sums are all-reduced. The same 1e-5 as the training losses: the
# models differ by the fp32 reordering above, the batches' losses are summed in another order.
close_vals() { paste <(grep "^val" "$1") <(grep "^val" "$2") | awk '{d=$3-$6; if (d<0) d=-d; r=d/($3<0?-$3:$3); if (r>m) m=r; if ($2!=$5) bad=1} END {if (bad || NR!=10) exit 1; print m; exit (m > 1e-5)}'; }
check "2-rank validation losses = 1-process ones within 1e-5 relative (10 epochs)" 'close_vals "$T/one.txt" "$T/two.txt" > "$T/vrel"'
echo "largest relative validation loss difference, 2 ranks vs 1: $(cat "$T/vrel")"
# 10 validations of 3 batches: one process evaluates 30, rank 0 of 2 batches 0 and 2 (20), rank 1 batch 1 (10)
check "the validation work is split: 30 batches = 20 on rank 0 + 10 on rank 1" 'grep -q "^rank 0 evaluated 30 validation batches" "$T/one.err" && grep -q "^rank 0 evaluated 20 validation batches" "$T/two.err" && grep -q "^rank 1 evaluated 10 validation batches" "$T/two.err"'
d=$(st_diff "$T/one/model.safetensors" "$T/two/model.safetensors")
echo "largest parameter difference after 20 steps, 2 ranks vs 1: $d"
check "2-rank parameters = 1-process parameters within 1e-4" 'awk -v d="$d" "BEGIN {exit !(d != \"\" && d <= 1e-4)}"'
check "2-rank runs repeat bitwise (losses)" 'cmp -s "$T/two.txt" "$T/two_again.txt"'
check "2-rank runs repeat bitwise (parameters)" '[ "$(st_diff "$T/two/model.safetensors" "$T/two_again/model.safetensors")" = 0 ]'
check "overlapped = after-backward bitwise" 'cmp -s "$T/two.txt" "$T/two_after.txt"'
# Resume with another world size: 2 ranks to step 10, 1 to 20 (and the reverse) = 1 process to 20.
check "2 ranks to step 10" 'train 2 r21 10 0 1 0'
check "resumed with 1 to step 20" 'train 1 r21 20 1 1 0'
check "1 to step 10" 'train 1 r12 10 0 1 0'
check "resumed with 2 to step 20" 'train 2 r12 20 1 1 0'
# The resumed steps 11-20 against the uninterrupted run's (every one, not only the last): the same
# batches in the same order, so only the reduction's summation order differs (2 shares summed
# vs one batch), the tolerance of close_losses; the largest difference is printed (docs/distributed.md).
resumed_losses() { grep -E "^loss (1[1-9]|20) " "$1"; }
close_resumed() { paste <(resumed_losses "$1") <(grep "^loss" "$2") | awk '{d=$3-$6; if (d<0) d=-d; r=d/($3<0?-$3:$3); if (r>m) m=r; if ($2!=$5) bad=1} END {if (bad || NR!=10) exit 1; printf "%.3g\n", m; exit (m > 1e-5)}'; }
for r in r21 r12; do
  d=$(st_diff "$T/one/model.safetensors" "$T/$r/model.safetensors")
  echo "$r: largest parameter difference from the uninterrupted 1-process run: $d"
  check "$r equals the uninterrupted run within 1e-4" 'awk -v d="$d" "BEGIN {exit !(d != \"\" && d <= 1e-4)}"'
  check "$r step-20 loss within 1e-5 relative" '[ "$(grep "^loss 20 " "$T/$r.txt" | awk "{print \$3}")" != "" ] && awk -v a="$(grep "^loss 20 " "$T/$r.txt" | cut -d" " -f3)" -v b="$(grep "^loss 20 " "$T/one.txt" | cut -d" " -f3)" "BEGIN {d=a-b; if (d<0) d=-d; exit !(d <= 1e-5*b)}"'
  check "$r resumed losses (steps 11-20) = the uninterrupted 1-process run's within 1e-5 relative" 'close_resumed "$T/one.txt" "$T/$r.txt" > "$T/$r.rel"'
  echo "$r: largest relative loss difference over the resumed steps 11-20, vs 1 process: $(cat "$T/$r.rel")"
done
# What stays bitwise across N: a 2-rank checkpoint resumed on 2 ranks continues the 2-rank run
# exactly (the next check's dropout case, and the sharded one below); 2 -> 1 and 1 -> 2 continue
# within the reordering above.

# ---- ZeRO stage 1 (TrainOptions::shard_optimizer): Adam's moments sharded over the ranks ----
# With 2 ranks the sharded run must equal the unsharded one within close_losses' 1e-5 (the
# reduce-scatter's sum of 2 shares is the all-reduce's, a + b = b + a; only the clipping norm's
# double sum is grouped by shard); the parameters within the 1e-4 above. Seen: bitwise equal.
check "2 ranks, sharded optimizer, 20 steps" 'train 2 zero 20 0 1 0 1'
check "sharded losses = unsharded 2-rank losses within 1e-5 relative" 'close_losses "$T/two.txt" "$T/zero.txt" > "$T/zrel"'
echo "largest relative loss difference, 2 ranks sharded vs unsharded: $(cat "$T/zrel")"
d=$(st_diff "$T/two/model.safetensors" "$T/zero/model.safetensors")
echo "largest parameter difference after 20 steps, sharded vs unsharded: $d"
check "sharded parameters = unsharded within 1e-4" 'awk -v d="$d" "BEGIN {exit !(d != \"\" && d <= 1e-4)}"'
d=$(st_diff "$T/two/checkpoint.safetensors" "$T/zero/checkpoint.safetensors" --prefix optim.)
echo "largest Adam state difference in the checkpoints, sharded (gathered) vs unsharded: $d"
check "the sharded checkpoint holds Adam's whole state (same tensors, within 1e-4)" 'awk -v d="$d" "BEGIN {exit !(d != \"\" && d <= 1e-4)}"'
# Memory: each rank holds its shard's moments only. Boundaries move down to a multiple of 16
# elements of their tensor (zero_shard_bounds), so rank 0 holds (T/2 - 8 x 16, T/2] bytes of
# the T bytes Adam holds (8 per element), rank 1 the rest.
state() { sed -n "s/^rank $2 optimizer state \([0-9]*\) of \([0-9]*\) bytes$/\1 \2/p" "$1"; }
echo "optimizer state per rank, sharded over 2: $(state "$T/zero.err" 0) / $(state "$T/zero.err" 1); unsharded: $(state "$T/two.err" 0)"
check "unsharded: each rank holds Adam's whole state" 'state "$T/two.err" 0 | awk "{exit !(\$1 == \$2 && \$2 > 0)}" && state "$T/two.err" 1 | awk "{exit !(\$1 == \$2)}"'
check "sharded over 2: each rank holds half of it (within 16 elements), together all of it" \
  'a=($(state "$T/zero.err" 0)) b=($(state "$T/zero.err" 1)); [ -n "${a[1]:-}" ] && [ $((a[0] + b[0])) -eq ${a[1]} ] && [ $((a[1] / 2 - a[0])) -ge 0 ] && [ $((a[1] / 2 - a[0])) -lt 128 ]'
# A sharded checkpoint (one file, the whole state) resumes on 1 process, and sharded on 2 ranks;
# an unsharded one resumes sharded (re-sharded on load).
check "2 ranks sharded to step 10" 'train 2 zr1 10 0 1 0 1 && cp -r "$T/zr1" "$T/zr2"'
check "resumed on 1 process to step 20" 'train 1 zr1 20 1 1 0 0'
check "resumed on 2 ranks sharded to step 20" 'train 2 zr2 20 1 1 0 1'
check "1 process to step 10" 'train 1 zr12 10 0 1 0 0'
check "resumed on 2 ranks sharded to step 20" 'train 2 zr12 20 1 1 0 1'
check "2 sharded -> 2 sharded: the resumed losses equal the uninterrupted sharded run's bitwise" '[ "$(grep -c "^loss" "$T/zr2.txt")" = 10 ] && cmp -s <(resumed_losses "$T/zero.txt") <(grep "^loss" "$T/zr2.txt")'
check "2 sharded -> 2 sharded: the parameters bitwise" '[ "$(st_diff "$T/zero/model.safetensors" "$T/zr2/model.safetensors")" = 0 ]'
for r in zr1 zr12; do
  check "$r: the resumed losses = the uninterrupted 1-process run's within 1e-5 relative" 'close_resumed "$T/one.txt" "$T/$r.txt" > "$T/$r.rel"'
  d=$(st_diff "$T/one/model.safetensors" "$T/$r/model.safetensors")
  echo "$r: largest relative loss difference over steps 11-20: $(cat "$T/$r.rel"); largest parameter difference: $d"
  check "$r: the parameters within 1e-4" 'awk -v d="$d" "BEGIN {exit !(d != \"\" && d <= 1e-4)}"'
done
# 3 ranks: blocks of 3 ranks' sums, reduce-scattered instead of all-reduced (another summation
# order is allowed here): the same 1e-5.
check "3 ranks, sharded, 20 steps" 'train 3 zero3 20 0 1 0 1'
check "3 ranks sharded = 1 process within 1e-5 relative" 'close_losses "$T/one.txt" "$T/zero3.txt" > "$T/z3rel"'
echo "largest relative loss difference, 3 ranks sharded vs 1 process: $(cat "$T/z3rel")"
out=$(mpirun -np 1 "$probe" train "$T/zm" 20 0 1 0 1 : -np 1 "$probe" train "$T/zm" 20 0 1 0 0 2>&1); rc=$?
check "ranks disagreeing on the sharding refused" '[ $rc -ne 0 ] && grep -q "the ranks disagree on the training options: rank 1 has .*shard_optimizer 0" <<<"$out"'
# With dropout each rank draws its own masks; a resume at the same N continues them exactly (each
# rank's stream is positioned by the step, not by its earlier draws, which differ between ranks).
check "2 ranks with dropout, 20 steps" 'train 2 drop 20 0 1 0.1'
check "2 ranks with dropout to step 10" 'train 2 dropr 10 0 1 0.1'
check "resumed with 2 ranks to step 20" 'train 2 dropr 20 1 1 0.1'
check "the resumed steps' losses equal the uninterrupted run's bitwise" '[ "$(grep -c "^loss" "$T/dropr.txt")" = 10 ] && cmp -s <(grep -E "^loss (1[1-9]|20) " "$T/drop.txt") <(grep "^loss" "$T/dropr.txt")'
check "the resumed parameters equal the uninterrupted run's bitwise" '[ "$(st_diff "$T/drop/model.safetensors" "$T/dropr/model.safetensors")" = 0 ]'
# Ranks that would train different things are refused before anything is written.
out=$(mpirun -np 1 "$probe" train "$T/mm" 20 0 1 0 : -np 1 "$probe" train "$T/mm" 21 0 1 0 2>&1); rc=$?
check "mismatched options refused" '[ $rc -ne 0 ] && grep -q "the ranks disagree on the training options: rank 1 has .epochs 100, max_steps 21" <<<"$out"'
check "nothing written for a refused run" '[ ! -e "$T/mm" ]'
out=$(mpirun -np 1 "$probe" train "$T/mr" 20 0 1 0 : -np 1 "$probe" train "$T/mr" 20 0 0 0 2>&1); rc=$?
check "mismatched --grad-reduce refused" '[ $rc -ne 0 ] && grep -q "the ranks disagree on the gradient reduction (--grad-reduce, bucket sizes): rank 1 has .after-backward" <<<"$out"'
# A rank killed mid-run: the job ends by itself (mpirun's own report names the rank) and the last
# checkpoint loads and resumes.
# The rank left says which rank was lost between mpirun's SIGTERM and its SIGKILL
# (odls_base_sigkill_timeout, 1 s); 5 s keeps that independent of the machine's load (mpirun
# sleeps them all before it exits).
OMPI_MCA_odls_base_sigkill_timeout=5 mpirun -np 2 "$probe" train "$T/kill" 100000 0 1 0.1 > "$T/kill.txt" 2> "$T/kill.err" &
mp=$!
for _ in $(seq 1 2400); do  # polls; 120 s is a failure's bound only
  n=$(grep -c '"kind":"step"' "$T/kill/metrics.jsonl" 2> /dev/null) || true
  [ "${n:-0}" -gt 40 ] && break
  sleep 0.05
done
victim=""
for p in $(pgrep -f "mpi_probe train $T/kill"); do
  tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
check "found rank 1 of the running job" '[ -n "$victim" ]'
[ -n "$victim" ] && kill -9 "$victim"
# Polls until mpirun exits; 120 s is a failure's bound only (the job would otherwise run 100000 steps).
ended=no
for _ in $(seq 1 1200); do kill -0 $mp 2> /dev/null || { ended=yes; break; }; sleep 0.1; done
kill -9 $mp 2> /dev/null; wait $mp; rc=$?
check "the job ends by itself after the kill (exit $rc)" '[ $ended = yes ] && [ $rc -ne 0 ]'
check "mpirun names the killed rank" 'grep -q "rank 1 .*exited on signal 9" "$T/kill.err"'
check "rank 0 says, once, that rank 1 was lost and where the last checkpoint is" '[ "$(grep -c "^qkv: rank 1 lost (its process on .* ended: killed or crashed); the last checkpoint is $T/kill/checkpoint.safetensors (step [0-9]*)$" "$T/kill.err")" = 1 ]'
check "the last checkpoint resumes" 'mpirun -np 1 "$probe" train "$T/kill" $(( $(grep -c "\"kind\":\"step\"" "$T/kill/metrics.jsonl") + 4 )) 1 1 0.1 > "$T/kill2.txt" 2>&1'
echo "$pass passed, $failed failed"
[ $failed -eq 0 ]
