#!/usr/bin/env bash
# CLI end to end on a tiny corpus written here: qkv train (2 steps), translate (arguments and
# stdin), eval, info, heatmap, resume, and the error paths (missing data, damaged model file).
# Usage: test_train_translate.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

# 60 pairs over a handful of words (repeats give the vocabulary min_freq-2 tokens), 1 malformed line.
six_pairs > "$T/fra.txt"
echo "a line without a tab" >> "$T/fra.txt"

small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)

"$QKV" train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/run" "${small[@]}" > "$T/train.out" 2> "$T/train.err" \
  || { cat "$T/train.err"; fail "qkv train"; }
grep -q "1 malformed line" "$T/train.err" || fail "malformed line not reported"
grep -q "trained 2 steps" "$T/train.out" || { cat "$T/train.out"; fail "train summary"; }
for f in model.safetensors checkpoint.safetensors config.json src_vocab.txt tgt_vocab.txt metrics.jsonl loss.png; do
  [ -s "$T/run/$f" ] || fail "missing $f"
done
grep -q '"kind":"epoch"' "$T/run/metrics.jsonl" || fail "no epoch record in metrics.jsonl"

# translate: two sentences as arguments -> two lines; three on stdin -> three lines
n=$("$QKV" translate --model "$T/run" "i lost ." "go ." | wc -l)
[ "$n" = 2 ] || fail "translate args gave $n lines"
n=$(printf 'go .\ni lost .\nwe won .\n' | "$QKV" translate --model "$T/run" --beam 3 | wc -l)
[ "$n" = 3 ] || fail "translate stdin gave $n lines"
"$QKV" translate --model "$T/run" --show-source "he's calm ." | grep -q "^he's calm \. => " || fail "--show-source"

# eval: corpus BLEU line and the book sentences
"$QKV" eval --model "$T/run" --no-progress --json "$T/eval.json" > "$T/eval.out" || fail "qkv eval"
grep -q "corpus BLEU-4" "$T/eval.out" || fail "eval output"
grep -q "i'm home . =>" "$T/eval.out" || fail "eval book sentences"
grep -q '"bleu4"' "$T/eval.json" || fail "eval json"

# eval's outputs are written through what the path names, never renamed over it: a symlink stays a
# link (its file gets the report), a FIFO stays a FIFO (its reader gets the report), a device node
# stays a device (as root, --json /dev/null once made /dev/null a regular file), /dev/stdout goes
# to standard output after the report.
mkdir "$T/real" && ln -s real/eval.json "$T/link.json"
"$QKV" eval --model "$T/run" --no-progress --json "$T/link.json" > /dev/null || fail "eval --json to a symlink"
[ -L "$T/link.json" ] || fail "--json replaced the symlink"
grep -q '"bleu4"' "$T/real/eval.json" || fail "--json did not write the symlink's file"
mkfifo "$T/fifo"
cat "$T/fifo" > "$T/from_fifo" &
"$QKV" eval --model "$T/run" --no-progress --json "$T/fifo" > /dev/null || fail "eval --json to a FIFO"
wait $!
[ -p "$T/fifo" ] || fail "--json replaced the FIFO"
grep -q '"bleu4"' "$T/from_fifo" || fail "the FIFO's reader did not get the report"
if mknod "$T/null" c 1 3 2> /dev/null; then
  "$QKV" eval --model "$T/run" --no-progress --json "$T/null" --hyp-out "$T/null" > /dev/null || fail "eval to a device"
  [ -c "$T/null" ] || fail "--json/--hyp-out replaced the device node"
  [ -z "$(find "$T" -maxdepth 1 -name 'null.tmp.*')" ] || fail "temporary files beside the device node"
fi
"$QKV" eval --model "$T/run" --no-progress --json /dev/stdout > "$T/stdout.txt" || fail "eval --json /dev/stdout"
grep -q "corpus BLEU-4" "$T/stdout.txt" && grep -q '"bleu4"' "$T/stdout.txt" || fail "--json /dev/stdout"
[ "$(tail -c 2 "$T/stdout.txt" | head -c 1)" = "}" ] || fail "the JSON is not after the report on stdout"
# both outputs to standard output (a file here): appended one after the other, not "the same file"
"$QKV" eval --model "$T/run" --no-progress --hyp-out /dev/stdout --json /dev/stdout > "$T/both.txt" \
  || fail "eval --hyp-out /dev/stdout --json /dev/stdout"
grep -q '"bleu4"' "$T/both.txt" && grep -q "corpus BLEU-4" "$T/both.txt" || fail "--hyp-out and --json to stdout"

"$QKV" info "$T/run" > "$T/info.out" || fail "qkv info"  # captured: grep -q in a pipe would SIGPIPE it
grep -q "decoder.dense.weight" "$T/info.out" || fail "qkv info output"
"$QKV" heatmap --model "$T/run" "i'm home ." --out "$T/att" > /dev/null || fail "qkv heatmap"
for f in att-encoder.png att-decoder-self.png att-cross.png; do [ -s "$T/$f" ] || fail "missing $f"; done

# resume: one more step continues at step 3
"$QKV" train --resume --out "$T/run" --data "$T/fra.txt" --max-steps 3 --no-progress > "$T/resume.out" 2> "$T/resume.err" \
  || { cat "$T/resume.err"; fail "resume"; }
grep -q "resuming from" "$T/resume.err" || fail "resume message"
grep -q "trained 3 steps" "$T/resume.out" || { cat "$T/resume.out"; fail "resume step count"; }

# errors: missing data names the download address (exit 1); damaged model file is reported
set +e
"$QKV" train --data "$T/nothing.zip" --out "$T/run2" > /dev/null 2> "$T/err1"; rc=$?
set -e
[ "$rc" = 1 ] || fail "missing data exit code $rc"
grep -q "d2l-data.s3-accelerate.amazonaws.com" "$T/err1" || { cat "$T/err1"; fail "no download address"; }
head -c 1000 "$T/run/model.safetensors" > "$T/short" && mv "$T/short" "$T/run/model.safetensors"
set +e
"$QKV" translate --model "$T/run" "go ." > /dev/null 2> "$T/err2"; rc=$?
set -e
[ "$rc" = 1 ] || fail "damaged model exit code $rc"
grep -q "truncated" "$T/err2" || { cat "$T/err2"; fail "damaged model message"; }
echo "cli train/translate/eval/info/heatmap/resume: ok"
