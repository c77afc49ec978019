# Shared by the tests/cli/test_*.sh scripts: `source "$(dirname "$0")/lib.sh" "$1"` sets QKV (an
# absolute path to the qkv binary), a temporary folder T removed on exit, passive OpenMP waiting,
# and the helpers below.
set -euo pipefail
QKV="$1"
case "$QKV" in /*) ;; *) QKV="$PWD/$QKV" ;; esac
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
export OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
# run_rc WANT ARGS...: runs qkv, stdout in $T/out, stderr in $T/err, checks the exit code.
run_rc() {
  local want=$1; shift
  set +e
  "$QKV" "$@" > "$T/out" 2> "$T/err"; local rc=$?
  set -e
  [ "$rc" = "$want" ] || { cat "$T/err"; fail "'qkv $*': exit $rc, want $want"; }
}
# err_has / out_has TEXT...: every TEXT is in $T/err / $T/out (fixed strings).
err_has() { for s in "$@"; do grep -qF -- "$s" "$T/err" || { cat "$T/err"; fail "stderr lacks '$s'"; }; done; }
out_has() { for s in "$@"; do grep -qF -- "$s" "$T/out" || { cat "$T/out"; fail "stdout lacks '$s'"; }; done; }
# six_pairs: 60 lines of six English–French pairs in the fra.txt format, on stdout.
six_pairs() {
  for i in $(seq 1 60); do
    case $((i % 6)) in
      0) echo -e "Go.\tVa !" ;;
      1) echo -e "I lost.\tJ'ai perdu." ;;
      2) echo -e "He's calm.\tIl est calme." ;;
      3) echo -e "I'm home.\tJe suis chez moi." ;;
      4) echo -e "We won.\tNous avons gagné." ;;
      5) echo -e "Thank you.\tMerci." ;;
    esac
  done
}

# second_sigint PID: sends PID a second SIGINT once the first is taken (two pending ones are
# one): polls the process's pending set (60 s bound, a failure's only). A second one arriving while
# the first one's handler runs waits (SIGINT is blocked in its own handler) and is then the second.
second_sigint() {
  local p
  for _ in $(seq 1 1200); do
    p=$(sed -n 's/^ShdPnd:[[:space:]]*//p' "/proc/$1/status" 2> /dev/null || echo 0)
    [ $((0x${p:-0} & 2)) = 0 ] && break
    sleep 0.05
  done
  kill -INT "$1"
}

# png_size FILE: "WIDTHxHEIGHT" from the PNG's IHDR chunk (bytes 16..23, big-endian); fails when
# FILE is not a PNG.
png_size() {
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"
    od -An -tu1 -j16 -N8 "$1" | awk '{printf "%dx%d\n", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}'
}
