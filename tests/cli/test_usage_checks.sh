#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): results and conflicts that must be refused
# before any output is written or a model is loaded, and messages that name the file or flag.
source "$(dirname "$0")/lib.sh" "$1"

# ---- qkv nw: a kernel so narrow that it underflows for every training point gives no result ----
run_rc 2 nw --kernel-width 1e-30 --out "$T/nw"
err_has "qkv: error: --kernel-width 1e-30: the Gaussian kernel underflows" "test query x = 0"
[ ! -e "$T/nw" ] || fail "nw --kernel-width 1e-30 wrote $(ls "$T/nw")"
grep -q nan "$T/out" && fail "nw printed a NaN"
run_rc 0 nw --kernel-width 1e-19 --out "$T/nw"  # narrow, but every query keeps its nearest point
out_has "test MSE against the true function: 0."
run_rc 0 nw --epochs 1 --out "$T/nw1"
out_has "1 epoch, loss"

# ---- --out that cannot be created: a usage error before the data is read (root may write /proc
# as far as access() is concerned, but cannot create anything there) ----
six_pairs > "$T/fra.txt"
run_rc 2 train --data "$T/fra.txt" --out /proc/qkv-test-$$
err_has "qkv: error: --out '/proc/qkv-test-$$': cannot create the folder '/proc/qkv-test-$$'"
grep -q "train:\|pairs" "$T/out" && fail "train read the data before checking --out"
run_rc 2 nw --out /proc/qkv-test-$$/a/b
err_has "qkv: error: --out '/proc/qkv-test-$$/a/b': cannot create the folder '/proc/qkv-test-$$'"
# The probe leaves nothing behind.
echo "x,y" > "$T/bad.csv"
(cd "$T" && run_rc 1 nw --data bad.csv --out new/run)
err_has "need at least 2 data rows"
[ ! -e "$T/new" ] || fail "the --out check left '$T/new' behind"
run_rc 1 nw --data "$T/bad.csv" --out "$T"
[ -z "$(ls -A "$T" | grep qkv-write-test)" ] || fail "the --out check left its probe file in '$T'"
# --out is read as the OS will (links followed, then ".."): with L a link to a folder elsewhere,
# L/../x is x beside that folder, not beside L.
mkdir -p "$T/far/target" "$T/here"
ln -s "$T/far/target" "$T/here/L"
touch "$T/far/x"
(cd "$T/here" && run_rc 2 attention --out L/../x)
err_has "qkv: error: --out 'L/../x' is an existing file, not a folder"
rm "$T/far/x"
touch "$T/here/x"  # a file where a lexical reading looks
(cd "$T/here" && run_rc 0 attention --out L/../x)
[ -d "$T/far/x" ] || fail "attention --out L/../x did not write beside the link's folder"

# ---- attention weights with the flash backend forced: refused before the model is loaded ----
mkdir "$T/empty"
run_rc 2 --attention flash heatmap --model "$T/empty" "go ."
err_has "qkv: error: --attention flash: heatmap shows the attention weights" "--attention auto or math"
QKV_ATTENTION=flash run_rc 2 heatmap --model "$T/empty" "go ."
err_has "qkv: error: QKV_ATTENTION=flash: heatmap shows the attention weights"
run_rc 2 attention --attention flash --out "$T/att"
err_has "qkv: error: --attention flash: attention shows the attention weights"
[ ! -e "$T/att" ] || fail "attention --attention flash wrote files"
QKV_ATTENTION=flash run_rc 1 heatmap --attention math --model "$T/empty" "go ."  # --attention wins

# ---- a head width the forced flash kernel cannot take (1..256): a usage error before the data is
# read or --out is made, for a fresh run, a resume and a language model ----
wide=(--preset demo --data "$T/fra.txt" --num-hiddens 600 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8
      --num-steps 6 --max-steps 1 --time-budget none --no-progress)
for forced in --attention QKV_ATTENTION; do
  pre=(--attention flash)
  if [ $forced = QKV_ATTENTION ]; then pre=(); export QKV_ATTENTION=flash; fi
  run_rc 2 "${pre[@]}" train "${wide[@]}" --out "$T/flash"
  err_has "qkv: error: the flash backend was forced but cannot run: flash: head dims must be in 1..256, got 300" \
          "--num-hiddens, --num-heads"
  ! grep -q "^data:" "$T/err" || fail "train read the data before refusing a head width of 300 for flash ($forced)"
  [ ! -e "$T/flash" ] || fail "train made --out before refusing a head width of 300 for flash ($forced)"
  run_rc 2 "${pre[@]}" train --model lm --data "$T/fra.txt" --num-hiddens 600 --num-heads 2 --num-blks 1 --batch-size 4 \
    --num-steps 8 --max-steps 1 --no-progress --out "$T/flash"
  err_has "qkv: error: the flash backend was forced but cannot run: flash: head dims must be in 1..256, got 300"
  [ ! -e "$T/flash" ] || fail "train --model lm made --out before refusing a head width of 300 for flash ($forced)"
  unset QKV_ATTENTION
done
run_rc 0 train "${wide[@]}" --out "$T/wide"
sum_wide=$(cat "$T/wide"/* | md5sum)
run_rc 2 --attention flash train --resume --out "$T/wide" --max-steps 2 --no-progress
err_has "qkv: error: the flash backend was forced but cannot run: flash: head dims must be in 1..256, got 300"
[ "$(cat "$T/wide"/* | md5sum)" = "$sum_wide" ] || fail "a refused --resume with flash changed the model folder"

# ---- a model folder whose vocabulary has its reserved tokens moved is refused, naming file and line ----
tiny=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --threads 1)
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/run" --time-budget none --no-progress "${tiny[@]}"
run_rc 0 translate --model "$T/run" "go ."
cp -r "$T/run" "$T/swapped"
{ sed -n 2p "$T/run/src_vocab.txt"; sed -n 1p "$T/run/src_vocab.txt"; tail -n +3 "$T/run/src_vocab.txt"; } > "$T/swapped/src_vocab.txt"
run_rc 1 translate --model "$T/swapped" "go ."
err_has "qkv: error: $T/swapped/src_vocab.txt:1: line 1 must be '<unk>', got '<pad>'"
cp "$T/run/src_vocab.txt" "$T/swapped/src_vocab.txt"
{ sed -n 1,2p "$T/run/tgt_vocab.txt"; sed -n 4p "$T/run/tgt_vocab.txt"; sed -n 3p "$T/run/tgt_vocab.txt"; tail -n +5 "$T/run/tgt_vocab.txt"; } > "$T/swapped/tgt_vocab.txt"
run_rc 1 info "$T/swapped" --no-params
err_has "$T/swapped/tgt_vocab.txt:3: line 3 must be '<bos>', got '<eos>'"
# D2L EN's vocabulary is sorted byte-wise ('.' '<eos>' '<pad>' '<unk>' ...): that order is checked.
for i in $(seq 12); do six_pairs; done > "$T/fra720.txt"
run_rc 0 train --preset d2l --data "$T/fra720.txt" --max-steps 1 --out "$T/d2l" --time-budget none --no-progress "${tiny[@]}"
run_rc 0 translate --model "$T/d2l" "go ."
cp -r "$T/d2l" "$T/d2l_swapped"
{ sed -n 3p "$T/d2l/src_vocab.txt"; sed -n 2p "$T/d2l/src_vocab.txt"; sed -n 1p "$T/d2l/src_vocab.txt"; tail -n +4 "$T/d2l/src_vocab.txt"; } > "$T/d2l_swapped/src_vocab.txt"
run_rc 1 translate --model "$T/d2l_swapped" "go ."
err_has "$T/d2l_swapped/src_vocab.txt:2: '<eos>' comes after '<pad>' on line 1: a D2L EN vocabulary is sorted byte-wise"

# ---- messages name the file, not the function that read it; plurals; no trailing space ----
printf "Go.\tVa !\n" > "$T/one.txt"
run_rc 1 train --data "$T/one.txt" --out "$T/one"
err_has "qkv: error: data: only 1 pair in $T/one.txt after filtering; need at least 3"
: > "$T/empty.txt"
run_rc 1 train --data "$T/empty.txt" --out "$T/e"
[ "$(tail -n 1 "$T/err")" = "qkv: error: $T/empty.txt: no sentence pairs found (0 lines read)" ] ||
    { cat -A "$T/err"; fail "empty data file: unexpected message"; }
echo "not a zip" > "$T/fake.zip"
run_rc 1 train --data "$T/fake.zip" --out "$T/z"
err_has "qkv: error: cannot open the zip archive '$T/fake.zip': "
grep -q "read_fra_eng_text" "$T/err" && fail "a function name leaked into the message"
run_rc 2 eval --model "$T/run" --json "$T/fra.txt/x.json"
err_has "qkv: error: --json '$T/fra.txt/x.json': '$T/fra.txt' is not a folder"
run_rc 1 info "$T/fra.txt"
err_has "qkv: error: '$T/fra.txt' is not a safetensors file"
grep -q "checkpoint '" "$T/err" && fail "info called a text file a checkpoint"
true

# ---- --denormals: flush (default) or keep, before or after the command; anything else refused ----
run_rc 2 --denormals zero nw --epochs 1 --out "$T/nwd"
err_has "qkv: error:" "--denormals"
[ ! -e "$T/nwd" ] || fail "--denormals zero wrote files"
run_rc 0 --denormals keep nw --epochs 1 --out "$T/nwd_keep"
cp "$T/out" "$T/out_keep"
run_rc 0 nw --epochs 1 --denormals flush --out "$T/nwd_flush"
# Nadaraya-Watson on this data has no subnormal values: both give the same printed result.
diff <(grep -v "wrote\|$T" "$T/out_keep") <(grep -v "wrote\|$T" "$T/out") >/dev/null \
  || fail "--denormals keep and flush disagree on qkv nw: $(diff "$T/out_keep" "$T/out")"

# ---- a flag given twice: said in qkv's words, naming the flag (CLI11's "At Most 1 required") ----
run_rc 2 train --max-steps 1 --max-steps 2 --out "$T/twice"
err_has "qkv: error: --max-steps is given more than once: give it once"
[ ! -e "$T/twice" ] || fail "a refused train wrote $T/twice"
run_rc 2 translate --beam 2 --beam 3 --model "$T/none" "go ."
err_has "qkv: error: --beam is given more than once: give it once"
# a switch with its opposite (CLI11 let the last one win without a word); the same switch twice
# means what it says once
run_rc 2 train --model bahdanau --bidirectional --no-bidirectional --out "$T/twice"
err_has "qkv: error: --bidirectional/--no-bidirectional: the switch and its opposite are both given: give one"
run_rc 2 train --model bahdanau --no-bidirectional --bidirectional --no-bidirectional --out "$T/twice"
err_has "qkv: error: --bidirectional/--no-bidirectional: the switch and its opposite are both given: give one"
[ ! -e "$T/twice" ] || fail "a refused train wrote $T/twice"
run_rc 1 info "$T/none" --no-params --no-params
err_has "no model folder '$T/none' (looked in $T/none)"
