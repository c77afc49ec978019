#!/usr/bin/env bash
# qkv train stopped by a signal, and the divergence warning, on a tiny corpus written here:
#  1. the first SIGINT during training finishes the step, writes the checkpoint, prints where and
#     how to continue, exits 130; SIGTERM the same with 143; --resume continues from the step the
#     message names, to the end (keeping --log-every), and its metrics.jsonl is an uninterrupted
#     run's (timings aside).
#  2. --lr 10 (loss far above ln V, the loss of a uniform guess) warns once within 80 steps, less
#     than two windows of 50; the same run with the default learning rate, or one too small to
#     move the loss (--lr 1e-5, also a tied model far above ln V at its start), does not.
#  3. the "continue with" commands (qkv train's on a stop, qkv info's for a folder without a
#     model yet) work pasted into a shell when the folder's name has a space and a quote.
#  4. a run killed while it validated after its last checkpoint (its last metrics.jsonl record
#     removed here): --resume trains nothing, validates again and writes the same record; a
#     second --resume has nothing to do.
#  5. a second SIGINT while the checkpoint is written: a line names the step the checkpoint still
#     holds, no temporary file is left; a stale one is removed by the next run; --resume names its
#     step.
# Usage: test_train_interrupt.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2> /dev/null || true; rm -rf "$T"' EXIT

# steps_logged DIR: the number of "step" records in DIR/metrics.jsonl (--log-every 1: one per step)
steps_logged() { local n; n=$(grep -c '"kind":"step"' "$1/metrics.jsonl" 2> /dev/null) || true; echo "${n:-0}"; }
# start_long NAME ARGS...: `qkv train ARGS` in the background (stdout/stderr in $T/NAME.out/.err);
# returns once its metrics.jsonl holds more than 10 step records beyond what it had.
start_long() {
  local name=$1; shift
  local before; before=$(steps_logged "$T/run")
  "$QKV" train "$@" --out "$T/run" --data "$T/fra.txt" --no-progress > "$T/$name.out" 2> "$T/$name.err" &
  pid=$!
  for _ in $(seq 1 1200); do
    [ "$(steps_logged "$T/run")" -gt $((before + 10)) ] && return 0
    kill -0 "$pid" 2> /dev/null || { cat "$T/$name.err"; fail "qkv train $* ended before it was signalled"; }
    sleep 0.25
  done
  fail "qkv train $* made no progress in 5 minutes"
}
# stop_with SIGNAL NAME WANT_RC: sends SIGNAL, waits, checks the exit status and the message;
# sets `at` to the step the message names.
stop_with() {
  kill -"$1" "$pid"
  set +e; wait "$pid"; local rc=$?; set -e
  pid=""
  [ "$rc" = "$3" ] || { cat "$T/$2.err"; fail "SIG$1: exit $rc, want $3"; }
  grep -q "^qkv train: interrupted (SIG$1) at step [0-9]*; checkpoint saved in $T/run/checkpoint.safetensors; continue with: qkv train --resume --out $T/run\$" "$T/$2.err" ||
    { cat "$T/$2.err"; fail "SIG$1: no 'interrupted ... continue with' line"; }
  grep -q "stopped: interrupted" "$T/$2.out" || { cat "$T/$2.out"; fail "SIG$1: stop reason"; }
  grep -q "held-out translations" "$T/$2.out" && fail "SIG$1: went on to the samples"
  [ -s "$T/run/checkpoint.safetensors" ] && [ -s "$T/run/model.safetensors" ] || fail "SIG$1: no checkpoint/model"
  at=$(sed -n "s/^qkv train: interrupted (SIG$1) at step \([0-9]*\);.*/\1/p" "$T/$2.err")
  [ "$at" -gt 10 ] || fail "SIG$1: stopped at step '$at'"
}

# ---- 1. signals. Job control (set -m): without it bash starts `&` jobs with SIGINT ignored, and
# qkv leaves an ignored SIGINT ignored.
set -m
start_long first --preset demo --time-budget none --epochs 100000 --log-every 1 "${small[@]}"
stop_with INT first 130
run_rc 0 info "$T/run"  # the folder loads
start_long second --resume  # --log-every 1 is kept (config.json)
grep -q "resuming from $T/run/checkpoint.safetensors: .*, step $at\$" "$T/second.err" ||
  { cat "$T/second.err"; fail "the resume does not continue at step $at"; }
stop_with TERM second 143
set +m
run_rc 0 train --resume --out "$T/run" --data "$T/fra.txt" --max-steps $((at + 5)) --no-progress
err_has "step $at"
out_has "trained $((at + 5)) steps" "stopped: max_steps" "held-out translations"
[ "$(steps_logged "$T/run")" = $((at + 5)) ] || fail "metrics.jsonl: $(steps_logged "$T/run") step records, want $((at + 5))"
# ... and is the uninterrupted run's, timings aside: the stops' partial epoch records are gone,
# the epochs they cut have one record each, with the train loss over all their steps
untimed() { sed -E 's/,"(train_seconds|tokens_per_s)":[^,}]*//g' "$1/metrics.jsonl"; }
run_rc 0 train --data "$T/fra.txt" --preset demo --time-budget none --epochs 100000 --max-steps $((at + 5)) \
  --log-every 1 "${small[@]}" --out "$T/whole"
[ "$(untimed "$T/run")" = "$(untimed "$T/whole")" ] ||
  { diff <(untimed "$T/whole") <(untimed "$T/run") | head -n 20; fail "the resumed run's metrics.jsonl differs from an uninterrupted run's"; }

# ---- 2. divergence: 80 steps (the first window of 50 is judged with a wider margin, the partial
# last one, steps 51-80, at the end of the run)
warn="qkv: warning: training loss "
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 80 --out "$T/ok" "${small[@]}"
grep -qF "$warn" "$T/err" && { cat "$T/err"; fail "a healthy run was warned of divergence"; }
run_rc 0 train --data "$T/fra.txt" --preset demo --lr 1e-5 --max-steps 80 --out "$T/slow" "${small[@]}"
grep -qF "$warn" "$T/err" && { cat "$T/err"; fail "a run with a too small learning rate was warned of divergence"; }
# a tied model of the demo width starts 4 nats above ln(V), and at --lr 1e-5 stays there: not warned
run_rc 0 train --data "$T/fra.txt" --preset demo --shared-vocab --tie-weights --lr 1e-5 --max-steps 80 --batch-size 8 \
  --num-steps 6 --no-progress --out "$T/tied"
grep -qF "$warn" "$T/err" && { cat "$T/err"; fail "a tied model with a too small learning rate was warned of divergence"; }
run_rc 0 train --data "$T/fra.txt" --preset demo --lr 10 --max-steps 80 --out "$T/bad" "${small[@]}"
err_has "(mean of steps 1-50) is above ln(V)=" \
  "the loss of a uniform guess: the learning rate (--lr 10) is probably too high"
[ "$(grep -cF "$warn" "$T/err")" = 1 ] || { cat "$T/err"; fail "the divergence warning is not given exactly once"; }

# ---- 3. the printed commands, run as a shell reads them, for a folder named "my run's"
odd="$T/my run's"
"$QKV" train --preset demo --time-budget none --epochs 100000 --log-every 1 "${small[@]}" --data "$T/fra.txt" \
  --out "$odd" > "$T/odd.out" 2> "$T/odd.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ "$(steps_logged "$odd")" -gt 10 ] && break
  kill -0 "$pid" 2> /dev/null || { cat "$T/odd.err"; fail "qkv train --out \"$odd\" ended before it was signalled"; }
  sleep 0.25
done
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
pid=""
[ "$rc" = 143 ] || { cat "$T/odd.err"; fail "SIGTERM, --out \"$odd\": exit $rc, want 143"; }
cmd=$(sed -n 's/^qkv train: interrupted (SIGTERM) at step [0-9]*; .*; continue with: qkv //p' "$T/odd.err")
[ -n "$cmd" ] || { cat "$T/odd.err"; fail "--out \"$odd\": no 'continue with' command"; }
eval "run_rc 0 $cmd --max-steps 1000000 --epochs 1"  # nothing to do: the checkpoint is past epoch 1
out_has "nothing to do"
rm "$odd/model.safetensors"
run_rc 0 info "$odd"
cmd=$(sed -n 's/^model.safetensors: not written yet .*; qkv \(train --resume --out .*\) continues)$/\1/p' "$T/out")
[ -n "$cmd" ] || { cat "$T/out"; fail "qkv info: no 'continues' command"; }
eval "run_rc 0 $cmd --epochs 1"
out_has "nothing to do"

# ---- 4. killed during the last validation: the checkpoint (written before it) has the step, the
# epoch record is missing
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 12 --out "$T/end" "${small[@]}"
last=$(tail -n 1 "$T/end/metrics.jsonl")
case "$last" in *'"kind":"epoch"'*'"step":12,'*) ;; *) fail "metrics.jsonl ends with '$last', not the epoch record" ;; esac
sed -i '$d' "$T/end/metrics.jsonl"
run_rc 0 train --resume --out "$T/end" --data "$T/fra.txt" --no-progress
err_has "the run was stopped while it validated at step 12"
out_has "trained 12 steps" "no epoch ended in this call"
[ "$(tail -n 1 "$T/end/metrics.jsonl")" = "$last" ] ||
  fail "the resumed run wrote '$(tail -n 1 "$T/end/metrics.jsonl")', want '$last'"
run_rc 0 train --resume --out "$T/end" --data "$T/fra.txt" --no-progress
out_has "nothing to do"

# ---- 5. a second SIGINT while the checkpoint is written. Its temporary file is a FIFO here, so the
# next checkpoint write (an epoch end: every 6 steps) waits in open() for a reader; then the first
# SIGINT (the stop, waiting behind the write) and the second, which kills: the line naming the
# step the checkpoint still holds, the temporary removed, exit 130 (killed). A stale temporary (a
# kill the handler could not see, SIGKILL) is removed by the next run, which says so; --resume
# names the step it continues from.
cut="$T/cut"
set -m
"$QKV" train --preset demo --time-budget none --epochs 100000 --log-every 1 "${small[@]}" --data "$T/fra.txt" \
  --out "$cut" > "$T/cut.out" 2> "$T/cut.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ "$(steps_logged "$cut")" -gt 10 ] && [ -s "$cut/checkpoint.safetensors" ] && break
  kill -0 "$pid" 2> /dev/null || { cat "$T/cut.err"; fail "qkv train --out $cut ended before it was signalled"; }
  sleep 0.25
done
# (the name is taken while a checkpoint is written: a few milliseconds)
for _ in $(seq 1 200); do mkfifo "$cut/checkpoint.safetensors.tmp.$pid" 2> /dev/null && break; sleep 0.05; done
[ -p "$cut/checkpoint.safetensors.tmp.$pid" ] || fail "cannot make the FIFO $cut/checkpoint.safetensors.tmp.$pid"
for _ in $(seq 1 1200); do  # until the write waits on the FIFO
  w=$(cat "/proc/$pid/wchan" 2> /dev/null || echo 0)
  [ "$w" = wait_for_partner ] && break
  [ "$w" = 0 ] && { sleep 5; break; }  # wchan hidden: time enough to reach the next epoch end
  sleep 0.25
done
kill -INT "$pid"
second_sigint "$pid"
set +e; wait "$pid"; rc=$?; set -e
pid=""
set +m
[ "$rc" = 130 ] || { cat "$T/cut.err"; fail "a second SIGINT during the checkpoint write: exit $rc, want 130 (killed)"; }
held=$(sed -n "s|^qkv: interrupted while writing the checkpoint; $cut/checkpoint.safetensors still holds step \([0-9]*\) (--resume continues from it)\$|\1|p" "$T/cut.err")
[ -n "$held" ] || { cat "$T/cut.err"; fail "a second SIGINT during the checkpoint write: no 'interrupted while writing the checkpoint' line"; }
left=$(cd "$cut" && ls | grep '\.tmp\.' || true)
[ -z "$left" ] || fail "a second SIGINT during the checkpoint write left $left"
echo "half a checkpoint" > "$cut/checkpoint.safetensors.tmp.999999"
run_rc 0 train --resume --out "$cut" --data "$T/fra.txt" --max-steps $((held + 2)) --no-progress
err_has "removed $cut/checkpoint.safetensors.tmp.999999 (left by a write that was cut short)" \
  "resuming from $cut/checkpoint.safetensors: " \
  ", step $held (the write of a later checkpoint was cut short: its steps are trained again)"
out_has "trained $((held + 2)) steps"
[ ! -e "$cut/checkpoint.safetensors.tmp.999999" ] || fail "the stale temporary file is still there"
# --log-every is kept by --resume (above: one record per step), and a new one given applies (and is kept)
[ "$(steps_logged "$cut")" = $((held + 2)) ] || fail "--resume: $(steps_logged "$cut") step records, want $((held + 2))"
run_rc 0 train --resume --out "$cut" --data "$T/fra.txt" --max-steps $((held + 6)) --log-every 2 --no-progress
[ "$(steps_logged "$cut")" = $((held + 4)) ] || fail "--resume --log-every 2: $(steps_logged "$cut") step records, want $((held + 4))"
grep -q '"log_every": *2' "$cut/config.json" || fail "config.json does not keep --log-every 2"

echo "cli train signals (SIGINT 130, SIGTERM 143, resume, the printed commands), divergence warning, records of a killed validation, a second SIGINT during the checkpoint write: ok"
