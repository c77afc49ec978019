#!/usr/bin/env bash
# The test bed's user-space link delay (tests/dist/tun_delay, netns_testbed.sh --link tun), for
# kernels without sch_netem:
#  1. a 1 ms one-way delay gives a round trip of at least 2 ms between two hosts (UDP echo, the
#     smallest of 10; a lower bound only: a slower machine only adds to it);
#  2. 4 ranks on 2 hosts trained through the relay (1 ms) give the same losses and parameters, bit
#     for bit, as the same job over plain veth links (the delay changes timing, never results);
#  3. nothing is left: no namespace of either test bed, no relay, no process of these runs.
# Skips (exit 77) when not root, when `ip netns` is not permitted or when there is no TUN device.
# Usage: test_netns_delay.sh /path/to/qkv /path/to/tun_delay
source "$(dirname "$0")/../cli/lib.sh" "$1"
here=$(cd "$(dirname "$0")" && pwd)
TB="$here/netns_testbed.sh"
bash "$TB" check || exit 77
[ -c /dev/net/tun ] || { echo "test_netns_delay: no /dev/net/tun (CONFIG_TUN); skipped" >&2; exit 77; }
export QKV_TUN_DELAY=$2
[ -x "$QKV_TUN_DELAY" ] || fail "no relay program '$2'"
command -v mpirun > /dev/null || fail "mpirun not found (scripts/install_deps.sh installs openmpi-bin)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # as test_train_mpi.sh
export TMPDIR="$T"  # Open MPI's session folders: removed with the test's folder
tun="$T/tun"; veth="$T/veth"
cleanup() { bash "$TB" down "$tun" 2> /dev/null || true; bash "$TB" down "$veth" 2> /dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
bash "$TB" up "$tun" --hosts 2 --slots 2 --link tun --delay 1ms
bash "$TB" up "$veth" --hosts 2 --slots 2
relay=$(cat "$tun/relay.pid")
prefixes=$(sed -n 's/^PREFIX=//p' "$tun/testbed.env" "$veth/testbed.env")

# 1. the round trip: host 1 echoes UDP datagrams until "end", host 0 sends 10 (each resent until
# answered: the echo may not listen yet) and keeps the smallest round trip.
bash "$TB" exec "$tun" 1 /usr/bin/python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("10.231.0.11", 7007)); s.settimeout(120)
while True:
    d, a = s.recvfrom(64)
    if d == b"end":
        break
    s.sendto(d, a)
' &
echo_pid=$!
rtt=$(bash "$TB" exec "$tun" 0 /usr/bin/python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
best = None
for i in range(10):
    for attempt in range(240):
        t0 = time.perf_counter(); s.sendto(str(i).encode(), ("10.231.0.11", 7007))
        try:
            while s.recv(64) != str(i).encode():
                pass
        except socket.timeout:
            continue
        rtt = time.perf_counter() - t0
        best = rtt if best is None else min(best, rtt)
        break
    else:
        raise SystemExit("no echo from host 1 in 120 s")
for _ in range(3):
    s.sendto(b"end", ("10.231.0.11", 7007))
print(f"{best * 1e3:.3f}")
')
wait "$echo_pid" || fail "the echo on host 1 failed"
echo "1 ms one way through the relay: smallest round trip $rtt ms"
awk -v r="$rtt" 'BEGIN {exit !(r >= 2.0)}' || fail "round trip $rtt ms < 2 ms with 1 ms one way: the relay does not delay"

# 2. training through the relay = training over veth
six_pairs > "$T/fra.txt"
small=(--threads 1 train --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8
       --num-steps 6 --no-progress --dropout 0 --log-every 1 --data "$T/fra.txt" --max-steps 12)
losses() { sed -n 's/.*"kind":"step","step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }
for bed in tun veth; do
  set +e
  timeout -s KILL 600 bash "$TB" mpirun "$T/$bed" -np 4 "$QKV" "${small[@]}" --out "$T/run_$bed" \
    > "$T/$bed.out" 2> "$T/$bed.err"
  rc=$?
  set -e
  [ $rc = 0 ] || { cat "$T/$bed.err"; fail "4 ranks over 2 hosts ($bed links): exit $rc"; }
  grep -q "data-parallel over 4 ranks (mpi;" "$T/$bed.err" || { cat "$T/$bed.err"; fail "$bed: the header does not name 4 ranks"; }
  losses "$T/run_$bed" > "$T/l_$bed"
done
[ "$(wc -l < "$T/l_tun")" = 12 ] || fail "expected 12 step records through the relay, got $(wc -l < "$T/l_tun")"
cmp -s "$T/l_tun" "$T/l_veth" || { paste "$T/l_tun" "$T/l_veth" | head; fail "the losses through the relay differ from veth's"; }
d=$(/usr/bin/python3 "$here/st_diff.py" "$T/run_tun/model.safetensors" "$T/run_veth/model.safetensors" \
    | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p')
[ "$d" = 0 ] || fail "the parameters through the relay differ from veth's (max abs diff $d)"
echo "4 ranks on 2 hosts, 12 steps: relay (1 ms) = veth, bitwise"

# 3. nothing left
bash "$TB" down "$tun"; bash "$TB" down "$veth"
for p in $prefixes; do ip netns list | grep -q "^$p" && fail "namespaces left: $(ip netns list | grep "^$p")"; done
kill -0 "$relay" 2> /dev/null && fail "the relay (pid $relay) still runs"
pgrep -f "$T/" > /dev/null && fail "processes left: $(pgrep -af "$T/")"
echo "test_netns_delay: ok"
