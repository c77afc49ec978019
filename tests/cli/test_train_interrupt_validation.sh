#!/usr/bin/env bash
# qkv train and a second SIGINT while it validates. The first SIGINT, arriving during a validation,
# waits for it to end (the run then stops); a second one kills at once, and says so: a line names
# the step and the checkpoint that holds it, exit 130 (killed by the signal), no temporary file
# left and no record of the unfinished validation in metrics.jsonl. --resume continues from that
# step and validates again first, writing the record the killed run did not.
# The corpus is large enough (and the model wide enough) that a validation takes seconds while a
# step takes milliseconds, so the signals land in it.
# Usage: test_train_interrupt_validation.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
awk -v pairs=64000 'BEGIN { for (i = 0; i < pairs; ++i)
  printf "Thing%d and word%d.\tChose%d et mot%d.\n", i % 97, i % 89, i % 97, i % 89 }' > "$T/fra.txt"
args=(--preset demo --num-hiddens 128 --num-heads 2 --num-blks 2 --ffn-num-hiddens 512 --batch-size 32 --num-steps 10
      --valid-pairs 15000 --test-pairs 1 --val-every 1s --time-budget none --log-every 1 --no-progress)
run="$T/run"
pid=""
trap '[ -z "$pid" ] || kill -KILL "$pid" 2> /dev/null || true; rm -rf "$T"' EXIT

# Job control (set -m): without it bash starts `&` jobs with SIGINT ignored, and qkv leaves an
# ignored SIGINT ignored.
set -m
"$QKV" train "${args[@]}" --data "$T/fra.txt" --out "$run" > "$T/train.out" 2> "$T/train.err" &
pid=$!
# The first validation runs once the checkpoint and the model are written (both come before it),
# until its record (the first with a "val_loss") is appended to metrics.jsonl.
for _ in $(seq 1 2400); do
  [ -s "$run/model.safetensors" ] && ! grep -q val_loss "$run/metrics.jsonl" 2> /dev/null && break
  kill -0 "$pid" 2> /dev/null || { cat "$T/train.err"; fail "qkv train ended before it was signalled"; }
  sleep 0.05
done
[ -s "$run/model.safetensors" ] || { cat "$T/train.err"; fail "no checkpoint within 2 minutes"; }
kill -INT "$pid"
second_sigint "$pid"
set +e; wait "$pid"; rc=$?; set -e
pid=""
set +m
grep -q val_loss "$run/metrics.jsonl" &&
  { cat "$T/train.err"; fail "the validation finished before the second SIGINT (make it longer)"; }
[ "$rc" = 130 ] || { cat "$T/train.err"; fail "a second SIGINT during the validation: exit $rc, want 130 (killed)"; }
at=$(sed -n "s|^qkv: interrupted during the validation at step \([0-9]*\); $run/checkpoint.safetensors holds step \([0-9]*\) (--resume continues from it and validates again)\$|\1 \2|p" "$T/train.err")
[ -n "$at" ] || { cat "$T/train.err"; fail "a second SIGINT during the validation: no 'interrupted during the validation' line"; }
read -r at held <<< "$at"
[ "$at" = "$held" ] && [ "$at" -gt 0 ] || fail "the line names step $at and checkpoint step $held"
left=$(cd "$run" && ls | grep '\.tmp\.' || true)
[ -z "$left" ] || fail "a second SIGINT during the validation left $left"
# --resume: the checkpoint's step; the validation runs again and its record is written
run_rc 0 train --resume --out "$run" --data "$T/fra.txt" --max-steps "$at" --no-progress
err_has "resuming from $run/checkpoint.safetensors: " ", step $at" \
  "the run was stopped while it validated at step $at" "validation at step $at (the stopped run did not finish it)"
grep -q "\"kind\":\"val\",\"step\":$at,.*\"val_loss\":[0-9]" "$run/metrics.jsonl" ||
  { cat "$run/metrics.jsonl"; fail "--resume did not write the validation's record"; }
echo "cli train: a second SIGINT during a validation says so and exits 130; --resume validates again: ok"
