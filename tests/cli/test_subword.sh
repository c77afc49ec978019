#!/usr/bin/env bash
# CLI with subword vocabularies: qkv train --subword bpe --shared-vocab --tie-weights (2 steps)
# writes spm.model and records it in config.json; translate/eval/heatmap/resume read it; the bad
# flag combinations fail with messages that name the flag; folders whose files disagree with
# config.json (spm.model missing, left over, truncated; other weights) are refused naming the file;
# a 210,000-word line is translated from its first words (with a lower bound in the warning);
# a word run into a subword run's folder removes spm.model.
# Usage: test_subword.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"

small=(--data "$T/fra.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16
       --batch-size 8 --no-progress)

"$QKV" train --preset demo "${small[@]}" --max-steps 2 --out "$T/run" --subword bpe --vocab-size 40 --shared-vocab --tie-weights --num-steps 13 \
  > "$T/train.out" 2> "$T/train.err" || { cat "$T/train.err"; fail "qkv train --subword bpe"; }
grep -q "shared bpe vocabulary of 40 pieces" "$T/train.err" || { cat "$T/train.err"; fail "subword summary"; }
grep -q "vocabularies: source 40, target 40 tokens" "$T/train.err" || fail "vocabulary sizes"
[ -s "$T/run/spm.model" ] || fail "missing spm.model"
grep -q '"subword": "bpe"' "$T/run/config.json" || fail "config.json subword"
grep -q '"tie_weights": true' "$T/run/config.json" || fail "config.json tie_weights"
grep -q '"num_steps": 13' "$T/run/config.json" || fail "--num-steps 13 not recorded (without it: tests/cli/test_corpus_defaults.sh)"
# the translations printed by train are words (no piece marker U+2581)
grep -q "=> " "$T/train.out" || fail "no translations"
if grep -q $'\xe2\x96\x81' "$T/train.out"; then fail "pieces in the printed translations"; fi

n=$("$QKV" translate --model "$T/run" "i lost ." "go ." | wc -l)
[ "$n" = 2 ] || fail "translate gave $n lines"
if "$QKV" translate --model "$T/run" "i lost ." | grep -q $'\xe2\x96\x81'; then fail "pieces in translate output"; fi
"$QKV" eval --model "$T/run" --no-progress > "$T/eval.out" || fail "qkv eval"
grep -q "corpus BLEU-4" "$T/eval.out" || fail "eval output"
"$QKV" info "$T/run" > "$T/info.out" || fail "qkv info"  # captured: grep -q in a pipe would SIGPIPE it
grep -q "decoder.dense.weight" "$T/info.out" || fail "qkv info output"
"$QKV" heatmap --model "$T/run" "i'm home ." --out "$T/att" > /dev/null || fail "qkv heatmap"
[ -s "$T/att-cross.png" ] || fail "missing heatmap"
# an over-long sentence is counted in pieces (num_steps 13: 12 pieces + <eos> fit)
long="i lost . he's calm . i'm home . we won . thank you . go . i lost ."
"$QKV" translate --model "$T/run" "$long" > /dev/null 2> "$T/err" || { cat "$T/err"; fail "translate a long sentence"; }
re='^qkv translate: warning: sentence 1 has ([0-9]+) source pieces \(20 words\) but the model reads 13 positions \(12 pieces \+ <eos>\): pieces 14-([0-9]+) are not read, nor is <eos>$'
line=$(grep "warning:.* source pieces" "$T/err") || { cat "$T/err"; fail "no truncation warning"; }
[[ "$line" =~ $re ]] || fail "truncation warning: $line"
[ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || fail "the last piece not read is not the last piece: $line"
[ "${BASH_REMATCH[1]}" -ge 20 ] || fail "fewer pieces than words: $line"
# a line of 210,000 words: only a prefix of words is encoded (whole: 0.6 s here), the warning
# gives a lower bound, and the translation is that of the first 13 words (>= 13 pieces: all it reads)
awk 'BEGIN { for (i = 0; i < 70000; i++) printf "i lost . "; print "" }' > "$T/long.txt"
"$QKV" translate --model "$T/run" -f "$T/long.txt" > "$T/long.out" 2> "$T/err" || { cat "$T/err"; fail "translate a huge line"; }
re='^qkv translate: warning: line 1 has at least ([0-9]+) source pieces \(210000 words\) but the model reads 13 positions \(12 pieces \+ <eos>\): pieces 14 and later are not read, nor is <eos>$'
line=$(grep "warning:.* source pieces" "$T/err") || { cat "$T/err"; fail "no truncation warning for the huge line"; }
[[ "$line" =~ $re ]] || fail "huge line warning: $line"
[ "${BASH_REMATCH[1]}" -ge 210000 ] || fail "huge line counts: $line"
"$QKV" translate --model "$T/run" "i lost . i lost . i lost . i lost . i" > "$T/prefix.out" 2> /dev/null
[ "$(wc -l < "$T/long.out")" = 1 ] && cmp -s "$T/long.out" "$T/prefix.out" ||
  fail "huge line: '$(head -c 200 "$T/long.out")', its first 13 words: '$(cat "$T/prefix.out")'"

# model folders whose files disagree with config.json are refused, naming the file (no garbage)
mixed() { rm -rf "$T/$1" && cp -r "$T/run" "$T/$1"; }
expect_load_error() {  # expect_load_error DIR TEXT...
  local d="$1"; shift
  set +e
  "$QKV" translate --model "$T/$d" "go ." > "$T/out" 2> "$T/err"; local rc=$?
  set -e
  [ "$rc" = 1 ] || { cat "$T/err"; fail "$d: exit $rc, want 1"; }
  [ ! -s "$T/out" ] || fail "$d: translated anyway: $(cat "$T/out")"
  for s in "qkv: error: " "$@"; do grep -qF -- "$s" "$T/err" || { cat "$T/err"; fail "$d: stderr lacks '$s'"; }; done
}
mixed none && sed -i 's|"subword": "bpe"|"subword": "none"|' "$T/none/config.json"
expect_load_error none "$T/none/config.json says data.subword \"none\"" "$T/none/spm.model"
rm "$T/none/spm.model"
expect_load_error none "$T/none/src_vocab.txt lists SentencePiece pieces"
mixed nospm && rm "$T/nospm/spm.model"
expect_load_error nospm "data.subword \"bpe\"" "$T/nospm/spm.model is missing"
# a truncated spm.model: "corrupt or truncated", never blamed on the vocabularies
size=$(stat -c %s "$T/run/spm.model")
for n in 0 10 $((size / 2)) $((size - 1)); do
  mixed cut && head -c "$n" "$T/run/spm.model" > "$T/cut/spm.model"
  expect_load_error cut "$T/cut/spm.model is corrupt or truncated ("
  if grep -q "vocab" "$T/err"; then cat "$T/err"; fail "a $n-byte spm.model blamed on the vocabularies"; fi
done

"$QKV" train --resume --out "$T/run" --data "$T/fra.txt" --max-steps 3 --no-progress > "$T/resume.out" 2> "$T/resume.err" \
  || { cat "$T/resume.err"; fail "resume"; }
grep -q "trained 3 steps" "$T/resume.out" || fail "resume step count"

# errors name the flag: flag combinations are usage errors (exit 2, before the data is read), a
# vocabulary size the data cannot fill is found by SentencePiece (exit 1)
expect_error() {  # expect_error RC PATTERN ARGS...
  local want="$1" pat="$2"; shift 2
  local preset=(--preset demo)
  [[ " $* " == *" --preset "* ]] && preset=()
  set +e
  "$QKV" train "${preset[@]}" "${small[@]}" --max-steps 1 --out "$T/bad" "$@" > /dev/null 2> "$T/err"; local rc=$?
  set -e
  [ "$rc" = "$want" ] || { cat "$T/err"; fail "exit code $rc (want $want) for: $*"; }
  grep -q -- "$pat" "$T/err" || { cat "$T/err"; fail "message for: $*"; }
}
expect_error 2 "--tie-weights needs" --subword bpe --vocab-size 40 --tie-weights
expect_error 1 "--vocab-size) 100000 does not fit the shared (en + fr) vocabulary" --subword bpe --vocab-size 100000 --shared-vocab
expect_error 1 "--vocab-size) 100000 does not fit the source (en) vocabulary" --subword bpe --vocab-size 100000
expect_error 1 "--vocab-size" --subword unigram --vocab-size 10
expect_error 2 "--vocab-size applies" --vocab-size 40
expect_error 2 "anchor pipeline" --preset d2l --subword bpe
expect_error 2 "Transformer only" --model bahdanau --subword bpe --vocab-size 40 --shared-vocab --tie-weights
# --preset full is the shared-BPE + tied recipe (num_steps 20 pieces); --subword none gives its
# words variant (untied, separate vocabularies, num_steps 12). Checked on config.json of 1 step.
"$QKV" train --preset full "${small[@]}" --max-steps 1 --vocab-size 40 --out "$T/fullb" \
  > /dev/null 2> "$T/fullb.err" || { cat "$T/fullb.err"; fail "--preset full"; }
for kv in '"subword": "bpe"' '"shared_vocab": true' '"tie_weights": true' '"num_steps": 20'; do
  grep -q "$kv" "$T/fullb/config.json" || fail "--preset full: config.json lacks $kv"
done
"$QKV" train --preset full "${small[@]}" --max-steps 1 --subword none --out "$T/fullw" \
  > /dev/null 2> "$T/fullw.err" || { cat "$T/fullw.err"; fail "--preset full --subword none"; }
for kv in '"subword": "none"' '"shared_vocab": false' '"tie_weights": false' '"num_steps": 12'; do
  grep -q "$kv" "$T/fullw/config.json" || fail "--preset full --subword none: config.json lacks $kv"
done
# a word run into the subword run's folder (--overwrite): spm.model goes, the folder loads as words
"$QKV" train --preset demo "${small[@]}" --max-steps 1 --out "$T/run" --overwrite > /dev/null 2> "$T/rew.err" \
  || { cat "$T/rew.err"; fail "words run into a subword folder"; }
[ ! -e "$T/run/spm.model" ] || fail "a stale spm.model left in a word model's folder"
grep -q '"subword": "none"' "$T/run/config.json" || fail "config.json subword none"
! grep -q "subword_vocab_size" "$T/run/config.json" || fail "a word model's config.json records subword_vocab_size"
"$QKV" translate --model "$T/run" "go ." > /dev/null 2> "$T/err" || { cat "$T/err"; fail "translate after the words rerun"; }
# model.safetensors from another run (another vocabulary) is named with both shapes
rm -rf "$T/swap" && cp -r "$T/fullw" "$T/swap" && cp "$T/fullb/model.safetensors" "$T/swap/"
expect_load_error swap "$T/swap/model.safetensors does not fit" "in the file, but"
echo "cli subword train/translate/eval/heatmap/resume/errors: ok"
