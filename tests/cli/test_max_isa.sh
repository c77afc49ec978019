#!/usr/bin/env bash
# QKV_MAX_ISA (src/kernels/cpu/isa.h): every cap runs and prints the same 4-decimal attention table;
# the cap reaches oneDNN; an unknown word is a clear error naming the variable and the words it
# accepts (a warning before --help or --version, which still print).
source "$(dirname "$0")/lib.sh" "$1"
for isa in scalar avx2 avx512; do
  QKV_MAX_ISA=$isa run_rc 0 attention --out "$T/$isa"
  out_has "row sum"
  grep -E '^(I|love|deep|learning) ' "$T/out" > "$T/table_$isa"
  [ "$(wc -l < "$T/table_$isa")" = 4 ] || fail "QKV_MAX_ISA=$isa: no 4-row table"
done
cmp -s "$T/table_scalar" "$T/table_avx512" || fail "scalar and avx512 tables differ"
# The cap reaches oneDNN too (unless ONEDNN_MAX_CPU_ISA says otherwise): capped at avx2, its int8
# kernels have no VNNI, so int8 takes 7-bit activations.
if [ -z "${ONEDNN_MAX_CPU_ISA:-}" ]; then
  QKV_MAX_ISA=avx2 run_rc 0 --version
  out_has "int8 matrix products (--compute-type int8): oneDNN dnnl_gemm_u8s8s32, 7-bit activations ("
  ONEDNN_MAX_CPU_ISA= QKV_MAX_ISA=avx2 run_rc 0 --version  # an empty ONEDNN_MAX_CPU_ISA is unset
  out_has "int8 matrix products (--compute-type int8): oneDNN dnnl_gemm_u8s8s32, 7-bit activations ("
  # oneDNN ignores a word it does not know: QKV_MAX_ISA's cap still reaches it.
  ONEDNN_MAX_CPU_ISA=bogus QKV_MAX_ISA=avx2 run_rc 0 --version
  out_has "int8 matrix products (--compute-type int8): oneDNN dnnl_gemm_u8s8s32, 7-bit activations ("
fi
QKV_MAX_ISA=avx9 run_rc 2 attention --out "$T/bad"  # a usage error, as bad QKV_KERNELS/QKV_ATTENTION
err_has "QKV_MAX_ISA" "avx9" "expected scalar, avx2, avx512"
# Help is still help under a bad cap (or a bad QKV_KERNELS): printed, exit 0.
QKV_MAX_ISA=avx9 run_rc 0 --help
out_has "translate"; err_has "qkv: warning: QKV_MAX_ISA" "avx9"
QKV_KERNELS=bogus QKV_MAX_ISA=avx9 run_rc 0 train --help
out_has "--out"
# So is the version: printed (the kernel paths not known, naming the bad value), exit 0.
QKV_MAX_ISA=avx9 run_rc 0 --version
out_has "qkv 0.1.0" "kernel paths: not known: QKV_MAX_ISA" "avx9"; err_has "qkv: warning: QKV_MAX_ISA" "avx9"
QKV_ATTENTION=bogus run_rc 0 --version
out_has "qkv 0.1.0"; err_has "qkv: warning: QKV_ATTENTION" "bogus"
# The benchmarks read the cap too: a bad word stops them at once with the same message (exit 2),
# not an abort inside a benchmark. (Where the build has benchmarks: qkv is BUILD/bin/qkv.)
BENCH="$(dirname "$QKV")/../bench/bench_attention"
if [ -x "$BENCH" ]; then
  rc=0; QKV_MAX_ISA=avx9 "$BENCH" --benchmark_filter=precision > "$T/out" 2> "$T/err" || rc=$?
  [ "$rc" = 2 ] || fail "bench_attention with QKV_MAX_ISA=avx9: exit $rc, want 2"
  err_has "QKV_MAX_ISA" "avx9"
  # So are a bad --isa (the message names the program) and a --threads that is not a count.
  rc=0; "$BENCH" --isa=avx9 --benchmark_filter=precision > "$T/out" 2> "$T/err" || rc=$?
  [ "$rc" = 2 ] || fail "bench_attention --isa=avx9: exit $rc, want 2"
  err_has "bench_attention: --isa" "avx9"
  BDIR="$(dirname "$BENCH")"
  for b in bench_attention bench_peak bench_train_step bench_matmul bench_gru; do
    for t in abc 0 2x +4 " 4"; do  # both spellings, in every benchmark
      for spelling in "--threads=$t" "--threads|$t"; do
        IFS='|' read -r -a args <<< "$spelling"
        rc=0; "$BDIR/$b" "${args[@]}" --benchmark_filter=NONE > "$T/out" 2> "$T/err" || rc=$?
        [ "$rc" = 2 ] || fail "$b ${args[*]}: exit $rc, want 2"
        err_has "$b: --threads must be a whole number" "'$t'"
      done
    done
    rc=0; "$BDIR/$b" --benchmark_filter=NONE --threads > "$T/out" 2> "$T/err" || rc=$?
    [ "$rc" = 2 ] || fail "$b with a bare --threads: exit $rc, want 2"
    err_has "$b: --threads needs a value"
  done
  for b in bench_attention bench_peak bench_train_step bench_matmul bench_gru bench_allocator bench_sdpa_call; do
    rc=0; "$BDIR/$b" --benchmark_filter=NONE --bogus > "$T/out" 2> "$T/err" || rc=$?
    [ "$rc" = 2 ] || fail "$b --bogus: exit $rc, want 2 (an unknown flag)"
    err_has "bogus"
  done
  # A benchmark's own minimum time gives way to the user's --benchmark_min_time (or
  # BENCHMARK_MIN_TIME): Google Benchmark lets MinTime win over the flag. Listed, not run.
  for case in "bench_attention|precision_fwd/N:512/d:64/bf16:0/|1.000" "bench_attention|few_queries_fwd/Tq:1/Tk:10/path:1/|0.100" \
              "bench_matmul|BM_linear_fp32/1/256/256/|0.200" "bench_train_step|BM_train_step/194/214/|5.000"; do
    IFS='|' read -r b filter secs <<< "$case"
    "$BDIR/$b" --benchmark_list_tests --benchmark_filter="$filter" > "$T/out" 2> "$T/err" || fail "$b --benchmark_list_tests"
    out_has "/min_time:$secs/"
    "$BDIR/$b" --benchmark_list_tests --benchmark_filter="$filter" --benchmark_min_time=0.01 > "$T/out" 2> "$T/err" ||
      fail "$b --benchmark_min_time=0.01 --benchmark_list_tests"
    grep -q "^BM_" "$T/out" || fail "$b: nothing listed for $filter"
    ! grep -q "min_time" "$T/out" || fail "$b: --benchmark_min_time=0.01 is overridden by the benchmark's own $secs s"
    BENCHMARK_MIN_TIME=0.01 "$BDIR/$b" --benchmark_list_tests --benchmark_filter="$filter" > "$T/out" 2> "$T/err" ||
      fail "$b under BENCHMARK_MIN_TIME"
    ! grep -q "min_time" "$T/out" || fail "$b: BENCHMARK_MIN_TIME=0.01 is overridden by the benchmark's own $secs s"
  done
fi
echo "ok"
