#!/usr/bin/env bash
# kill -9 at random times (issue 28; ctest fault.kill9, label `slow`): KILLS runs (default 200) of
#   qkv train --resume      (steps, validation every second, checkpoint and model writes),
#   qkv train --overwrite   (the earlier run's files set aside, then replaced),
#   qkv eval --hyp-out --json (evaluation output),
# in turn, each killed with SIGKILL after a random delay (bash $RANDOM, seeded: reproducible
# delays) spread over the run's length. After every kill: `qkv info` loads the folder (config.json,
# vocabularies and model.safetensors agree, or a checkpoint waits for --resume; after an
# --overwrite killed before its first checkpoint, once the command its error names has put the
# set-aside earlier model back), the eval outputs
# are absent or whole, and no run of qkv reports a damaged file. Every 25 kills an unkilled
# `qkv train --resume` must continue to its end. Prints the counts at the end.
# Usage: test_kill9.sh /path/to/qkv [KILLS]     (ctest -L slow -R fault.kill9 --output-on-failure)
source "$(dirname "$0")/../cli/lib.sh" "$1"
kills=${2:-200}
RANDOM=28
six_pairs > "$T/fra.txt"
small=(--preset demo --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --time-budget none --test-pairs 3 --valid-pairs 3 --data "$T/fra.txt")
run="$T/run"
pid=""
trap '[ -z "$pid" ] || kill -9 "$pid" 2> /dev/null || true; rm -rf "$T"' EXIT

run_rc 0 train "${small[@]}" --max-steps 6 --out "$run"
# The step the folder's checkpoint holds (qkv info's "checkpoint: step N, ...").
cur_step() { "$QKV" info "$run" --no-params 2> /dev/null | sed -n 's/^checkpoint: step \([0-9]*\),.*/\1/p'; }
# Each killed run aims for 40 more steps: longer than the random delay allows it to get.
ms_of() { local t0; t0=$(date +%s%N); run_rc 0 "$@"; echo $(( ($(date +%s%N) - t0) / 1000000 )); }
span_resume=$(ms_of train --resume --out "$run" --data "$T/fra.txt" --max-steps 46 --no-progress --val-every 1s)
span_overwrite=$(ms_of train "${small[@]}" --max-steps 40 --out "$run" --overwrite)
span_eval=$(ms_of eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$T/hyp.txt" --json "$T/scores.json")
echo "kill9: unkilled runs took ${span_resume} ms (resume, 40 steps), ${span_overwrite} ms (overwrite), ${span_eval} ms (eval); each kill falls in [0, that]"

check_folder() {  # $1: what was killed
  set +e
  "$QKV" info "$run" --no-params > "$T/info.out" 2> "$T/info.err"
  local rc=$?
  set -e
  if [ $rc != 0 ] && [ -d "$run/.qkv-replaced" ]; then
    # --overwrite killed before its first checkpoint: the earlier model waits aside; the error
    # says so and gives the command that puts it back, which must give a loadable folder.
    local back
    back=$(sed -n 's/.*put the earlier model back with: //p' "$T/info.err")
    [ -n "$back" ] || { cat "$T/info.err"; fail "after kill $i ($1): no command to put the set-aside model back"; }
    (eval "$back") || fail "after kill $i ($1): '$back' failed"
    set_aside=$((set_aside + 1))
    set +e
    "$QKV" info "$run" --no-params > "$T/info.out" 2> "$T/info.err"
    rc=$?
    set -e
  fi
  if [ $rc != 0 ]; then
    cat "$T/info.err"
    fail "after kill $i ($1, ${delay} ms): qkv info cannot load '$run'"
  fi
  if grep -q "not written yet" "$T/info.out"; then waiting=$((waiting + 1)); else loaded=$((loaded + 1)); fi
  if [ -e "$T/hyp.txt" ]; then
    [ "$(wc -l < "$T/hyp.txt")" = 3 ] || fail "after kill $i ($1): hyp.txt has $(wc -l < "$T/hyp.txt") lines, want 3"
  fi
  if [ -e "$T/scores.json" ]; then
    /usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/scores.json" ||
      fail "after kill $i ($1): scores.json is not whole JSON"
  fi
  if find "$T" -name '*.tmp.*' | grep -q .; then stale=$((stale + 1)); fi
  # ...and the next run removes them: after an unkilled run none is left.
}

loaded=0 waiting=0 stale=0 exited=0 set_aside=0 no_model=0
for i in $(seq 1 "$kills"); do
  case $((i % 3)) in
    0) what="train --resume"; span_ms=$span_resume; cmd=(train --resume --out "$run" --data "$T/fra.txt" --max-steps $(($(cur_step) + 40)) --no-progress --val-every 1s) ;;
    1) what="train --overwrite"; span_ms=$span_overwrite; cmd=(train "${small[@]}" --max-steps 40 --out "$run" --overwrite --seed $i) ;;
    2) what="eval"; span_ms=$span_eval; cmd=(eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$T/hyp.txt" --json "$T/scores.json") ;;
  esac
  delay=$(( (RANDOM * 32768 + RANDOM) % (span_ms + 1) ))
  "$QKV" "${cmd[@]}" > "$T/k.out" 2> "$T/k.err" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  if kill -9 "$pid" 2> /dev/null; then :; else exited=$((exited + 1)); fi
  set +e; wait "$pid" 2> /dev/null; rc=$?; set -e  # (bash's "Killed" job note silenced)
  pid=""
  # A run that ended by itself must have succeeded, but eval in a folder whose model is not
  # written yet (an --overwrite killed after its first checkpoint: --resume continues it); a
  # killed one says nothing.
  if [ $rc != 137 ] && [ $rc != 0 ]; then
    if [ "$what" = eval ] && grep -q "has no model.safetensors" "$T/k.err" && [ -e "$run/checkpoint.safetensors" ]; then
      no_model=$((no_model + 1))
    else
      cat "$T/k.err"; fail "kill $i ($what): exit $rc before the kill"
    fi
  fi
  if grep -qiE "corrupt|truncated|damaged|checksum" "$T/k.err"; then cat "$T/k.err"; fail "kill $i ($what): reports a damaged file"; fi
  check_folder "$what"
  if (( i % 25 == 0 )); then
    run_rc 0 train --resume --out "$run" --data "$T/fra.txt" --max-steps $(($(cur_step) + 5)) --no-progress
    grep -qiE "corrupt|truncated|damaged" "$T/err" && { cat "$T/err"; fail "resume after kill $i reports a damaged file"; }
    check_folder "unkilled resume"
    run_rc 0 eval --model "$run" --data "$T/fra.txt" --no-progress --hyp-out "$T/hyp.txt" --json "$T/scores.json"
    left=$(find "$T" -name '*.tmp.*')
    [ -z "$left" ] || fail "after kill $i and unkilled runs: temporaries left: $left"
  fi
done
echo "kill9: $kills kills ($exited runs had ended before theirs): the folder loaded $loaded times, a checkpoint waited for --resume $waiting times; $set_aside times an --overwrite killed before its first checkpoint had set the earlier model aside, and the command its error gives put it back, loadable; temporaries of killed writes were present $stale times (removed by the next run); eval refused a folder whose model was not written yet $no_model times; every resume continued"
