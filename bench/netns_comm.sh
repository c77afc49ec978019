#!/usr/bin/env bash
# The communication model (bench/dp_scaling_model.py) against measurements on the multi-host
# test bed (tests/dist/netns_testbed.sh): N ranks on N namespace hosts, one rank each, links
# shaped to RATE with DELAY one way. Per cell:
#   all-reduce: median of an fp32 all-reduce of the model's gradient size (mpi_probe
#               bench_allreduce), against the model's t_comm (ring; alpha = ALPHA_US + DELAY);
#   step:       `qkv --threads 1 train` ms per step (metrics.jsonl: training seconds / steps) and
#               rank 0's wait on the gradient reduction per step, against the model's exposed
#               communication (t_comm less what overlaps the backward pass, 2/3 of the compute);
#               compute = step - wait, as measured.
#   small:      mean of 100 back-to-back all-reduces of SMALL floats (1 KiB: the latency term).
# Prints a Markdown table and the machine, load average and kernel (netem or not) with it; with
# TSV=FILE also appends one tab-separated row per cell there (bench/dp_scaling_model.py --fit).
# LINK=veth (default): delays need sch_netem (CONFIG_NET_SCH_NETEM); without it delay cells say so.
# LINK=tun: the delays go through the test bed's user-space relay (tests/dist/tun_delay, RELAY
# names it), and each rate's row group starts with a plain veth cell at no delay (a second test
# bed up at the same time), so the relay's own cost is measured in the same minutes.
# SYSCTLS="key=value ..." sets those (per-namespace) sysctls in every host, e.g.
# net.ipv4.tcp_slow_start_after_idle=0 (bench/RESULTS.md: what a step's idle gaps cost).
# ROUNDS=R repeats the whole table (rounds alternate in time with the other cells). PROBE_ONLY=1
# measures the all-reduces only (no training: step and wait are nan).
# Needs root (ip netns). Usage:
#   bench/netns_comm.sh [QKV] [MPI_PROBE] [STEPS]    (defaults: build/bin/qkv build/tests/mpi_probe 30)
#   env: RANKS="2 4" RATES="1gbit 10gbit 25gbit" DELAYS="0 0.1ms 1ms" PRESET=demo LINK=veth|tun
#        RELAY=build/tests/tun_delay ROUNDS=1 TSV= SMALL=256
#        QKV_DATA=../shared/data/fra-eng.zip ALPHA_US=20 BUCKET_MB=4
set -euo pipefail
QKV=$(realpath "${1:-build/bin/qkv}"); PROBE=$(realpath "${2:-build/tests/mpi_probe}"); STEPS=${3:-30}
RANKS=${RANKS:-2 4}; RATES=${RATES:-1gbit 10gbit 25gbit}; DELAYS=${DELAYS:-0 0.1ms 1ms}
PRESET=${PRESET:-demo}; DATA=$(realpath "${QKV_DATA:-../shared/data/fra-eng.zip}")
ALPHA_US=${ALPHA_US:-20}; BUCKET_MB=${BUCKET_MB:-4}
LINK=${LINK:-veth}; ROUNDS=${ROUNDS:-1}; TSV=${TSV:-}; SMALL=${SMALL:-256}
case $LINK in
  veth) ;;
  tun) QKV_TUN_DELAY=$(realpath "${RELAY:-build/tests/tun_delay}"); export QKV_TUN_DELAY
       [ -x "$QKV_TUN_DELAY" ] || { echo "netns_comm: no relay $QKV_TUN_DELAY (cmake --build build --target tun_delay)" >&2; exit 1; } ;;
  *) echo "netns_comm: LINK=$LINK: veth or tun" >&2; exit 1 ;;
esac
for b in "$QKV" "$PROBE"; do [ -x "$b" ] || { echo "netns_comm: no program $b (cmake --build build --target qkv_cli mpi_probe)" >&2; exit 1; }; done
here=$(cd "$(dirname "$0")" && pwd)
TB="$here/../tests/dist/netns_testbed.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
T=$(mktemp -d); state="$T/tb"; vstate="$T/tbv"
trap 'bash "$TB" down "$state" 2> /dev/null || true; bash "$TB" down "$vstate" 2> /dev/null || true; rm -rf "$T"' EXIT
bash "$TB" check
load() { cut -d' ' -f1 /proc/loadavg; }
train_args=(--threads 1 train --preset "$PRESET" --data "$DATA" --max-steps "$STEPS" --val-every off --no-progress
            --log-every "$STEPS" --time-budget none --test-pairs 100)
ms_per_step() { sed -n 's/.*"kind":"step".*"train_seconds":\([0-9.e+-]*\).*/\1/p' "$1/metrics.jsonl" | tail -1 \
                | awk -v s="$STEPS" '{printf "%.1f", 1000 * $1 / s}'; }

# The model's size and one process's compute per step (1 thread, the whole batch).
"$QKV" "${train_args[@]}" --out "$T/one" > /dev/null 2> "$T/one.err" || { cat "$T/one.err"; exit 1; }
# Parameters: the elements of model.safetensors' tensors (its JSON header).
params=$(/usr/bin/python3 -c 'import json, math, struct, sys
f = open(sys.argv[1], "rb"); h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
print(sum(math.prod(v["shape"]) for k, v in h.items() if k != "__metadata__"))' "$T/one/model.safetensors")
t1=$(ms_per_step "$T/one")
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, kernel $(uname -r); $(date -u '+%F %H:%M UTC')"
[ -z "${SYSCTLS:-}" ] || echo "# in every host: sysctl $SYSCTLS"
echo "# preset $PRESET: $params parameters ($(awk -v p="$params" 'BEGIN {printf "%.1f", 4 * p / 1048576}') MiB fp32 gradients); 1 process x 1 thread: $t1 ms/step; load $(load)"
echo
echo "| N | rate | link | delay | all-reduce ms (model) | small ms | step ms | wait ms/step (model exposed) | load |"
echo "|---|---|---|---|---|---|---|---|---|"
model() {  # N RATE_BITS DELAY_S COMPUTE_MS -> "t_comm_ms exposed_ms"
  PYTHONPATH="$here" /usr/bin/python3 - "$@" "$params" "$ALPHA_US" "$BUCKET_MB" << 'EOF'
import sys
from dp_scaling_model import t_comm_s
n, bps, delay, compute_ms, params, alpha_us, bucket_mb = (float(x) for x in sys.argv[1:])
t = t_comm_s(int(n), params * 4, bps / 8, alpha_us * 1e-6 + delay, bucket_mb * 2**20)
print(f"{t * 1000:.1f} {max(0.0, t - 0.66 * compute_ms / 1000) * 1000:.1f}")
EOF
}
seconds() { case $1 in 0) echo 0 ;; *ms) awk -v v="${1%ms}" 'BEGIN {print v / 1000}' ;; *us) awk -v v="${1%us}" 'BEGIN {print v / 1e6}' ;; esac; }
bits() { local v=${1%bit}; case $v in *g) echo $(( ${v%g} * 1000000000 )) ;; *m) echo $(( ${v%m} * 1000000 )) ;; esac; }
cell() {  # N RATE LINK DELAY STATE ROUND: one row
  local n=$1 rate=$2 link=$3 delay=$4 st=$5 round=$6 out ar small step wait_s wait_ms compute m_comm m_exposed
  if [ "$delay" = 0 ]; then bash "$TB" shape "$st" --rate "$rate"; else bash "$TB" shape "$st" --rate "$rate" --delay "$delay"; fi
  out=$(bash "$TB" mpirun "$st" -np "$n" "$PROBE" bench_allreduce "$params" "$SMALL" 2> /dev/null)
  ar=$(sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' <<< "$out" | head -1)
  small=$(sed -n 's/.*back to back .*: mean \([0-9.]*\) ms.*/\1/p' <<< "$out")
  if [ "${PROBE_ONLY:-0}" = 1 ]; then
    step=nan; wait_ms=nan; compute=0
  else
    rm -rf "$T/run"
    bash "$TB" mpirun "$st" -np "$n" "$QKV" "${train_args[@]}" --out "$T/run" > "$T/run.out" 2> "$T/run.err" \
      || { cat "$T/run.err"; exit 1; }
    step=$(ms_per_step "$T/run")
    wait_s=$(sed -n 's/.*rank 0 waited \([0-9.]*\) s on the gradient reduction.*/\1/p' "$T/run.out")
    wait_ms=$(awk -v w="$wait_s" -v s="$STEPS" 'BEGIN {printf "%.1f", 1000 * w / s}')
    compute=$(awk -v a="$step" -v b="$wait_ms" 'BEGIN {print a - b}')
  fi
  read -r m_comm m_exposed < <(model "$n" "$(bits "$rate")" "$(seconds "$delay")" "$compute")
  local l; l=$(load)
  echo "| $n | $rate | $link | $delay | $ar ($m_comm) | $small | $step | $wait_ms ($m_exposed) | $l |"
  [ -z "$TSV" ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$(bits "$rate")" "$link" \
    "$(seconds "$delay")" "$ar" "$small" "$step" "$wait_ms" "$compute" "$params" "$t1" "$l" "$round" >> "$TSV"
}
[ -z "$TSV" ] || [ -s "$TSV" ] || printf 'n\trate_bps\tlink\tdelay_s\tallreduce_ms\tsmall_ms\tstep_ms\twait_ms\tcompute_ms\tparams\tone_ms\tload\tround\n' > "$TSV"
for n in $RANKS; do
  if [ "$LINK" = tun ]; then
    bash "$TB" up "$state" --hosts "$n" --slots 1 --link tun 2> /dev/null
    bash "$TB" up "$vstate" --hosts "$n" --slots 1 2> /dev/null
  else
    bash "$TB" up "$state" --hosts "$n" --slots 1 2> /dev/null
  fi
  netem=$(sed -n 's/^NETEM=//p' "$state/testbed.env")
  for st in "$state" "$vstate"; do
    [ -f "$st/testbed.env" ] || continue
    for ((h = 0; h < n; h++)); do
      for kv in ${SYSCTLS:-}; do bash "$TB" exec "$st" "$h" sysctl -q -w "$kv"; done
    done
  done
  for round in $(seq 1 "$ROUNDS"); do
    for rate in $RATES; do
      [ "$LINK" = veth ] || cell "$n" "$rate" veth 0 "$vstate" "$round"
      for delay in $DELAYS; do
        if [ "$delay" != 0 ] && [ "$LINK" = veth ] && [ "$netem" != 1 ]; then
          echo "| $n | $rate | veth | $delay | n/a: this kernel has no sch_netem (LINK=tun) | | | | |"; continue
        fi
        cell "$n" "$rate" "$LINK" "$delay" "$state" "$round"
      done
    done
  done
  bash "$TB" down "$state"
  [ "$LINK" = veth ] || bash "$TB" down "$vstate"
done
