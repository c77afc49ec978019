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
err_has "holds a model"
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
run_rc 0 train --model lm --resume --out "$T/lm" --max-steps 82 --data "$T/moved.txt" --lr 0.5 --no-progress
err_has "warning: --resume: --lr 0.5 is ignored; the checkpoint's train.lr 0.01"
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
err_has "--prompt '123 ...' has no letter"
run_rc 0 train "${tiny[@]}" --positions sinusoidal --max-steps 2 --out "$T/lmsin"
run_rc 1 generate --model "$T/lmsin" --prompt "the" --max-new-tokens 5000
err_has "plus --max-new-tokens 5000 is 5003 positions, but this model's sinusoidal positions stop at 4096" "lower --max-new-tokens to 4093"
[ ! -s "$T/out" ] || fail "generate printed text before refusing"

# a diverged run reports its perplexity as a number or inf, never 160 digits
run_rc 0 train --model lm --preset lm-tiny --no-progress --data "$T/text.txt" --lr 10 --max-steps 20 --out "$T/lmdiv"
err_has "validation perplexity inf (exp of the loss overflows: the run diverged)"
echo "cli lm: ok"
