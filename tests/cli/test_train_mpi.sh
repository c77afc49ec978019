#!/usr/bin/env bash
# `mpirun -np N qkv train` (data-parallel training, docs/distributed.md), on the
# six-pair corpus written here, 2 ranks oversubscribed on this machine:
#  1. 2 ranks give the 1-process run's per-step losses (1e-5 relative) and parameters (1e-4) after
#     20 steps, with the gradients reduced during backward and after it (bitwise equal); the header
#     names the ranks and config.json records world_size.
#  2. ranks given different flags (MPMD: --lr, --grad-reduce) or different --data files are
#     refused before anything is written, naming what differs; --model lm and other commands
#     than train and eval are refused under mpirun -np 2; mpirun -np 2 qkv eval prints what one
#     process prints, once.
#  3. SIGTERM to mpirun stops both ranks at the same step with a checkpoint; --resume with 1
#     process continues it and records world_size 1.
#  4. kill -9 of rank 1: the job ends with one qkv line naming rank 1, the folder's last
#     checkpoint and the resume command, which resumes it.
# (The collectives, a stuck rank and a killed rank: tests/dist/test_mpi.sh.)
# Usage: test_train_mpi.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
command -v mpirun > /dev/null || fail "mpirun not found (scripts/install_deps.sh installs openmpi-bin)"
# Open MPI refuses root without these; oversubscription lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Under `make test-asan`: no leak check in processes mpirun starts. Open MPI's plugins (PMIx, hwloc,
# the MCA components, dlopen'ed and unloaded again before exit) leave their process-wide state
# behind in stacks LeakSanitizer cannot attribute to a library (frames in "<unknown module>"), so
# no suppression can match them. ASan's memory-error checks stay on; qkv's own leaks are checked
# by the single-process tests of the same code (test_dist, test_data_parallel, cli.test_train).
# A collective that never completes fails the test with the watchdog's message long before ctest's timeout.
export QKV_DIST_TIMEOUT="${QKV_DIST_TIMEOUT:-120}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# The marker a rank leaves when it explains a lost rank (dist/mpi_communicator.cpp) goes to TMPDIR.
export TMPDIR="$T"
six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --dropout 0 --log-every 1)
data=(--data "$T/fra.txt")
mp=""
trap '[ -z "$mp" ] || kill "$mp" 2> /dev/null || true; rm -rf "$T"' EXIT
st_diff() { /usr/bin/python3 "$(dirname "$0")/../dist/st_diff.py" "$@" | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p'; }
losses() { sed -n 's/.*"kind":"step","step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }

# 1. equivalence
run_rc 0 --threads 1 train "${small[@]}" "${data[@]}" --max-steps 20 --out "$T/one"
mpirun -np 2 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 20 --out "$T/two" > "$T/two.out" 2> "$T/two.err" \
  || { cat "$T/two.err"; fail "mpirun -np 2 qkv train failed"; }
grep -q "data-parallel over 2 ranks (mpi; gradients reduced during backward; global batch 8)" "$T/two.err" \
  || { cat "$T/two.err"; fail "the train header does not name the 2 ranks"; }
[ "$(grep -c 'qkv train: preset' "$T/two.err")" = 1 ] || fail "ranks other than 0 printed the header"
mpirun -np 2 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 20 --grad-reduce after-backward --out "$T/after" \
  > /dev/null 2> "$T/after.err" || { cat "$T/after.err"; fail "--grad-reduce after-backward failed"; }
grep -q '"world_size": 2' "$T/two/config.json" || fail "config.json lacks world_size 2"
grep -q '"world_size": 1' "$T/one/config.json" || fail "config.json lacks world_size 1"
losses "$T/one" > "$T/l1"; losses "$T/two" > "$T/l2"; losses "$T/after" > "$T/l3"
[ "$(wc -l < "$T/l1")" = 20 ] || fail "expected 20 step records, got $(wc -l < "$T/l1")"
# Tolerances as tests/dist/test_mpi.sh (fp32 reordering of the loss mean and the gradient sum).
paste "$T/l1" "$T/l2" | awk '{d=$2-$4; if (d<0) d=-d; if ($1!=$3 || d > 1e-5*$2) {print "step " $1 ": " $2 " vs " $4; bad=1}} END {exit bad}' \
  || fail "2-rank losses differ from the 1-process run's by more than 1e-5 relative"
d=$(st_diff "$T/one/model.safetensors" "$T/two/model.safetensors")
awk -v d="$d" 'BEGIN {exit !(d != "" && d <= 1e-4)}' || fail "2-rank parameters differ from 1 process's by $d (> 1e-4)"
cmp -s "$T/l2" "$T/l3" || fail "reducing after backward gave other losses than during backward"
[ "$(st_diff "$T/two/model.safetensors" "$T/after/model.safetensors")" = 0 ] || fail "after-backward parameters differ"

# a finished run resumed under mpirun: "nothing to do", said once for the job
mpirun -np 2 "$QKV" --threads 1 train --resume --max-steps 20 --no-progress --out "$T/two" > "$T/nothing.out" 2> "$T/nothing.err" \
  || { cat "$T/nothing.err"; fail "resuming a finished 2-rank run failed"; }
[ "$(grep -c 'qkv train: nothing to do' "$T/nothing.out")" = 1 ] || { cat "$T/nothing.out"; fail "'nothing to do' not said exactly once"; }

# 2. mismatched ranks
set +e
mpirun -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 5 --out "$T/mm" : \
       -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 5 --lr 0.01 --out "$T/mm" > "$T/mm.out" 2> "$T/mm.err"
rc=$?
set -e
[ $rc != 0 ] || fail "ranks with different --lr were not refused"
grep -q 'the ranks disagree on the configuration (flags and config.json): rank 1 has .*"lr":0.01' "$T/mm.err" \
  || { cat "$T/mm.err"; fail "the refusal does not name the configuration and the differing value"; }
[ ! -e "$T/mm" ] || fail "a refused run wrote $T/mm"
sed 's/Go\./Go!/' "$T/fra.txt" > "$T/other.txt"
set +e
mpirun -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 5 --out "$T/md" : \
       -np 1 "$QKV" --threads 1 train "${small[@]}" --max-steps 5 --data "$T/other.txt" --out "$T/md" > /dev/null 2> "$T/md.err"
rc=$?
set -e
[ $rc != 0 ] || fail "ranks with different --data files were not refused"
grep -q 'the ranks disagree on the configuration' "$T/md.err" || { cat "$T/md.err"; fail "different --data not named"; }
# Same path, other content on one rank: the data's fingerprint differs (a copy per machine that drifted).
mkdir -p "$T/a" "$T/b"; cp "$T/fra.txt" "$T/a/d.txt"; cp "$T/other.txt" "$T/b/d.txt"
set +e
(cd "$T" && mpirun -np 1 --wdir "$T/a" "$QKV" --threads 1 train "${small[@]}" --data d.txt --max-steps 5 --out "$T/mf" : \
       -np 1 --wdir "$T/b" "$QKV" --threads 1 train "${small[@]}" --data d.txt --max-steps 5 --out "$T/mf") > /dev/null 2> "$T/mf.err"
rc=$?
set -e
[ $rc != 0 ] || fail "ranks whose --data files differ in content were not refused"
grep -q 'the ranks disagree on the data file (--data): rank 1 has .60 pairs, fingerprint' "$T/mf.err" \
  || { cat "$T/mf.err"; fail "a data file that differs in content is not named"; }
[ ! -e "$T/mf/model.safetensors" ] || fail "a refused run wrote a model"

# Ranks that would reduce gradients differently (per bucket during backward vs once after it) would
# pair allreduces of different lengths: refused before anything is written.
set +e
mpirun -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 5 --out "$T/mg" : \
       -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 5 --grad-reduce after-backward --out "$T/mg" > /dev/null 2> "$T/mg.err"
rc=$?
set -e
[ $rc != 0 ] || fail "ranks with different --grad-reduce were not refused"
grep -q "the ranks disagree on the gradient reduction (--grad-reduce, bucket sizes): rank 1 has 'after-backward" "$T/mg.err" \
  || { cat "$T/mg.err"; fail "different --grad-reduce not named"; }
[ ! -e "$T/mg" ] || fail "a run refused for --grad-reduce wrote $T/mg"
# Ranks with different kernel settings round differently in the kernels and the optimizer: their
# parameters, meant to be identical, would drift apart. Each global option, and its environment
# variable, is refused before anything is written.
k=0
for diff in "--kernels ref" "--attention math" "--denormals keep" "env QKV_KERNELS=ref" "env QKV_ATTENTION=math" \
            "env QKV_MAX_ISA=scalar"; do
  k=$((k + 1))
  case "$diff" in env*) pre=(env "${diff#env }"); opt=() ;; *) pre=(); read -r -a opt <<< "$diff" ;; esac
  set +e
  mpirun -np 1 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --max-steps 2 --out "$T/mk$k" : \
         -np 1 "${pre[@]}" "$QKV" --threads 1 "${opt[@]}" train "${small[@]}" "${data[@]}" --max-steps 2 --out "$T/mk$k" \
         > /dev/null 2> "$T/mk.err"
  rc=$?
  set -e
  [ $rc != 0 ] || fail "ranks with different kernel settings ($diff) were not refused"
  grep -q "the ranks disagree on the kernel settings (--kernels, --attention, --denormals, QKV_KERNELS, QKV_ATTENTION, QKV_MAX_ISA and the CPU's kernel paths): rank 1 has" "$T/mk.err" \
    || { cat "$T/mk.err"; fail "different kernel settings ($diff) not named"; }
  [ ! -e "$T/mk$k" ] || fail "a run refused for its kernel settings ($diff) wrote $T/mk$k"
done
# Only qkv train (Transformer, Bahdanau) is data-parallel: N copies of the language model or of
# another command would each do the whole job into the same files.
printf 'the time traveller was one of those\n%.0s' $(seq 1 50) > "$T/lm.txt"
set +e
mpirun -np 2 "$QKV" --threads 1 train --model lm --preset lm-tiny --data "$T/lm.txt" --max-steps 2 --no-progress --out "$T/lm" > /dev/null 2> "$T/lm.err"
rc=$?
set -e
[ $rc != 0 ] || fail "mpirun -np 2 qkv train --model lm was not refused"
grep -q "qkv: error: --model lm trains in one process, but mpirun started 2 of it" "$T/lm.err" || { cat "$T/lm.err"; fail "the LM refusal is not explained"; }
[ ! -e "$T/lm" ] || fail "a refused LM run wrote $T/lm"
set +e
mpirun -np 2 "$QKV" info "$T/one" --no-params > /dev/null 2> "$T/info.err"
rc=$?
set -e
[ $rc != 0 ] || fail "mpirun -np 2 qkv info was not refused"
grep -q "qkv: error: qkv info runs in one process, but mpirun started 2 of it: only qkv train and qkv eval use the ranks" "$T/info.err" \
  || { cat "$T/info.err"; fail "the refusal of another command under mpirun is not explained"; }

# qkv eval under mpirun: the ranks share the test set (translate_words_sharded) and rank 0 prints
# what one process prints (the decoding time and peak memory aside), once; --hyp-out is the same file.
noisy() { sed -E 's/, [0-9.]+ s$//; s/peak RSS [0-9]+ MiB//'; }
run_rc 0 --threads 1 eval --model "$T/one" --no-progress --beam 2 --hyp-out "$T/eval1.hyp"
noisy < "$T/out" > "$T/eval1.out"
mpirun -np 2 "$QKV" --threads 1 eval --model "$T/one" --no-progress --beam 2 --hyp-out "$T/eval2.hyp" > "$T/eval2.raw" 2> "$T/eval2.err" \
  || { cat "$T/eval2.err"; fail "mpirun -np 2 qkv eval failed"; }
noisy < "$T/eval2.raw" > "$T/eval2.out"
grep -q "corpus BLEU-4" "$T/eval1.out" || fail "qkv eval printed no BLEU: $(cat "$T/eval1.out")"
cmp -s "$T/eval1.out" "$T/eval2.out" || { diff "$T/eval1.out" "$T/eval2.out"; fail "mpirun -np 2 qkv eval differs from one process"; }
cmp -s "$T/eval1.hyp" "$T/eval2.hyp" || fail "mpirun -np 2 qkv eval --hyp-out differs from one process"
[ "$(grep -c "^data:" "$T/eval2.err")" = 1 ] || { cat "$T/eval2.err"; fail "the data line is not printed once"; }

# One rank failing on its own (its --data has too few pairs) ends the job at once with its message:
# it must not finalize MPI and wait, with the other rank waiting in a collective for it, until the
# collective watchdog (QKV_DIST_TIMEOUT) stops the job.
printf 'Go.\tVa !\n' > "$T/b/few.txt"; cp "$T/fra.txt" "$T/a/few.txt"
set +e
(cd "$T" && QKV_DIST_TIMEOUT=60 timeout 50 mpirun -np 1 --wdir "$T/a" "$QKV" --threads 1 train "${small[@]}" --data few.txt --max-steps 5 --out "$T/one_fails" : \
       -np 1 --wdir "$T/b" "$QKV" --threads 1 train "${small[@]}" --data few.txt --max-steps 5 --out "$T/one_fails") > /dev/null 2> "$T/of.err"
rc=$?
set -e
[ $rc != 124 ] || { cat "$T/of.err"; fail "one rank's error left the job hanging"; }
[ $rc != 0 ] || fail "a job with a failing rank exited 0"
grep -q "only 1 pair in few.txt" "$T/of.err" || { cat "$T/of.err"; fail "the failing rank's error is not shown"; }
grep -q "qkv: rank 1: stopped with an error (exit 1), stopping the job" "$T/of.err" || { cat "$T/of.err"; fail "the failing rank did not stop the job"; }
grep -q "did not complete within" "$T/of.err" && { cat "$T/of.err"; fail "the job was stopped by the watchdog, not by the failing rank"; }
[ ! -e "$T/one_fails/model.safetensors" ] || fail "a failed run wrote a model"

# 3. SIGTERM to mpirun, then resume with 1 process
mpirun -np 2 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --time-budget none --epochs 100000 --out "$T/sig" \
  > "$T/sig.out" 2> "$T/sig.err" &
mp=$!
for _ in $(seq 1 2400); do  # polls; 120 s is a failure's bound only
  n=$(grep -c '"kind":"step"' "$T/sig/metrics.jsonl" 2> /dev/null) || true
  [ "${n:-0}" -gt 30 ] && break
  sleep 0.05
done
[ "${n:-0}" -gt 30 ] || { cat "$T/sig.err"; fail "the 2-process run logged no 30 steps within 120 s"; }
kill -TERM "$mp"
set +e; wait "$mp"; set -e
mp=""
grep -q "qkv train: interrupted (SIGTERM) at step" "$T/sig.err" || { cat "$T/sig.err"; fail "no interrupt message"; }
step=$(sed -n 's/.*interrupted (SIGTERM) at step \([0-9]*\);.*/\1/p' "$T/sig.err")
[ "$(grep -c 'interrupted (SIGTERM) at step' "$T/sig.err")" = 1 ] || fail "more than one rank reported the stop"
run_rc 0 info "$T/sig" --no-params
out_has "step $step"
run_rc 0 --threads 1 train --resume --out "$T/sig" --max-steps $((step + 3)) --no-progress
err_has "resuming from" "step $step"
grep -q '"world_size": 1' "$T/sig/config.json" || fail "the 1-process resume did not record world_size 1"

# 4. kill -9 of one rank (issue 44 item 10): mpirun ends the job; rank 0 says, in one line, which
# rank was lost, the last checkpoint (the one in the folder) and the command that resumes it.
# The rank left says it between mpirun's SIGTERM and its SIGKILL (odls_base_sigkill_timeout, 1 s);
# 5 s keeps that independent of the machine's load (mpirun sleeps them all before it exits).
OMPI_MCA_odls_base_sigkill_timeout=5 mpirun -np 2 "$QKV" --threads 1 train "${small[@]}" "${data[@]}" --time-budget none \
  --epochs 100000 --out "$T/k9" > "$T/k9.out" 2> "$T/k9.err" &
mp=$!
for _ in $(seq 1 1200); do
  n=$(grep -c '"kind":"epoch"' "$T/k9/metrics.jsonl" 2> /dev/null) || true
  [ "${n:-0}" -ge 2 ] && break
  sleep 0.05
done
victim=""
for p in $(pgrep -f "train .* --out $T/k9"); do
  tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
[ -n "$victim" ] || fail "did not find rank 1 of the running job"
kill -9 "$victim"
for _ in $(seq 1 1200); do kill -0 "$mp" 2> /dev/null || break; sleep 0.1; done
kill -0 "$mp" 2> /dev/null && fail "the job still runs 120 s after rank 1 was killed"
set +e; wait "$mp"; rc=$?; set -e
mp=""
[ $rc != 0 ] || fail "a job with a killed rank exited 0"
[ "$(grep -c '^qkv train: rank 1 lost' "$T/k9.err")" = 1 ] || { cat "$T/k9.err"; fail "no single qkv line for the killed rank"; }
line=$(grep '^qkv train: rank 1 lost' "$T/k9.err")
step=$(sed -n 's/.*(step \([0-9]*\)); resume with.*/\1/p' <<< "$line")
grep -qF "qkv train: rank 1 lost (its process on $(hostname) ended: killed or crashed); the last checkpoint is $T/k9/checkpoint.safetensors (step $step); resume with: mpirun -np 1 qkv train --resume --out $T/k9" <<< "$line" \
  || fail "the line does not name the rank, the checkpoint and the resume command: $line"
run_rc 0 info "$T/k9" --no-params
grep -qE "checkpoint: step $step(,|\$)" "$T/out" || { cat "$T/out"; fail "the folder's checkpoint is not at step $step"; }
mpirun -np 1 "$QKV" --threads 1 train --resume --out "$T/k9" --max-steps $((step + 2)) --no-progress > /dev/null 2> "$T/k9r.err" \
  || { cat "$T/k9r.err"; fail "the resume command failed"; }
grep -q "resuming from .*step $step" "$T/k9r.err" || { cat "$T/k9r.err"; fail "the resume did not start at step $step"; }
echo "test_train_mpi: ok"
