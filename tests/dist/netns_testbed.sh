#!/usr/bin/env bash
# A multi-host test bed on one machine: N Linux network namespaces as "hosts", each with its own
# address in 10.231.0.0/24 and its own host name, joined by veth pairs through a bridge that lives
# in a namespace of its own (a "switch"). Nothing is added to the machine's own namespace: the
# subnet exists only inside the namespaces made here, so no traffic can leave them. Links are
# shaped on each host's egress: `tc netem` (delay and rate) where the kernel has sch_netem, else
# `tc tbf` (rate only; a delay is then refused, not ignored).
#
# --link tun (for kernels without sch_netem): each host's eth0 is a TUN device owned by a relay
# process (tests/dist/tun_delay, built with the tests; QKV_TUN_DELAY or --relay names it) that
# replaces the bridge: it holds every packet for DELAY (one way) and hands it to the destination
# host's device. The rate is still tc tbf's job, on each host's eth0. The relay lives in the
# switch namespace and its devices vanish with it; `down` ends it first. MTU 65520 on these links
# (TUN has no segmentation offload: large packets keep the relay's packet rate low). It runs at
# nice -10: it stands for the network, which does not wait for the ranks' CPU (on a loaded
# machine at nice 0 its TCP throughput halved).
#
# Open MPI runs as on a cluster: mpirun on host 0, one orted per host started through an rsh agent
# that enters the host's namespace instead of ssh, ranks placed by slot from a hostfile naming the
# hosts' addresses, and only TCP over the veth links between processes (pml ob1, btl tcp,self,
# both TCP transports restricted to the subnet; no shared-memory transport, even within a host).
#
# Usage (root; iproute2 and util-linux):
#   netns_testbed.sh up STATE [--hosts N] [--slots S] [--rate RATE] [--delay DELAY]
#                       [--link veth|tun] [--relay PATH]
#       makes the hosts; STATE (a new folder) receives the hostfile, the agent and the names
#   netns_testbed.sh mpirun STATE MPIRUN_ARGS...   mpirun on host 0 with the test bed's options
#   netns_testbed.sh exec STATE HOST CMD...        CMD inside host HOST (0-based)
#   netns_testbed.sh shape STATE [--rate RATE] [--delay DELAY]   reshapes every host's link
#   netns_testbed.sh link STATE HOST up|down       brings a host's link up or down
#   netns_testbed.sh kill STATE HOST [PATTERN]     SIGKILL to HOST's processes whose command line
#                                                  matches PATTERN (default: every process there),
#                                                  all stopped first (a host failing at once)
#   netns_testbed.sh down STATE                    ends every process in the hosts, removes them
#   netns_testbed.sh run [UP OPTIONS] -- CMD...
#       up, CMD with $QKV_TESTBED set to the state folder, down (on every exit path)
#   netns_testbed.sh check                         exit 0 when this machine can make the test bed;
#                                                  else exit 77 with the reason on stderr
# RATE as tc takes it (1gbit, 10gbit); DELAY one way per host link (0.1ms, 1ms, 100us): a round
# trip between two hosts crosses two shaped links (netem) or the relay twice (tun), so it adds
# 2 x DELAY.
set -euo pipefail
SUBNET=10.231.0
die() { echo "netns_testbed: $*" >&2; exit 1; }

check() {
    [ "$(id -u)" = 0 ] || { echo "netns_testbed: needs root (ip netns); skipped" >&2; return 77; }
    command -v ip > /dev/null || { echo "netns_testbed: no 'ip' (install iproute2); skipped" >&2; return 77; }
    command -v unshare > /dev/null || { echo "netns_testbed: no 'unshare' (util-linux); skipped" >&2; return 77; }
    local probe="qkvprobe$$"
    if ! err=$(ip netns add "$probe" 2>&1); then
        echo "netns_testbed: 'ip netns add' is not permitted here ($err); skipped" >&2; return 77
    fi
    ip netns del "$probe"
    return 0
}

has_netem() {  # whether the kernel has sch_netem (probed on a namespace's loopback)
    ip netns exec "$1" tc qdisc add dev lo root netem delay 1us 2> /dev/null || return 1
    ip netns exec "$1" tc qdisc del dev lo root
}

load_state() {
    [ -f "$1/testbed.env" ] || die "'$1' is not a test bed's state folder (no testbed.env)"
    # shellcheck disable=SC1091
    source "$1/testbed.env"
}

shape() {  # STATE [--rate R] [--delay D]
    local state=$1; shift
    load_state "$state"
    local rate="" delay=""
    while [ $# -gt 0 ]; do
        case $1 in --rate) rate=$2; shift 2 ;; --delay) delay=$2; shift 2 ;; *) die "shape: unknown option $1" ;; esac
    done
    local i ns
    if [ "${LINK:-veth}" = tun ]; then
        # The relay's delay: its control file, re-read on SIGHUP (0 when none is given); the relay
        # acknowledges with relay.delay_us.applied, waited for (10 s at most: a failure's bound).
        local want _
        want=$(delay_us "${delay:-0}")
        rm -f "$state/relay.delay_us.applied"
        echo "$want" > "$state/relay.delay_us"
        kill -HUP "$(cat "$state/relay.pid")" || die "shape: the relay (pid $(cat "$state/relay.pid")) is gone"
        for _ in $(seq 1 1000); do [ "$(cat "$state/relay.delay_us.applied" 2> /dev/null)" = "$want" ] && break; sleep 0.01; done
        [ "$(cat "$state/relay.delay_us.applied" 2> /dev/null)" = "$want" ] || die "shape: the relay did not take the delay $want us"
    fi
    for ((i = 0; i < HOSTS; i++)); do
        ns="${PREFIX}h$i"
        ip netns exec "$ns" tc qdisc del dev eth0 root 2> /dev/null || true
        [ -z "$rate" ] && { [ -z "$delay" ] || [ "${LINK:-veth}" = tun ]; } && continue
        if [ "${LINK:-veth}" = tun ]; then
            # Rate only (the relay delays). burst: 10 ms of the rate, at least two 64 KiB packets.
            local bps burst
            bps=$(rate_bits "$rate")
            burst=$((bps / 8 / 100)); [ "$burst" -ge 131072 ] || burst=131072
            ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
        elif [ "$NETEM" = 1 ]; then
            # A queue of a few thousand packets: netem's default (1000) drops at 25 Gb/s x 1 ms.
            ip netns exec "$ns" tc qdisc add dev eth0 root netem limit 10000 ${delay:+delay "$delay"} ${rate:+rate "$rate"}
        else
            [ -z "$delay" ] || die "shape: --delay needs sch_netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); only --rate can be shaped here (tc tbf)"
            # burst: at least one 10 ms worth of the rate's bytes, so tbf's timer granularity does
            # not cap the rate (64 KiB minimum, for TSO segments).
            local bps burst
            bps=$(rate_bits "$rate")
            burst=$((bps / 8 / 100)); [ "$burst" -ge 65536 ] || burst=65536
            ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
        fi
    done
    echo "rate=${rate:-none} delay=${delay:-none}" > "$state/shape"
}

delay_us() {  # 0.1ms -> 100, 1ms -> 1000, 250us -> 250, 0 -> 0
    local v=$1
    case $v in
        0) echo 0 ;;
        *ms) awk -v x="${v%ms}" 'BEGIN {printf "%d", x * 1000 + 0.5}' ;;
        *us) awk -v x="${v%us}" 'BEGIN {printf "%d", x + 0.5}' ;;
        *) die "delay '$v': use NUMms or NUMus" ;;
    esac
}

rate_bits() {  # 10gbit -> 10000000000
    local v=$1 num unit
    num=${v%%[a-zA-Z]*}; unit=${v#"$num"}
    case ${unit,,} in
        gbit) echo $((num * 1000000000)) ;; mbit) echo $((num * 1000000)) ;; kbit) echo $((num * 1000)) ;;
        bit|"") echo "$num" ;; *) die "rate '$v': use NUMgbit, NUMmbit or NUMkbit" ;;
    esac
}

up() {  # STATE [--hosts N] [--slots S] [--rate R] [--delay D]
    local state=$1; shift
    local hosts=2 slots=2 shape_args=() link=veth relay=${QKV_TUN_DELAY:-}
    while [ $# -gt 0 ]; do
        case $1 in
            --hosts) hosts=$2; shift 2 ;; --slots) slots=$2; shift 2 ;;
            --link) link=$2; shift 2 ;; --relay) relay=$2; shift 2 ;;
            --rate|--delay) shape_args+=("$1" "$2"); shift 2 ;;
            *) die "up: unknown option $1" ;;
        esac
    done
    [[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 200 ] || die "--hosts $hosts: 2 to 200"
    [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots $slots: 1 or more"
    case $link in
        veth) ;;
        tun) [ -n "$relay" ] && [ -x "$relay" ] \
                 || die "--link tun needs the relay program (--relay PATH or QKV_TUN_DELAY; cmake --build build --target tun_delay)"
             [ -c /dev/net/tun ] || die "--link tun: no /dev/net/tun (CONFIG_TUN)"
             relay=$(realpath "$relay") ;;
        *) die "--link $link: veth or tun" ;;
    esac
    [ ! -e "$state/testbed.env" ] || die "'$state' already holds a test bed"
    check || exit $?
    mkdir -p "$state"
    state=$(cd "$state" && pwd)
    # Short unique names (interface names have 15 characters at most).
    local id prefix
    id=$(printf '%05d' $(( ($$ + RANDOM) % 100000 )))
    prefix="qkv${id}"
    while ip netns list | grep -q "^${prefix}"; do id=$(printf '%05d' $((RANDOM % 100000))); prefix="qkv${id}"; done
    # The state is written first: a failure below leaves what `down` needs to remove it.
    cat > "$state/testbed.env" << EOF
PREFIX=$prefix
HOSTS=$hosts
SLOTS=$slots
SUBNET=$SUBNET
NETEM=0
LINK=$link
EOF
    local sw="${prefix}sw" i ns
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    [ "$link" = tun ] || { ip -n "$sw" link add br0 type bridge; ip -n "$sw" link set br0 up; }
    : > "$state/hostfile"
    local names=()
    for ((i = 0; i < hosts; i++)); do
        ns="${prefix}h$i"
        names+=("$ns")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        echo "$SUBNET.$((10 + i)) slots=$slots" >> "$state/hostfile"
        [ "$link" = veth ] || continue
        # Both ends made directly in their namespaces: no interface ever exists in the machine's own.
        ip link add "q${id}h$i" netns "$ns" type veth peer name "p$i" netns "$sw"
        ip -n "$ns" link set "q${id}h$i" name eth0
        ip -n "$sw" link set "p$i" master br0
        ip -n "$sw" link set "p$i" up
    done
    if [ "$link" = tun ]; then
        # The relay makes each host's eth0 and detaches once they exist (its pid in relay.pid).
        # Its delay from the start (the control file; `shape` below rewrites it and sends SIGHUP).
        local a delay=0
        for ((a = 0; a < ${#shape_args[@]}; a += 2)); do [ "${shape_args[a]}" != --delay ] || delay=${shape_args[a + 1]}; done
        delay_us "$delay" > "$state/relay.delay_us"
        nice -n -10 "$relay" --subnet "$SUBNET" --first 10 --control "$state/relay.delay_us" --home "$sw" \
            --pidfile "$state/relay.pid" "${names[@]}" 2>> "$state/relay.log" \
            || die "the relay did not start: $(cat "$state/relay.log")"
        for ns in "${names[@]}"; do ip -n "$ns" link set eth0 mtu 65520; done
    fi
    for ((i = 0; i < hosts; i++)); do
        ip -n "${prefix}h$i" addr add "$SUBNET.$((10 + i))/24" dev eth0
        ip -n "${prefix}h$i" link set eth0 up
    done
    has_netem "${prefix}h0" && sed -i 's/^NETEM=0/NETEM=1/' "$state/testbed.env"
    # The rsh agent: Open MPI runs `AGENT HOST COMMAND...` and expects a remote shell to parse the
    # command (as ssh does); this one enters the host's namespace with its own host name (a UTS
    # namespace), so Open MPI sees one node per host.
    cat > "$state/rsh_agent" << EOF
#!/usr/bin/env bash
# rsh agent of the test bed in $state (tests/dist/netns_testbed.sh).
host=\$1; shift
case \$host in
    $SUBNET.*) i=\$(( \${host##*.} - 10 )) ;;
    h[0-9]*) i=\${host#h} ;;
    *) echo "netns rsh agent: unknown host '\$host'" >&2; exit 255 ;;
esac
[ "\$i" -ge 0 ] && [ "\$i" -lt $hosts ] || { echo "netns rsh agent: no host '\$host'" >&2; exit 255; }
exec ip netns exec "${prefix}h\$i" unshare --uts sh -c "echo h\$i > /proc/sys/kernel/hostname; \$*"
EOF
    chmod +x "$state/rsh_agent"
    [ ${#shape_args[@]} -eq 0 ] || shape "$state" "${shape_args[@]}"
    echo "netns_testbed: $hosts hosts (${prefix}h0..h$((hosts - 1)), $SUBNET.10-$((9 + hosts))/24," \
         "$( [ "$link" = tun ] && echo "TUN links, delay relay pid $(cat "$state/relay.pid")" || echo "bridge") in ${prefix}sw)," \
         "$slots slots each, netem $( [ "$(grep -c NETEM=1 "$state/testbed.env")" = 1 ] && echo yes || echo "no")" >&2
}

# mpirun's options for the test bed: the hostfile, the agent, TCP over the subnet only, and TCP
# keepalive on mpirun's connections to the daemons, so that a host whose link is cut is noticed
# in about 5 s (time 2 s + 3 probes 1 s apart; Open MPI's default, 300 s + 9 x 20 s, is 8 min):
# mpirun then stops the job. When a rank aborts first (qkv's collective watchdog,
# QKV_DIST_TIMEOUT), mpirun's order to the lost host's daemon is never acknowledged and mpirun
# waits for it (seen: until killed), so the keepalive must be the shorter of the two.
# Waiting ranks yield the core (mpi_yield_when_idle): the hosts share this machine's cores, and a
# rank that busy-polls starves the softirq work that moves its own packets until the next timer
# tick (busy-polling: 4 ms per small all-reduce and 56 ms per 8.7 MiB at N = 2 on 2 cores,
# whatever the link; yielding: 1.3 and 26 ms; bench/RESULTS.md). A real host has cores for both.
mpirun_cmd() {  # STATE ARGS...
    local state
    state=$(cd "$1" && pwd); shift
    load_state "$state"
    local ns="${PREFIX}h0"
    exec ip netns exec "$ns" unshare --uts bash -c 'echo h0 > /proc/sys/kernel/hostname; exec "$@"' mpirun \
        mpirun --hostfile "$state/hostfile" \
        --mca plm_rsh_agent "$state/rsh_agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl tcp,self --mca mpi_yield_when_idle 1 \
        --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
        --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
        "$@"
}

exec_in() {  # STATE HOST CMD...
    local state=$1 host=$2; shift 2
    load_state "$state"
    exec ip netns exec "${PREFIX}h$host" "$@"
}

link() {  # STATE HOST up|down
    load_state "$1"
    case $3 in up|down) ;; *) die "link: up or down, not '$3'" ;; esac
    ip -n "${PREFIX}h$2" link set eth0 "$3"
}

kill_in() {  # STATE HOST [PATTERN]
    load_state "$1"
    local p n=0 victims=()
    for p in $(ip netns pids "${PREFIX}h$2"); do
        [ -z "${3:-}" ] || tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | grep -q -- "$3" || continue
        victims+=("$p")
    done
    # All at once, as a host that fails: stopped first, so none sees another end before it ends.
    for p in "${victims[@]}"; do kill -STOP "$p" 2> /dev/null || true; done
    for p in "${victims[@]}"; do kill -9 "$p" 2> /dev/null && n=$((n + 1)); done
    echo "$n"
}

down() {  # STATE
    local state=$1
    [ -f "$state/testbed.env" ] || return 0
    load_state "$state"
    local ns p pids round
    # The relay first, by its id (it also lives in the switch namespace, which the loop below
    # covers): its devices pin the hosts' namespaces until it ends.
    if [ -f "$state/relay.pid" ]; then
        p=$(cat "$state/relay.pid")
        kill -TERM "$p" 2> /dev/null && for _ in $(seq 1 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2> /dev/null || true
        rm -f "$state/relay.pid"
    fi
    # Every process inside our hosts (mpirun, the orteds, the ranks), by id: TERM, then KILL.
    for round in TERM KILL; do
        pids=""
        for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}"); do pids+=" $(ip netns pids "$ns")"; done
        [ -n "${pids// /}" ] || break
        for p in $pids; do kill -"$round" "$p" 2> /dev/null || true; done
        [ $round = KILL ] || for _ in $(seq 1 50); do
            alive=0; for p in $pids; do kill -0 "$p" 2> /dev/null && alive=1; done
            [ $alive = 0 ] && break; sleep 0.1
        done
    done
    # Deleting a namespace deletes its interfaces (veth ends, the bridge).
    for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}"); do ip netns del "$ns"; done
    rm -f "$state/testbed.env"
}

run() {
    local up_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do up_args+=("$1"); shift; done
    [ "${1:-}" = "--" ] || die "run: give the command after --"
    shift
    # Global: the EXIT trap runs after this function has returned.
    RUN_STATE=$(mktemp -d)
    trap 'down "$RUN_STATE"; rm -rf "$RUN_STATE"' EXIT
    trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP
    up "$RUN_STATE" "${up_args[@]}"
    QKV_TESTBED="$RUN_STATE" "$@"
}

cmd=${1:-}; shift || true
case $cmd in
    up) [ $# -ge 1 ] || die "up STATE [options]"; up "$@" ;;
    down) [ $# -eq 1 ] || die "down STATE"; down "$1"; rm -rf "${1:?}/rsh_agent" ;;
    mpirun) [ $# -ge 1 ] || die "mpirun STATE ARGS..."; mpirun_cmd "$@" ;;
    exec) [ $# -ge 3 ] || die "exec STATE HOST CMD..."; exec_in "$@" ;;
    shape) [ $# -ge 1 ] || die "shape STATE [--rate R] [--delay D]"; shape "$@" ;;
    link) [ $# -eq 3 ] || die "link STATE HOST up|down"; link "$@" ;;
    kill) [ $# -ge 2 ] || die "kill STATE HOST [PATTERN]"; kill_in "$@" ;;
    run) run "$@" ;;
    check) check ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
