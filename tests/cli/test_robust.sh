#!/usr/bin/env bash
# What a fresh user runs into: numeric options with readable bounds, durations that name their
# flag ('none'/'off' for no limit, 0 refused), the global options before and after the
# subcommand, eval from another folder (config.json records the absolute data path; an old
# relative one is named in the error with --data), translate line by line (invalid UTF-8, empty
# lines, over-long sentences), --file with sentences, heatmap --out folders, config.json type and
# range errors and a missing model.safetensors; every error starts with "qkv: error:".
# Usage: test_robust.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
no_long_numbers() { ! grep -Eq '[0-9]{16}' "$1" || { grep -E '[0-9]{16}' "$1" | head -3; fail "$1: a 16+ digit number"; }; }

# ---- numeric options: the flag and the allowed range in readable numbers (usage errors, exit 2)
run_rc 0 train --help
no_long_numbers "$T/out"
grep -qF -- "--num-steps INT:[2, 1000]" "$T/out" || fail "train --help: no range for --num-steps"
grep -qF -- "--threads" "$T/out" || fail "train --help does not list --threads"
for sub in eval translate heatmap nw; do run_rc 0 "$sub" --help; no_long_numbers "$T/out"; done
run_rc 2 train --lr -1;                err_has "qkv: error: --lr: -1 is out of range: expected a number > 0 and <= 10"
run_rc 2 train --batch-size 0;         err_has "--batch-size: 0 is out of range: expected an integer from 1 to 100000"
run_rc 2 train --num-steps 100000000000; err_has "--num-steps: 100000000000 is out of range: expected an integer from 2 to 1000"
run_rc 2 train --dropout 1.5;          err_has "--dropout: 1.5 is out of range: expected a number from 0 to 0.99"
run_rc 2 train --epochs abc;           err_has "--epochs: 'abc' is not an integer from 1 to 1000000"
run_rc 2 translate --beam 0 "go .";    err_has "qkv: error: --beam: 0 is out of range: expected an integer from 1 to 100"
run_rc 2 eval --length-penalty -0.5;   err_has "--length-penalty: -0.5 is out of range"
run_rc 2 nw --lr 0;                    err_has "--lr: 0 is out of range: expected a number > 0"
for f in "$T/err"; do no_long_numbers "$f"; done
# every usage error has the CLI's "qkv: error:" prefix (range checks, unknown flags, a missing argument)
run_rc 2 --threads 2000 info "$T";     err_has "qkv: error: --threads: 2000 is out of range"
run_rc 2 train --bogus-flag;           err_has "qkv: error: " "--bogus-flag"
run_rc 2 heatmap;                      err_has "qkv: error: " "sentence"
run_rc 2 train --epochs abc;           [ "$(head -c 12 "$T/err")" = "qkv: error: " ] || { cat "$T/err"; fail "no prefix"; }

# ---- durations: errors name the flag; 0 is refused, 'none'/'off' spell "no limit"
run_rc 2 train --val-every 5x;    err_has "--val-every" "'5x'"
run_rc 2 train --time-budget abc; err_has "--time-budget" "'abc'"
run_rc 2 train --time-budget 0;   err_has "--time-budget" "none"
# strtod alone read "0x10" as 16 s and " 5" as 5 s; a duration is decimal (1e2s is 100 s)
for v in 0x10 " 5" inf nan 1e999 "5 m"; do
  run_rc 2 train --time-budget "$v"; err_has "--time-budget" "cannot read duration '$v'"
done
run_rc 2 train --time-budget 1e20; err_has "--time-budget: a duration over 1e+08 s (3 years) is not allowed"
run_rc 2 train --val-every 0s;    err_has "--val-every" "off"
run_rc 0 train --help
grep -qF "'none' (or 'off'): no time" "$T/out" || fail "--help does not document --time-budget none"

# ---- --threads: the same values before and after the subcommand
run_rc 2 --threads 2000 info "$T";        err_has "--threads: 2000 is out of range: expected an integer from 0 to 1024"
run_rc 2 info "$T" --threads 2000;        err_has "--threads: 2000 is out of range"
run_rc 2 translate --threads -1 "go .";   err_has "--threads: -1 is out of range"
# not a decimal integer: a usage error naming the flag and the value (CLI11 alone took 0x10 as 16
# and " 4" as 4)
for v in abc 2x 1.5 0x10 " 4" "4 " 1e1 true +-4 ""; do
  [ -z "$v" ] && want="--threads: empty value" || want="--threads: '$v' is not an integer from 0 to 1024"
  run_rc 2 "--threads=$v" info "$T";  err_has "qkv: error: $want"
  run_rc 2 info "$T" "--threads=$v";  err_has "qkv: error: $want"
done
run_rc 2 train --batch-size 0x10;         err_has "qkv: error: --batch-size: '0x10' is not an integer from 1 to 100000"
run_rc 2 train --max-steps 99999999999999999999; err_has "--max-steps: 99999999999999999999 is out of range"

# ---- a tiny model, trained with a relative data path ('none': no time budget; --threads on both
# sides of the command is refused: cli.test_hostile_input)
six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
cd "$T"
run_rc 0 train --data fra.txt --preset demo --max-steps 2 --out run --time-budget none "${small[@]}" --threads 1
grep -qx "qkv train: preset demo, 1 thread" "$T/err" || { cat "$T/err"; fail "want the line 'qkv train: preset demo, 1 thread'"; }
grep -q "^training: .*epochs, max 2 steps, loss" "$T/err" || { cat "$T/err"; fail "a time budget is left with --time-budget none"; }
grep -qF "\"time_budget_s\": 0.0" run/config.json || fail "config.json time_budget_s is not 0"
! grep -q "subword_vocab_size" run/config.json || fail "a word model's config.json records subword_vocab_size"
want=$(realpath "$T/fra.txt")
grep -qF "\"path\": \"$want\"" run/config.json || { grep path run/config.json; fail "config.json does not record $want"; }
# a leading zero is still decimal (CLI11 alone read 010 as octal 8 and refused 08)
run_rc 0 train --data fra.txt --preset demo --max-steps 08 --out run010 --time-budget none "${small[@]}" --threads 010 \
  --seed 010
grep -qx "qkv train: preset demo, 10 threads" "$T/err" || { cat "$T/err"; fail "--threads 010: want 10 threads"; }
out_has "trained 8 steps"
grep -q '"seed": 10,' run010/config.json || { grep seed run010/config.json; fail "--seed 010: want seed 10"; }
# translate/eval's sampling --seed reads the same way (it took 0x10 as 16, 010 as 8, and -1)
for v in 0x10 " 4" -1; do
  run_rc 2 translate --model run --sampling --seed "$v" "go ."; err_has "qkv: error: --seed: '$v' is not an integer from 0 to"
done
run_rc 0 translate --model run --sampling --temperature 5 --seed 010 "go ." "i lost ." "he's calm ." && cp "$T/out" "$T/s010"
run_rc 0 translate --model run --sampling --temperature 5 --seed 10 "go ." "i lost ." "he's calm ."
cmp -s "$T/out" "$T/s010" || fail "translate --seed 010 and --seed 10 differ"
# info: the checkpoint's step and training time in one decimal (it printed 'epoch 0' against
# train's 'epoch 1' and a 17-digit float)
run_rc 0 info run
grep -Eq '^checkpoint: step 2, [0-9]+\.[0-9] s of training \(epoch index 0 from 0, batch 2 within it\)$' "$T/out" ||
    { grep checkpoint "$T/out"; fail "info's checkpoint line"; }

# ---- eval from another folder: the absolute path works; an old relative one is named, --data overrides
mkdir "$T/elsewhere" && cd "$T/elsewhere"
run_rc 0 eval --model ../run --no-progress --threads 0
grep -q "corpus BLEU-4" "$T/out" || fail "eval output"
sed -i "s|\"path\": \"$want\"|\"path\": \"fra.txt\"|" ../run/config.json
run_rc 1 eval --model ../run --no-progress
err_has "'fra.txt'" "$T/elsewhere/fra.txt" "--data"
run_rc 0 eval --model ../run --no-progress --data ../fra.txt
(cd "$T" && "$QKV" eval --model run --no-progress > /dev/null 2>&1) || fail "eval from the training folder with a relative path"
cd "$T"

# ---- translate line by line: invalid UTF-8 and empty lines give empty output lines, errors counted
printf 'go .\n\xc3\x28 bad\n\n   \ni lost .\n' > in.txt
set +e
"$QKV" --threads 0 translate --model run --show-source -f in.txt > "$T/out" 2> "$T/err"; rc=$?
set -e
[ "$rc" = 1 ] || { cat "$T/err"; fail "translate with a bad line: exit $rc, want 1"; }
[ "$(wc -l < "$T/out")" = 5 ] || { cat "$T/out"; fail "translate: $(wc -l < "$T/out") output lines for 5 input lines"; }
sed -n 1p "$T/out" | grep -q "^go \. => " || fail "line 1 not translated"
sed -n 5p "$T/out" | grep -q "^i lost \. => " || fail "line 5 not translated"
[ -z "$(sed -n 2,4p "$T/out" | tr -d '\n')" ] || fail "lines 2-4 should be empty"
err_has "line 2: invalid UTF-8 (byte offset 0)" "line 3: empty" "line 4: empty" "1 of 5 lines not translated"
! grep -q "preprocess_nmt" "$T/err" || fail "an internal function name in the message"
# Over-long sentences (num_steps 6: 5 tokens + <eos> fit): one warning per long line, exit 0. A line
# of 6 tokens fills all 6 positions and loses <eos>; 5 tokens fit whole (no warning).
printf 'i lost . i lost . i lost .\ngo .\nhe is calm and i am home .\ni lost . i lost .\ni lost . we won\n' \
  | "$QKV" translate --model run > "$T/out" 2> "$T/err" || { cat "$T/err"; fail "translate long lines"; }
[ "$(wc -l < "$T/out")" = 5 ] || fail "long lines: output line count"
err_has "qkv translate: warning: line 1 has 9 source tokens but the model reads 6 positions (5 tokens + <eos>): tokens 7-9 are not read, nor is <eos>" \
        "qkv translate: warning: line 3 has 8 source tokens but the model reads 6 positions (5 tokens + <eos>): tokens 7-8 are not read, nor is <eos>" \
        "qkv translate: warning: line 4 has 6 source tokens but the model reads 6 positions (5 tokens + <eos>): all 6 are read, but not <eos>"
[ "$(grep -c "warning:.* source tokens" "$T/err")" = 3 ] || { cat "$T/err"; fail "want exactly 3 truncation warnings"; }
run_rc 0 translate --model run "i lost . i lost . i lost ."
err_has "qkv translate: warning: sentence 1 has 9 source tokens"
run_rc 0 heatmap --model run "i lost . i lost . i lost ." --out "$T/att"
err_has "qkv heatmap: warning: the sentence has 9 source tokens but the model reads 6 positions"
# a translation cut by --max-len is said, as qkv translate says it; one that ends with <eos> is not
run_rc 0 heatmap --model run "go ." --max-len 1 --out "$T/att1"
err_has "qkv heatmap: warning: the translation reached the length limit of 1 token (--max-len) before the end of the sentence: the translation is cut there; raise --max-len"
run_rc 0 heatmap --model run "go ." --max-len 1000 --out "$T/att2"
if grep -q "reached" "$T/err"; then cat "$T/err"; fail "heatmap warned about a translation that ended with <eos>"; fi

# ---- translate: --file and sentences on the command line are alternatives (usage error, exit 2)
run_rc 2 translate --model run --file in.txt "go ."
err_has "qkv: error: --file 'in.txt' and 1 sentence on the command line" "not both"
[ ! -s "$T/out" ] || fail "translated although --file and sentences were both given"
run_rc 2 translate --model run -f - "go ." "i lost ."
err_has "--file '-' and 2 sentences"

# ---- info on a path that does not exist: named as a missing model folder, like translate/eval
run_rc 1 info --model "$T/no-such-model"
err_has "qkv: error: no model folder '$T/no-such-model' (looked in $T/no-such-model): train one with: qkv train --out"

# ---- heatmap --out: a folder (existing, or ending in '/') gets the default prefix inside it; a
# missing folder fails before the model is loaded or anything decoded, as a usage error (exit 2)
mkdir "$T/hm"
run_rc 0 heatmap --model run "go ." --out "$T/hm/"
for f in encoder decoder-self cross; do [ -s "$T/hm/attention-$f.png" ] || fail "--out DIR/: no attention-$f.png"; done
rm "$T"/hm/*
run_rc 0 heatmap --model run "go ." --out "$T/hm" --format svg
for f in encoder decoder-self cross; do [ -s "$T/hm/attention-$f.svg" ] || fail "--out DIR: no attention-$f.svg"; done
grep -qF "wrote $T/hm/attention-encoder.svg" "$T/out" || { cat "$T/out"; fail "--out DIR: wrote line"; }
run_rc 2 heatmap --model no-such-model "go ." --out "$T/nodir/att"
err_has "qkv: error: heatmap: --out '$T/nodir/att': the folder '$T/nodir' does not exist"
[ ! -s "$T/out" ] || fail "heatmap decoded before failing on --out"
run_rc 2 heatmap --model run "go ." --out "$T/nodir/"
err_has "qkv: error: heatmap: --out '$T/nodir/'" "'$T/nodir' does not exist"
[ ! -e "$T/nodir" ] || fail "heatmap created the missing folder"
run_rc 2 heatmap --model no-such-model "go ." --out ""
err_has "qkv: error: --out: empty path"
run_rc 0 heatmap --help
grep -qF "ending in '/'" "$T/out" || fail "heatmap --help does not document --out DIR/"
run_rc 0 heatmap --model run "go ." --out "$T/att" --threads 1

# ---- config.json type errors name the key and the file; a missing model.safetensors is "not found"
cp -r run bad && sed -i 's|"num_hiddens": 16|"num_hiddens": "abc"|' bad/config.json
run_rc 1 translate --model bad "go ."
err_has "bad/config.json" "'model.num_hiddens'" '"abc"'
! grep -q "json.exception" "$T/err" || fail "raw nlohmann message"
# range errors name the file, the key, the value and the allowed range
for kv in 'num_steps": 6|num_steps": 0|data.num_steps'"'"' is 0, expected an integer from 2 to 1000' \
          'num_hiddens": 16|num_hiddens": -5|model.num_hiddens'"'"' is -5, expected an integer from 1 to 65536' \
          'beam": 1|beam": 0|decode.beam'"'"' is 0, expected an integer from 1 to 100' \
          'dropout": 0.1|dropout": 1.5|model.dropout'"'"' is 1.5, expected a number >= 0 and < 1'; do
  IFS='|' read -r from to want <<< "$kv"
  rm -rf range && cp -r run range && sed -i "s|\"$from|\"$to|" range/config.json
  grep -qF "\"$to" range/config.json || fail "sed did not apply $to"
  run_rc 1 translate --model range "go ."
  err_has "qkv: error: " "range/config.json" "'$want"
done
cp -r run nomodel && rm nomodel/model.safetensors
run_rc 1 translate --model nomodel "go ."
err_has "nomodel/model.safetensors' not found" "qkv train" "--model"
! grep -q "truncated" "$T/err" || fail "a missing file reported as truncated"
echo "cli robustness: ok"
