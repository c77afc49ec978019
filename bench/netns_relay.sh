#!/usr/bin/env bash
# What the test bed's user-space link delay (tests/dist/tun_delay, netns_testbed.sh --link tun)
# costs by itself, and whether its delays are right: two 2-host test beds up at once, one over
# plain veth through a bridge, one through the relay; per round, alternated in the same minutes:
#   ping   round trip host 0 -> host 1 (PINGS pings 5 ms apart: min / avg / max ms)
#   tcp    iperf3 host 0 -> host 1, unshaped, SECS seconds (receiver's Gb/s)
# for veth, the relay at 0 delay, then the relay at each of DELAYS (ping only: the round trip
# should be 2 x DELAY more than at 0). Prints a Markdown table with the load average per row.
# Needs root, iproute2, iputils-ping and iperf3 (Debian packages). Usage:
#   bench/netns_relay.sh [RELAY]       (default build/tests/tun_delay)
#   env: ROUNDS=3 PINGS=200 SECS=3 DELAYS="0.1ms 1ms"
set -euo pipefail
RELAY=$(realpath "${1:-build/tests/tun_delay}")
ROUNDS=${ROUNDS:-3}; PINGS=${PINGS:-200}; SECS=${SECS:-3}; DELAYS=${DELAYS:-0.1ms 1ms}
for c in ping iperf3; do command -v $c > /dev/null || { echo "netns_relay: no $c (apt-get install iputils-ping iperf3)" >&2; exit 1; }; done
[ -x "$RELAY" ] || { echo "netns_relay: no relay $RELAY (cmake --build build --target tun_delay)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
TB="$here/../tests/dist/netns_testbed.sh"
T=$(mktemp -d)
trap 'bash "$TB" down "$T/veth" 2> /dev/null || true; bash "$TB" down "$T/tun" 2> /dev/null || true; rm -rf "$T"' EXIT
bash "$TB" check
bash "$TB" up "$T/veth" --hosts 2 --slots 1 2> /dev/null
bash "$TB" up "$T/tun" --hosts 2 --slots 1 --link tun --relay "$RELAY" 2> /dev/null
load() { cut -d' ' -f1 /proc/loadavg; }
ping_ms() {  # STATE: "min / avg / max"
  bash "$TB" exec "$1" 0 ping -q -c "$PINGS" -i 0.005 10.231.0.11 | sed -n 's|.* = \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/.*|\1 / \2 / \3|p'
}
tcp_gbps() {  # STATE: iperf3's receiver rate, Gb/s
  bash "$TB" exec "$1" 1 iperf3 -s -1 -B 10.231.0.11 > /dev/null 2>&1 &
  local srv=$! out="" i
  for i in $(seq 1 50); do  # until the server listens (it starts in the background)
    out=$(bash "$TB" exec "$1" 0 iperf3 -c 10.231.0.11 -t "$SECS" -f g 2> /dev/null) && break
    sleep 0.1
  done
  wait "$srv" || true
  awk '/receiver/ {print $(NF-2)}' <<< "$out"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC')"
echo
echo "| round | link | one-way delay | ping RTT ms min / avg / max | TCP Gb/s | load |"
echo "|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  echo "| $r | veth | 0 | $(ping_ms "$T/veth") | $(tcp_gbps "$T/veth") | $(load) |"
  bash "$TB" shape "$T/tun"
  echo "| $r | relay | 0 | $(ping_ms "$T/tun") | $(tcp_gbps "$T/tun") | $(load) |"
  for d in $DELAYS; do
    bash "$TB" shape "$T/tun" --delay "$d"
    echo "| $r | relay | $d | $(ping_ms "$T/tun") | | $(load) |"
  done
done
bash "$TB" down "$T/tun"  # the relay says what it relayed and dropped as it ends
echo; sed 's/^/# /' "$T/tun/relay.log"
