#!/usr/bin/env bash
# qkv train --model lm and qkv generate on a small text written here: perplexity reported, the
# folder's files, --resume, greedy and seeded sampling (reproducible, seeds differ), streaming
# output, and the usage errors.
# Usage: test_lm.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

for i in $(seq 1 150); do echo "The Time Traveller (for so it will be convenient to speak of him) was expounding."; done > "$T/text.txt"
tiny=(--model lm --preset lm-tiny --data "$T/text.txt" --no-progress --lr 0.01)

run_rc 0 train "${tiny[@]}" --max-steps 60 --out "$T/lm"
out_has "sample (greedy): the time traveller"
err_has "validation perplexity"
grep -qE "^data: $T/text.txt: [0-9]+ characters after D2L's preprocessing, vocabulary [0-9]+" "$T/err" \
  || { cat "$T/err"; fail "data line"; }
ppl=$(grep -oE "validation perplexity [0-9.]+" "$T/err" | awk '{ print $3 }')
awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 25) }' || fail "perplexity $ppl not in (1, 25) (uniform: the vocabulary size)"
for f in config.json vocab.txt model.safetensors checkpoint.safetensors metrics.jsonl; do
  [ -f "$T/lm/$f" ] || fail "missing $f"
done
grep -q '"model_kind": "lm"' "$T/lm/config.json" || fail "config.json model_kind"

# resume continues to a larger --max-steps
run_rc 0 train --model lm --resume --out "$T/lm" --max-steps 80 --no-progress
grep -q "resuming from" "$T/err" || { cat "$T/err"; fail "resume"; }
out_has "trained 80 steps"

# generation: greedy is deterministic, sampling reproducible with a seed
run_rc 0 generate --model "$T/lm" --prompt "The Time" --max-new-tokens 30
cp "$T/out" "$T/g1"
run_rc 0 generate --model "$T/lm" --prompt "The Time" --max-new-tokens 30
cmp -s "$T/out" "$T/g1" || fail "greedy generation differs between runs"
[ "$(head -c 8 "$T/g1")" = "the time" ] || fail "the prompt (preprocessed) starts the output"
[ "$(tr -d '\n' < "$T/g1" | wc -c)" = 38 ] || { cat "$T/g1"; fail "8 prompt + 30 new characters"; }
run_rc 0 generate --model "$T/lm" --prompt "the" --temperature 1 --seed 5 --max-new-tokens 40
cp "$T/out" "$T/s5"
run_rc 0 generate --model "$T/lm" --prompt "the" --temperature 1 --seed 5 --max-new-tokens 40
cmp -s "$T/out" "$T/s5" || fail "seeded sampling is not reproducible"
run_rc 0 generate --model "$T/lm" --prompt "the" --temperature 1 --seed 6 --max-new-tokens 40
cmp -s "$T/out" "$T/s5" && fail "seeds 5 and 6 gave the same 40 characters"
# vocab.txt with two lines swapped loads, but would map ids to other characters: the model records
# its vocabulary, so generate refuses, naming the file
cp -r "$T/lm" "$T/lm_swap"
sed -i '6{h;d};7G' "$T/lm_swap/vocab.txt"
run_rc 1 generate --model "$T/lm_swap" --prompt "the" --max-new-tokens 5
err_has "qkv: error: $T/lm_swap/vocab.txt is not the vocabulary $T/lm_swap/model.safetensors was trained with"
rm -r "$T/lm_swap"
run_rc 0 generate --model "$T/lm" --prompt "the" --max-new-tokens 20 --no-cache
cp "$T/out" "$T/nc"
run_rc 0 generate --model "$T/lm" --prompt "the" --max-new-tokens 20
cmp -s "$T/out" "$T/nc" || fail "the KV cache changed the greedy text"

# qkv info reads an LM folder; the translation commands refuse it naming what it is
run_rc 0 info "$T/lm" --no-params
out_has "language model folder $T/lm" '"model_kind": "lm"' "check: the folder loads"
run_rc 1 translate --model "$T/lm" "the time"
err_has "'$T/lm' holds a language model (qkv train --model lm): qkv generate reads it"
run_rc 1 eval --model "$T/lm"
err_has "holds a language model"

# errors
run_rc 2 generate --model "$T/lm" --max-new-tokens 5
err_has "--prompt is required"
run_rc 1 generate --model "$T/none" --prompt "the"
err_has "model folder '$T/none' does not exist"
run_rc 1 generate --model "$T/lm" --prompt "quiz"
err_has "the prompt holds characters the model never saw: 'qz'"
run_rc 2 generate --model "$T/lm" --prompt "the" --top-k 3
err_has "apply to sampling"
run_rc 2 train "${tiny[@]}" --out "$T/lm2" --subword bpe
err_has "--subword does not apply to --model lm"
run_rc 2 train "${tiny[@]}" --out "$T/lm"
err_has "qkv: error: --out '$T/lm' already holds a qkv model (model.safetensors, checkpoint.safetensors, config.json)"
run_rc 2 train --preset lm-tiny --out "$T/lm3"
err_has "--preset lm-tiny needs --model lm"
run_rc 2 train "${tiny[@]}" --out "$T/lm3" --num-kv-heads 3
err_has "--num-kv-heads 3 must divide --num-heads 2"
run_rc 1 train --model lm --preset lm-tiny --data "$T/none.txt" --out "$T/lm4"
err_has "language-model text '$T/none.txt' not found"

# resume: a finished run has nothing to do and leaves the folder as it is
cp "$T/lm/metrics.jsonl" "$T/metrics.before"
run_rc 0 train --model lm --resume --out "$T/lm" --max-steps 80 --no-progress
out_has "nothing to do: the checkpoint has already trained 80 steps (--max-steps 80)"
cmp -s "$T/lm/metrics.jsonl" "$T/metrics.before" || fail "nothing to do rewrote metrics.jsonl"
# ... model-changing flags are refused, others warned about
run_rc 2 train --model lm --resume --out "$T/lm" --max-steps 90 --num-hiddens 64 --positions sinusoidal
err_has "these flags would change it: --num-hiddens 64 (the checkpoint's model.num_hiddens is 32); --positions sinusoidal (the checkpoint's model.positions is rope)"
run_rc 2 train --model lm --resume --overwrite --out "$T/lm"
err_has "give one of them"
# ... on another text is refused (the fingerprint of the preprocessed text)
sed 's/expounding/explaining/' "$T/text.txt" > "$T/other.txt"
run_rc 1 train --model lm --resume --out "$T/lm" --max-steps 90 --data "$T/other.txt" --no-progress
err_has "'$T/other.txt' is not the text this model was trained on" "(data.fingerprint)"
grep -q '"fnv1a64"' "$T/lm/config.json" || fail "config.json records no data fingerprint"
cp "$T/text.txt" "$T/moved.txt"
run_rc 0 train --model lm --resume --out "$T/lm" --max-steps 82 --data "$T/moved.txt" --lr 0.5 --preset lm --no-progress
err_has "warning: --resume: --lr 0.5 is ignored; the checkpoint's train.lr 0.01" \
  "warning: --resume: --preset lm is ignored; the checkpoint's configuration ($T/lm/config.json) is used"
out_has "trained 82 steps"
# ... the global flags apply after the subcommand too; a translation resume names --model lm
run_rc 0 train --model lm --resume --out "$T/lm" --max-steps 84 --threads 1 --kernels fast --no-progress
out_has "trained 84 steps"
run_rc 2 train --resume --out "$T/lm"
err_has "holds a language model (qkv train --model lm); resume it with: qkv train --model lm --resume --out"

# --data: gzip is read, zip/binary/non-UTF-8 are refused naming the file and line
nodata=(--model lm --preset lm-tiny --no-progress --lr 0.01)
gzip -c "$T/text.txt" > "$T/text.txt.gz"
run_rc 0 train "${nodata[@]}" --data "$T/text.txt.gz" --max-steps 2 --out "$T/lmgz"
grep -qE "^data: $T/text.txt.gz: 11[0-9]{3} characters" "$T/err" || { cat "$T/err"; fail "gzip text not decompressed"; }
printf 'PK\003\004binary zip bytes' > "$T/t.zip"
run_rc 1 train "${nodata[@]}" --data "$T/t.zip" --out "$T/lmz"
err_has "'$T/t.zip' is a zip archive"
{ head -3 "$T/text.txt"; printf 'caf\351 latin-1\n'; } > "$T/latin1.txt"
run_rc 1 train "${nodata[@]}" --data "$T/latin1.txt" --out "$T/lmz"
err_has "'$T/latin1.txt' is not UTF-8: an ill-formed byte sequence on line 4"
{ head -2 "$T/text.txt"; printf 'a\000b\n'; } > "$T/nul.txt"
run_rc 1 train "${nodata[@]}" --data "$T/nul.txt" --out "$T/lmz"
err_has "'$T/nul.txt' is not text: a NUL byte on line 3"
[ ! -e "$T/lmz/config.json" ] || fail "a refused text left a config.json"

# generate: an all-punctuation prompt and a sinusoidal model's position limit, up front
run_rc 1 generate --model "$T/lm" --prompt "123 ..."
err_has "--prompt '123 ...' has no ASCII letter: D2L's preprocessing keeps only a-z and spaces"
run_rc 0 train "${tiny[@]}" --positions sinusoidal --max-steps 2 --out "$T/lmsin"
run_rc 1 generate --model "$T/lmsin" --prompt "the" --max-new-tokens 5000
err_has "plus --max-new-tokens 5000 is 5003 positions, but this model's sinusoidal positions stop at 4096" "lower --max-new-tokens to 4093"
[ ! -s "$T/out" ] || fail "generate printed text before refusing"
long=$(printf 'a%.0s' $(seq 1 4100))
run_rc 1 generate --model "$T/lmsin" --prompt "$long" --max-new-tokens 0
err_has "the prompt is 4100 characters after preprocessing, but this model's sinusoidal positions stop at 4096" \
  "shorten --prompt to at most 4096 characters"

# a diverged run reports its perplexity as a number or inf, never 160 digits
run_rc 0 train --model lm --preset lm-tiny --no-progress --data "$T/text.txt" --lr 10 --max-steps 20 --out "$T/lmdiv"
err_has "validation perplexity inf (exp of the loss overflows: the run diverged)"

# SIGTERM during training: the step finishes, a checkpoint is saved, the resume command is named
steps_logged() { local n; n=$(grep -c '"kind":"step"' "$1/metrics.jsonl" 2> /dev/null) || true; echo "${n:-0}"; }
"$QKV" train "${tiny[@]}" --time-budget none --epochs 100000 --log-every 1 --out "$T/sig" > "$T/sig.out" 2> "$T/sig.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ "$(steps_logged "$T/sig")" -gt 10 ] && break
  kill -0 "$pid" 2> /dev/null || { cat "$T/sig.err"; fail "LM training ended before it was signalled"; }
  sleep 0.1
done
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" = 143 ] || { cat "$T/sig.err"; fail "SIGTERM: exit $rc, want 143"; }
grep -q "qkv train: interrupted (SIGTERM) at step [0-9]*; checkpoint saved in $T/sig/checkpoint.safetensors; continue with: qkv train --model lm --resume --out" "$T/sig.err" \
  || { cat "$T/sig.err"; fail "no interrupted line"; }
[ -f "$T/sig/checkpoint.safetensors" ] || fail "SIGTERM left no checkpoint"
run_rc 0 train --model lm --resume --out "$T/sig" --max-steps 2 --no-progress
out_has "nothing to do"

# --overwrite keeps the earlier model aside until the new run's first checkpoint: a run stopped
# before it gives the old folder back; a finished one removes every old file (a translation
# folder's vocabularies too)
mkdir -p "$T/ov" && cp "$T/lm/"* "$T/ov/"
touch "$T/ov/src_vocab.txt" "$T/ov/loss.png"
cp "$T/ov/model.safetensors" "$T/old.model"
"$QKV" train "${tiny[@]}" --overwrite --time-budget none --epochs 100000 --out "$T/ov" > "$T/ov.out" 2> "$T/ov.err" &
pid=$!
sleep 0.05
kill -TERM "$pid"  # early: during the data read, before the first checkpoint, or just after it
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" = 143 ] || fail "SIGTERM: exit $rc, want 143"
# Whenever the signal came, the folder holds a whole model: the earlier one (never moved, or
# restored) or the new run's checkpointed one; never neither.
[ ! -e "$T/ov/.qkv-replaced" ] || fail ".qkv-replaced left behind"
if ! cmp -s "$T/ov/model.safetensors" "$T/old.model"; then
  grep -q "interrupted (SIGTERM) at step" "$T/ov.err" || { cat "$T/ov.err"; fail "a new model without a checkpoint message"; }
  run_rc 0 info "$T/ov" --no-params
fi
run_rc 0 train "${tiny[@]}" --overwrite --max-steps 3 --out "$T/ov"
[ ! -e "$T/ov/src_vocab.txt" ] && [ ! -e "$T/ov/loss.png" ] || fail "--overwrite left the earlier run's files"
[ ! -e "$T/ov/.qkv-replaced" ] || fail ".qkv-replaced left after a finished run"

# a text without the letters of D2L's prompt: the closing sample starts from its own letter
printf 'abab cdcd %.0s' $(seq 1 300) > "$T/abc.txt"
run_rc 0 train "${nodata[@]}" --data "$T/abc.txt" --max-steps 5 --out "$T/abc"
out_has "sample (greedy): a"

# --resume --data records the new path; a missing recorded path names config.json
cp "$T/text.txt" "$T/copy1.txt"
run_rc 0 train "${nodata[@]}" --data "$T/copy1.txt" --max-steps 4 --out "$T/dp"
cp "$T/text.txt" "$T/copy2.txt"
run_rc 0 train --model lm --resume --out "$T/dp" --max-steps 6 --data "$T/copy2.txt" --no-progress
grep -q "\"path\": \"$T/copy2.txt\"" "$T/dp/config.json" || { cat "$T/dp/config.json"; fail "data.path not updated"; }
rm "$T/copy2.txt"
run_rc 1 train --model lm --resume --out "$T/dp" --max-steps 8 --no-progress
err_has "the text '$T/copy2.txt' recorded in $T/dp/config.json (data.path) does not exist; pass it with --data PATH"

# --out a file, a folder as --data, the too-short threshold, bad config.json values name the key
touch "$T/afile"
run_rc 2 train "${tiny[@]}" --out "$T/afile"
err_has "--out '$T/afile' is an existing file, not a folder"
run_rc 1 train "${nodata[@]}" --data "$T" --out "$T/lmf"
err_has "is a folder; pass a text file"
printf 'the time machine %.0s' $(seq 1 8) > "$T/short.txt"
run_rc 1 train "${nodata[@]}" --data "$T/short.txt" --out "$T/lmf"
err_has "too short; the held-out last 10 % and the rest must each hold one sequence of 17 characters (num_steps + 1), which takes at least 161 characters"
for kv in 'model.window 0' 'model.num_kv_heads 3' 'model.max_len 0'; do
  set -- $kv
  cp -r "$T/lm" "$T/bad"
  python3 - "$T/bad/config.json" "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); a, b = sys.argv[2].split(".")
j[a][b] = int(sys.argv[3]); json.dump(j, open(sys.argv[1], "w"))
PY
  run_rc 1 generate --model "$T/bad" --prompt "the"
  err_has "'$T/bad/config.json': key '$1' is $2"
  rm -r "$T/bad"
done
run_rc 1 generate --model "$T/lm/config.json" --prompt "the"
err_has "is a file; --model takes the model folder ('$T/lm'?)"
run_rc 2 generate --model "$T/lm" --prompt "the" --temperature 1 --seed -5
echo "cli lm: ok"
