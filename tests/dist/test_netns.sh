#!/usr/bin/env bash
# `mpirun qkv train` across hosts: 4 ranks on 2 network namespaces (tests/dist/netns_testbed.sh:
# TCP over veth links shaped to 1 Gb/s, one Open MPI daemon per host, no shared memory between
# hosts), on the six-pair corpus:
#  1. the losses equal the 1-process run's (1e-5 relative, as tests/cli/test_train_mpi.sh), and
#     the job ends as the same 4 ranks on loopback (one machine, Open MPI's default transports):
#     the same losses and parameters bit for bit, exit 0, the same header and summary;
#  2. all ranks of host 1 killed (kill -9): the job ends; one qkv line names ranks 2 and 3, the
#     last checkpoint (the folder's own step: it loads, qkv info) and the resume command, which
#     resumes on the 2 ranks left;
#  3. host 1's link cut (ip link set down): mpirun notices the lost host (TCP keepalive, the test
#     bed's ~5 s; QKV_DIST_TIMEOUT is larger), the job ends with the same line, the folder loads;
#  4. nothing is left: no namespace of the test bed, no process of these runs.
# Skips (exit 77) when not root or when `ip netns` is not permitted.
# Usage: test_netns.sh /path/to/qkv
source "$(dirname "$0")/../cli/lib.sh" "$1"
here=$(cd "$(dirname "$0")" && pwd)
TB="$here/netns_testbed.sh"
bash "$TB" check || exit 77
command -v mpirun > /dev/null || fail "mpirun not found (scripts/install_deps.sh installs openmpi-bin)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # as test_train_mpi.sh
# A lost host is noticed by mpirun's keepalive (the test bed's ~5 s), before this.
export QKV_DIST_TIMEOUT=120
# mpirun gives the ranks left odls_base_sigkill_timeout (1 s) between its SIGTERM and SIGKILL; the
# watchdog says its line about 0.6 s after the SIGTERM, so 5 s keeps this test independent of the
# machine's load (mpirun sleeps them all before it exits).
export OMPI_MCA_odls_base_sigkill_timeout=5
# The ranks' marker of a job whose end was explained (dist/mpi_communicator.cpp) and Open MPI's
# session folders: in the test's folder, removed with it.
export TMPDIR="$T"
state="$T/testbed"
mp=""
cleanup() { [ -z "$mp" ] || kill -9 "$mp" 2> /dev/null || true; bash "$TB" down "$state" 2> /dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
bash "$TB" up "$state" --hosts 2 --slots 2 --rate 1gbit
prefix=$(sed -n 's/^PREFIX=//p' "$state/testbed.env")
tb_mpirun() { bash "$TB" mpirun "$state" "$@"; }
six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --dropout 0 --log-every 1)
losses() { sed -n 's/.*"kind":"step","step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }
st_diff() { /usr/bin/python3 "$here/st_diff.py" "$@" | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p'; }
# How a job ends, timings left out: the data-parallel header, "trained N steps (stopped: why);
# last epoch train loss, val loss" and the held-out translations.
ending() {  # NAME
  grep -o 'data-parallel over [0-9]* ranks ([^)]*)' "$T/$1.err" || true
  sed -n 's/^trained \([0-9]*\) steps in .* (stopped: \([a-z_]*\)); \(last epoch [^;]*\);.*/\1 \2 \3/p' "$T/$1.out"
  grep -E '^  .* => ' "$T/$1.out" || true
}

# 1. equivalence
run_rc 0 --threads 1 train "${small[@]}" --data "$T/fra.txt" --max-steps 20 --out "$T/one"
set +e
mpirun -np 4 "$QKV" --threads 1 train "${small[@]}" --data "$T/fra.txt" --max-steps 20 --out "$T/loop" \
  > "$T/loop.out" 2> "$T/loop.err"
rc_loop=$?
timeout -s KILL 300 bash "$TB" mpirun "$state" -np 4 "$QKV" --threads 1 train "${small[@]}" --data "$T/fra.txt" \
  --max-steps 20 --out "$T/net" > "$T/net.out" 2> "$T/net.err"
rc_net=$?
set -e
[ $rc_loop = 0 ] || { cat "$T/loop.err"; fail "4 ranks on loopback: exit $rc_loop"; }
[ $rc_net = 0 ] || { cat "$T/net.err"; fail "4 ranks over 2 namespace hosts: exit $rc_net"; }
grep -q "data-parallel over 4 ranks (mpi;" "$T/net.err" || { cat "$T/net.err"; fail "the header does not name 4 ranks"; }
losses "$T/one" > "$T/l1"; losses "$T/net" > "$T/ln"; losses "$T/loop" > "$T/ll"
[ "$(wc -l < "$T/l1")" = 20 ] || fail "expected 20 step records, got $(wc -l < "$T/l1")"
paste "$T/l1" "$T/ln" | awk '{d=$2-$4; if (d<0) d=-d; if ($1!=$3 || d > 1e-5*$2) {print "step " $1 ": " $2 " vs " $4; bad=1}} END {exit bad}' \
  || fail "the 2-host losses differ from the 1-process run's by more than 1e-5 relative"
cmp -s "$T/ln" "$T/ll" || { paste "$T/ln" "$T/ll" | head; fail "the 2-host losses differ from loopback's"; }
[ "$(st_diff "$T/net/model.safetensors" "$T/loop/model.safetensors")" = 0 ] \
  || fail "the 2-host parameters differ from loopback's"
[ "$(ending net | grep -c .)" -ge 3 ] || { cat "$T/net.out"; fail "no summary at the end of the 2-host job"; }
diff <(ending net) <(ending loop) || fail "the 2-host job ends otherwise than loopback's"
echo "2 hosts = 1 process (1e-5) = loopback (bitwise), 20 steps"

# A run killed in the middle: waits for its third checkpoint (one per 8-step epoch), then $1.
start_long() {  # NAME
  tb_mpirun -np 4 "$QKV" --threads 1 train "${small[@]}" --data "$T/fra.txt" --time-budget none --epochs 100000 \
    --out "$T/$1" > "$T/$1.out" 2> "$T/$1.err" &
  mp=$!
  for _ in $(seq 1 3000); do
    n=$(grep -c '"kind":"epoch"' "$T/$1/metrics.jsonl" 2> /dev/null) || true
    [ "${n:-0}" -ge 3 ] && return 0
    kill -0 "$mp" 2> /dev/null || { cat "$T/$1.err"; fail "the run $1 ended early"; }
    sleep 0.1
  done
  fail "no third checkpoint in $T/$1"
}
wait_end() {  # NAME: waits for mpirun (the guard: 300 s), sets rc
  local i
  for i in $(seq 1 3000); do kill -0 "$mp" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$mp" 2> /dev/null && { kill -9 "$mp"; cat "$T/$1.err"; fail "$1: mpirun still runs 300 s after the loss"; }
  set +e; wait "$mp"; rc=$?; set -e
  mp=""
  [ $rc != 0 ] || fail "$1: the job exited 0"
}
check_lost_line() {  # NAME: the qkv line, once, naming ranks 2 and 3 and the folder's checkpoint
  local line step
  [ "$(grep -c "^qkv train: ranks 2, 3 lost (on h1: " "$T/$1.err")" = 1 ] || { cat "$T/$1.err"; fail "$1: no single qkv line naming ranks 2, 3"; }
  grep "qkv train: .*lost" "$T/$1.err" | grep -v "^qkv train: ranks 2, 3 lost" && fail "$1: another rank also reported a loss"
  line=$(grep "^qkv train: ranks 2, 3 lost" "$T/$1.err")
  echo "$1: $line"
  step=$(sed -n 's/.*the last checkpoint is .*checkpoint.safetensors (step \([0-9]*\)); .*/\1/p' <<< "$line")
  [ -n "$step" ] || fail "$1: the line names no checkpoint step"
  grep -qF "the last checkpoint is $T/$1/checkpoint.safetensors (step $step); resume with: mpirun -np 2 qkv train --resume --out $T/$1" <<< "$line" \
    || fail "$1: the line lacks the checkpoint path or the resume command"
  # The folder loads, at that checkpoint: nothing in it is half-written.
  run_rc 0 info "$T/$1" --no-params
  grep -qE "checkpoint: step $step(,|$)" "$T/out" || { cat "$T/out"; fail "$1: qkv info does not show the checkpoint at step $step"; }
  lost_step=$step
}

# 2. every rank of host 1 killed
start_long killed
[ "$(bash "$TB" kill "$state" 1 "$QKV --threads 1 train")" = 2 ] || fail "did not find host 1's 2 ranks"
wait_end killed
check_lost_line killed
# The resume command the line gives (2 ranks: what is left), 4 steps further.
set +e
mpirun -np 2 "$QKV" --threads 1 train --resume --out "$T/killed" --max-steps $((lost_step + 4)) --no-progress \
  > "$T/resumed.out" 2> "$T/resumed.err"
rc=$?
set -e
[ $rc = 0 ] || { cat "$T/resumed.err"; fail "the resume command failed"; }
grep -q "resuming from .*step $lost_step" "$T/resumed.err" || { cat "$T/resumed.err"; fail "the resume did not start at step $lost_step"; }

# 3. host 1's link cut
start_long cut
bash "$TB" link "$state" 1 down
wait_end cut
check_lost_line cut
grep -q "ORTE has lost communication with a remote daemon" "$T/cut.err" || { cat "$T/cut.err"; fail "cut: mpirun did not notice the lost host"; }

# 4. nothing left behind
bash "$TB" down "$state"
ip netns list | grep -q "^$prefix" && fail "namespaces left: $(ip netns list | grep "^$prefix")"
pgrep -f "$T/" > /dev/null && fail "processes left: $(pgrep -af "$T/")"
echo "test_netns: ok"
