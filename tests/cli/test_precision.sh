#!/usr/bin/env bash
# Mixed precision from the CLI: qkv --version names the CPU features and the bf16 path (and the
# cap changes it); qkv train --precision bf16 says so in its header, records train.precision in
# config.json, keeps the checkpoint fp32 and follows the fp32 loss curve closely on the same seed;
# --precision is refused with another word; --resume warns that a different --precision is ignored;
# qkv average --dtype bf16 writes a bf16 model folder that translate, eval and info read; an int8
# layer's refusal of a non-finite activation names the model folder.
# Usage: test_precision.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

run_rc 0 --version
out_has "cpu features: " "AMX: " "fp32 kernels: " "bf16 matrix products (--precision/--compute-type bf16): " "flash attention under bf16: the " \
        "int8 matrix products (--compute-type int8): oneDNN "
# oneDNN capped below VNNI: int8 takes 7-bit activations (its int16 pair sums saturate on 8-bit ones).
ONEDNN_MAX_CPU_ISA=AVX2 "$QKV" --version > "$T/novnni" || fail "qkv --version under ONEDNN_MAX_CPU_ISA=AVX2"
grep -qF "int8 matrix products (--compute-type int8): oneDNN dnnl_gemm_u8s8s32, 7-bit activations (" "$T/novnni" \
  || { cat "$T/novnni"; fail "the int8 path without VNNI"; }
QKV_MAX_ISA=avx2 "$QKV" --version > "$T/capped" || fail "qkv --version under QKV_MAX_ISA=avx2"
grep -qF "bf16 matrix products (--precision/--compute-type bf16): fp32 GEMM on bf16-rounded inputs (" "$T/capped" \
  || { cat "$T/capped"; fail "the capped bf16 path"; }
grep -qF "flash attention under bf16: the fp32 tile kernel with bf16-rounded q, k, v, P and dS (no AVX-512-BF16" "$T/capped" \
  || { cat "$T/capped"; fail "the capped bf16 attention path"; }
# On an AMD CPU with AVX-512-BF16 (vdpbf16ps at full rate) both bf16 paths take the bf16 units
# (unless the environment caps the ISA or picks other kernels).
if grep -q "avx512_bf16" /proc/cpuinfo && grep -q "AuthenticAMD" /proc/cpuinfo &&
   [ -z "${QKV_MAX_ISA:-}${QKV_ATTENTION:-}${QKV_KERNELS:-}" ]; then
  out_has "bf16 matrix products (--precision/--compute-type bf16): oneDNN bf16 matmul (" \
          "flash attention under bf16: the vdpbf16ps (AVX-512-BF16) kernel"
fi

six_pairs > "$T/fra.txt"
small=(--data "$T/fra.txt" --preset demo --max-steps 36 --seed 3 --num-hiddens 32 --num-heads 2 --num-blks 1
       --ffn-num-hiddens 32 --batch-size 8 --no-progress)
run_rc 0 train "${small[@]}" --out "$T/fp32"
run_rc 0 train "${small[@]}" --out "$T/bf16" --precision bf16
err_has "mixed precision: bf16 matrix products, "
python3 - "$T/bf16/config.json" "$T/bf16/model.safetensors" "$T/fp32/metrics.jsonl" "$T/bf16/metrics.jsonl" <<'PY' || fail "bf16 run"
import json, struct, sys
assert json.load(open(sys.argv[1]))["train"]["precision"] == "bf16"
with open(sys.argv[2], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"F32"}, dtypes  # fp32 master weights are what is saved
def losses(path):
    return [r["train_loss"] for r in map(json.loads, open(path)) if r["kind"] == "epoch"]
a, b = losses(sys.argv[3]), losses(sys.argv[4])
assert len(a) == len(b) == 6, (a, b)
# Measured: 2.9554 (fp32) vs 2.9557 (bf16) after 24 steps. bf16 rounds each operand by up to 2^-8
# relative, a loss change of that order; 1% of the loss leaves room for 36 steps of drift but
# not for a broken run. Identical losses (full precision) mean the setting was ignored.
assert a != b, "bf16 gave the fp32 losses exactly: --precision was ignored"
assert all(abs(x - y) <= 0.01 * x for x, y in zip(a, b)), (a, b)
PY
run_rc 2 train "${small[@]}" --out "$T/x" --precision fp16
err_has "--precision"
run_rc 0 train --resume --out "$T/bf16" --max-steps 40 --precision fp32 --no-progress
err_has "warning: --resume: --precision fp32 is ignored; the checkpoint's train.precision bf16"
err_has "mixed precision: bf16 matrix products"

# --compute-type: the same model translated with bf16 products (its greedy output may differ in
# a token or two on a tiny model, so the check is that it runs and says so)
run_rc 0 eval --model "$T/fp32" --compute-type bf16 --no-progress
out_has "bf16 compute" "corpus BLEU-4"
run_rc 0 eval --model "$T/fp32" --no-progress
grep -q "bf16 compute" "$T/out" && fail "fp32 eval says bf16"
run_rc 0 translate --model "$T/fp32" --compute-type bf16 "i lost ." "go ."
[ "$(wc -l < "$T/out")" = 2 ] || fail "translate --compute-type bf16"
run_rc 0 eval --model "$T/fp32" --compute-type int8 --no-progress --json "$T/int8.json"
out_has "int8 compute" "corpus BLEU-4"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["compute_type"] == "int8" and j["sampling"] is False, j' \
  "$T/int8.json" || fail "eval --json lacks the compute type"
run_rc 0 eval --model "$T/fp32" --sampling --seed 1 --no-progress
out_has "sampled decoding"
run_rc 0 translate --model "$T/fp32" --compute-type int8 --beam 2 "i lost ." "go ."
[ "$(wc -l < "$T/out")" = 2 ] || fail "translate --compute-type int8"
# An int8 layer's refusal of a non-finite activation names the model: here every encoder embedding
# is 3e38, finite (the folder loads) but infinite once scaled by sqrt(num_hiddens). The file is
# rewritten without its checksum, which loading then does not ask for.
cp -r "$T/fp32" "$T/huge"
python3 - "$T/huge/model.safetensors" <<'PY' || fail "rewriting the model file"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = bytearray(f.read())
header["__metadata__"].pop("qkv.checksum")
a, b = header["encoder.embedding.weight"]["data_offsets"]
data[a:b] = struct.pack("<f", 3e38) * ((b - a) // 4)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
PY
run_rc 1 translate --model "$T/huge" --compute-type int8 "go ."
err_has "qkv: error: model '$T/huge' (--compute-type int8): linear_int8" "non-finite value"
run_rc 1 eval --model "$T/huge" --compute-type int8 --no-progress
err_has "qkv: error: model '$T/huge' (--compute-type int8): linear_int8" "non-finite value"
run_rc 2 translate --model "$T/fp32" --compute-type fp16 "go ."
err_has "--compute-type"

# bf16 weights: qkv average --dtype bf16 of one folder converts it (BF16 tensors, about half the
# file); translate, eval and info read it (widened exactly); --dtype fp16 is refused.
run_rc 0 average "$T/fp32" --out "$T/w16" --dtype bf16
err_has "(stored as bf16)"
run_rc 0 info --model "$T/w16"
out_has "BF16"
grep -q " F32 " "$T/out" && fail "info lists an F32 tensor in the bf16 folder"
python3 - "$T/fp32/model.safetensors" "$T/w16/model.safetensors" <<'PY' || fail "bf16 model file size"
import os, sys
a, b = (os.path.getsize(p) for p in sys.argv[1:])
assert b < 0.6 * a, (a, b)
PY
run_rc 0 translate --model "$T/w16" --compute-type bf16 "i lost ." "go ."
[ "$(wc -l < "$T/out")" = 2 ] || fail "translate from bf16 weights"
run_rc 0 eval --model "$T/w16" --no-progress
out_has "corpus BLEU-4"
run_rc 2 average "$T/fp32" --out "$T/w8" --dtype fp16
err_has "--dtype"
echo "cli precision: ok"
