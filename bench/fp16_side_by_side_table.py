#!/usr/bin/env python3
"""The markdown table of bench/fp16_side_by_side.sh's log: per shape and mask, the median over
rounds of GFLOP/s (by wall time, or with --cpu by CPU time: qkv's Google Benchmark cpu_time, which
is the process's with one thread, and torch2_attn_fp16.py --cpu-time's figure) for qkv float32 /
float16 / bfloat16 and PyTorch 2.6 flash float32 / float16, and the ratios.
Usage: fp16_side_by_side_table.py LOG [--cpu]"""
import collections, json, re, statistics, sys

FLOPS = lambda B, H, N, d, causal: 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)


def main():
    txt = open(sys.argv[1]).read()
    cpu = "--cpu" in sys.argv
    qkv, torch = collections.defaultdict(list), collections.defaultdict(list)
    pat = (r'"name": "BM_attention_sdpa_dtype_fwd/B:(\d+)/H:(\d+)/N:(\d+)/d:(\d+)/causal:(\d)/dtype:(\d)/real_time"'
           r'.*?"real_time": ([0-9.e+-]+),\s*"cpu_time": ([0-9.e+-]+)')
    for m in re.finditer(pat, txt, re.S):
        B, H, N, d, c, dt = map(int, m.groups()[:6])
        ms = float(m.group(8) if cpu else m.group(7))
        key = (f"{B},{H},{N},{d}", "causal" if c else "full", ["fp32", "fp16", "bf16"][dt])
        qkv[key].append(FLOPS(B, H, N, d, c) / (ms / 1e3) / 1e9)
    for line in txt.splitlines():
        if line.startswith('{"side": "torch"'):
            r = json.loads(line)
            torch[(r["shape"], r["mode"], r["dtype"])].append(r["gflops"])
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    keys = sorted({k[:2] for k in qkv}, key=lambda k: (int(k[0].split(",")[2]), k[1] == "causal"))
    print("| shape | mask | qkv fp32 | qkv fp16 | qkv bf16 | PyTorch fp32 flash | PyTorch fp16 flash | "
          "qkv fp16 / PyTorch fp16 | qkv fp16 / qkv fp32 | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in keys:
        a, h, b = (med(qkv[k + (t,)]) for t in ("fp32", "fp16", "bf16"))
        t32, t16 = med(torch[k + ("fp32",)]), med(torch[k + ("fp16",)])
        print(f"| ({k[0]}) | {k[1]} | {a:.1f} | {h:.1f} | {b:.1f} | {t32:.1f} | {t16:.2f} | **{h / t16:.1f}×** | "
              f"{h / a:.2f} | {len(qkv[k + ('fp16',)])} / {len(torch[k + ('fp16',)])} |")


if __name__ == "__main__":
    main()
