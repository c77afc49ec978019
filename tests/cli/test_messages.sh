#!/usr/bin/env bash
# What the qkv program says about bad paths and files, in the user's terms:
#  1. a file or folder flag given an empty value ("", e.g. an unset shell variable) is a usage error
#     naming the flag, "qkv: error: --data: empty path" (exit 2), for every command that takes one,
#     before anything is read or written: "" must not silently mean the default ($QKV_DATA, the
#     data path in config.json, standard input, runs/qkv, ...). Any other flag that takes a value
#     says "--X: empty value"; "--X=" is "--X ''"; info's positional is named "PATH".
#  2. errors about damaged or unwritable files name the file (and line) and what is wrong, not an
#     internal function (Vocab::load, write_file_atomic, read_xy_csv, train_nw, Trainer): a truncated
#     vocabulary, a vocabulary listing a token twice (one with Windows line endings is read), an
#     output file that cannot be created (eval --hyp-out/--json, heatmap --out: refused before
#     decoding), a config.json warming up over 0 steps, a CSV whose values make qkv nw's training
#     diverge, a data file too small for --preset d2l, a metrics.jsonl line that is not a record
#     (dropped on --resume with a note).
#  3. requests that contradict each other or would destroy the model are refused before anything is
#     read or written (exit 2): --attention flash (or QKV_ATTENTION=flash) with the reference
#     kernels (train cleared --out and then failed at the first step), eval's --hyp-out and --json
#     naming one file, or either naming a file of the model folder (model.safetensors became text).
# Usage: test_messages.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
# no_internal_names: stderr names no internal function
no_internal_names() {
  ! grep -Eq 'Vocab::|write_file_atomic|read_xy_csv|train_nw' "$T/err" || { cat "$T/err"; fail "an internal function name in the message"; }
}

# ---- 1. empty paths. In an empty folder, with $QKV_DATA naming a good data file: a default taken
# instead of the refusal would train or write something here.
mkdir "$T/work" && cd "$T/work"
export QKV_DATA="$T/fra.txt"
refused_empty() {  # refused_empty FLAG path|value QKV-ARGS... (the flag's value "" is among the args)
  local flag=$1 kind=$2; shift 2
  run_rc 2 "$@" < /dev/null
  err_has "qkv: error: $flag: empty $kind"
  [ ! -s "$T/out" ] || { cat "$T/out"; fail "'qkv $*' printed output before refusing $flag \"\""; }
  [ -z "$(ls -A "$T/work")" ] || fail "'qkv $*' wrote $(ls -A "$T/work")"
}
check_empty() { local flag=$1; shift; refused_empty "$flag" path "$@"; }  # check_empty FLAG QKV-ARGS...
check_empty --data train --data "" --max-steps 1 "${small[@]}"
check_empty --out train --out "" --max-steps 1 "${small[@]}"
check_empty --data eval --data ""
check_empty --model eval --model ""
check_empty --hyp-out eval --hyp-out ""
check_empty --json eval --json ""
check_empty --model translate --model "" "go ."
check_empty --file translate --file ""
check_empty --file translate -f ""
check_empty --model heatmap --model "" "go ."
check_empty --out heatmap --out "" "go ."
check_empty --data nw --data ""
check_empty --out nw --out ""
check_empty --out attention --out ""
check_empty --model info --model ""
check_empty PATH info ""  # the positional, not --model
# Any flag that takes a value, in both forms: "--X ''" and "--X=" (which CLI11 took as "use the
# next argument": "train --out= foo" trained into foo). A path keeps "empty path"; any other value
# is "empty value", before its own check (the enum flags said "--denormals:  not in {flush,keep}").
check_both() {  # check_both KIND FLAG QKV-WORDS-BEFORE-THE-FLAG... -- QKV-WORDS-AFTER-IT...
  local kind=$1 flag=$2; shift 2
  local before=() after=()
  while [ "$1" != -- ]; do before+=("$1"); shift; done
  shift
  after=("$@")
  refused_empty "$flag" "$kind" "${before[@]}" "$flag" "" "${after[@]}"
  refused_empty "$flag" "$kind" "${before[@]}" "$flag=" "${after[@]}"
}
check_both path --out train -- out2 --max-steps 1 "${small[@]}"
check_both path --data train -- out2 --max-steps 1 "${small[@]}"
for f in --preset --model --time-budget --val-every --schedule --trim --subword --batch-size --seed; do
  check_both value "$f" train -- --out out2 --max-steps 1 "${small[@]}"
done
check_both path --hyp-out eval -- --model m
check_both path --json eval -- m
check_both value --beam eval -- --model m
check_both path --model translate -- "go ."
check_both path --file translate -- "go ."
check_both value --batch-size translate -- "go ."
check_both path --out heatmap -- "go ."
check_both value --format heatmap -- "go ."
check_both path --out nw -- --epochs 1
check_both value --preset nw -- --out out2
check_both path --out attention -- --seed 1
check_both value --seed attention -- --out out2
check_both path --model info -- m
for f in --denormals --attention --kernels --threads; do
  check_both value "$f" -- info m   # before the subcommand
  check_both value "$f" info m --   # after it
done
unset QKV_DATA
cd "$T"

# ---- 2. damaged and unwritable files
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/run" "${small[@]}"
# a vocabulary file cut short (its last line has no newline)
cp -r "$T/run" "$T/cut"
head -c -1 "$T/run/src_vocab.txt" > "$T/cut/src_vocab.txt"  # the last newline gone
run_rc 1 translate --model "$T/cut" "go ."
err_has "qkv: error: the vocabulary file '$T/cut/src_vocab.txt' does not end with a newline: it is truncated"
no_internal_names
# vocabulary files with Windows line endings (CRLF on every line) read as the same tokens: they
# were reported as having no "<unk>" line
cp -r "$T/run" "$T/crlf"
sed -i 's/$/\r/' "$T/crlf/src_vocab.txt" "$T/crlf/tgt_vocab.txt"
grep -q $'^<unk>\r$' "$T/crlf/src_vocab.txt" || fail "the CRLF copy has no CR"
run_rc 0 translate --model "$T/run" "go ." "i lost ."
cp "$T/out" "$T/lf.out"
run_rc 0 translate --model "$T/crlf" "go ." "i lost ."
cmp -s "$T/out" "$T/lf.out" || { diff "$T/lf.out" "$T/out"; fail "CRLF vocabularies translate otherwise"; }
# a vocabulary file that lists a token twice: the file, the line and the earlier line
cp -r "$T/run" "$T/dup"
tok5=$(sed -n 5p "$T/run/tgt_vocab.txt")
sed -i "6s/.*/$tok5/" "$T/dup/tgt_vocab.txt"
run_rc 1 eval --model "$T/dup" --no-progress
err_has "qkv: error: $T/dup/tgt_vocab.txt:6: the token \"$tok5\" is also on line 5" "the vocabulary file is damaged"
no_internal_names
# a vocabulary file with two lines swapped, or a line replaced: it loads, but would map ids to other
# words (garbage translations, exit 0); model.safetensors records the vocabularies it was trained
# with, so translate, eval and info refuse, naming the file
cp -r "$T/run" "$T/swap"
sed -i '5{h;d};6G' "$T/swap/tgt_vocab.txt"
cmp -s "$T/run/tgt_vocab.txt" "$T/swap/tgt_vocab.txt" && fail "the swap changed nothing"
for cmd in "translate --model $T/swap go ." "eval --model $T/swap --no-progress" "info $T/swap --no-params"; do
  run_rc 1 $cmd
  err_has "qkv: error: $T/swap/tgt_vocab.txt is not the vocabulary $T/swap/model.safetensors was trained with"
done
# --resume of such a folder names the file too (it blamed the data: "the data gives other
# vocabularies"), and trains nothing
sums=$(md5sum "$T/swap/checkpoint.safetensors" "$T/swap/model.safetensors")
run_rc 1 train --resume --out "$T/swap" --data "$T/fra.txt" --max-steps 3 --no-progress
err_has "qkv: error: $T/swap/tgt_vocab.txt is not the vocabulary $T/swap/checkpoint.safetensors was trained with"
[ "$sums" = "$(md5sum "$T/swap/checkpoint.safetensors" "$T/swap/model.safetensors")" ] || fail "a refused --resume changed the weights"
# a SentencePiece model replaced by another run's (here: the target one as the source one) is named too
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/spm" --subword bpe --vocab-size 40 "${small[@]}"
[ -f "$T/spm/spm_src.model" ] && [ -f "$T/spm/spm_tgt.model" ] || fail "a --subword bpe run has no spm_src/tgt.model"
cp "$T/spm/spm_tgt.model" "$T/spm/spm_src.model"
run_rc 1 train --resume --out "$T/spm" --data "$T/fra.txt" --max-steps 3 --no-progress
err_has "qkv: error: $T/spm/src_vocab.txt" "$T/spm/spm_src.model" "(the vocabulary must list the SentencePiece model's pieces)"
cp -r "$T/run" "$T/bytes"
sed -i "7s/.*/$(printf '\xff\xfe')/" "$T/bytes/src_vocab.txt"
run_rc 1 translate --model "$T/bytes" "go ."
err_has "qkv: error: $T/bytes/src_vocab.txt is not the vocabulary"
# an output file whose folder exists but cannot be written in (root too cannot create files in /proc):
# refused before decoding (it was found only after it), in the words of the write, after the flag
hyp="/proc/qkv-hyp-$$.txt"
run_rc 2 eval --model "$T/run" --no-progress --hyp-out "$hyp"
err_has "qkv: error: --hyp-out: cannot write '$hyp': cannot create its temporary file '$hyp.tmp."
no_internal_names
[ ! -s "$T/out" ] || { cat "$T/out"; fail "eval decoded before refusing --hyp-out"; }
run_rc 2 eval --model "$T/run" --no-progress --json "$hyp"
err_has "qkv: error: --json: cannot write '$hyp': cannot create its temporary file '$hyp.tmp."
[ ! -s "$T/out" ] || { cat "$T/out"; fail "eval decoded before refusing --json"; }
run_rc 2 heatmap --model "$T/run" --out /proc/qkv-hm-$$ "go ."
err_has "qkv: error: --out: cannot write '/proc/qkv-hm-$$-encoder.png': cannot create its temporary file"
# "-o /dev/stdout" made /dev/stdout-encoder.png (as root): a device, FIFO or descriptor is no prefix
mkfifo "$T/prefix.fifo"
for o in /dev/stdout /dev/fd/1 "$T/prefix.fifo"; do
  run_rc 2 heatmap --model "$T/run" --out "$o" "go ."
  err_has "qkv: error: heatmap: --out '$o' is a device, FIFO or standard output, but --out is a file prefix: heatmap writes several files"
done
[ -z "$(ls /dev | grep -- '-encoder\.png$')" ] || fail "heatmap wrote into /dev"
run_rc 2 heatmap --model "$T/run" --out "$T/nofolder/x" "go ."
err_has "the folder '$T/nofolder' does not exist"
[ ! -s "$T/out" ] || { cat "$T/out"; fail "heatmap decoded before refusing --out"; }
run_rc 0 heatmap --model "$T/run" --out "$T/hm" --format svg "go ."  # a writable prefix: the probe leaves nothing
[ "$(ls "$T" | grep '^hm')" = "$(printf 'hm-cross.svg\nhm-decoder-self.svg\nhm-encoder.svg')" ] ||
    { ls "$T"; fail "heatmap wrote other files than its three"; }
# a config.json edited to warm up over 0 steps: named by its key, not as "Trainer: a warmup schedule
# needs warmup_steps >= 1" once training starts
cp -r "$T/run" "$T/w0"
grep -q '"schedule": "warmup_inv_sqrt"' "$T/w0/config.json" || fail "the demo run has no warmup schedule"
sed -i 's/"warmup_steps": [0-9]*/"warmup_steps": 0/' "$T/w0/config.json"
run_rc 1 train --resume --out "$T/w0" --max-steps 3 --no-progress
err_has "$T/w0/config.json': key 'train.warmup_steps' is 0, expected an integer >= 1 with train.schedule 'warmup_inv_sqrt'"
! grep -q "Trainer:" "$T/err" || { cat "$T/err"; fail "a library prefix in the message"; }
# ---- 3. contradictory or self-destructive requests
cp -r "$T/run" "$T/keep"
sum=$(md5sum < "$T/keep/model.safetensors")
run_rc 2 train --attention flash --kernels ref --data "$T/fra.txt" --out "$T/keep" --max-steps 1 "${small[@]}"
err_has "qkv: error: --attention flash needs the fast kernels, but --kernels ref selects the reference kernels"
[ "$(md5sum < "$T/keep/model.safetensors")" = "$sum" ] && [ -s "$T/keep/checkpoint.safetensors" ] ||
    fail "train touched the model folder before refusing --attention flash --kernels ref"
QKV_KERNELS=ref run_rc 2 translate --model "$T/run" --attention flash "go ."
err_has "qkv: error: --attention flash needs the fast kernels, but QKV_KERNELS=ref selects"
QKV_ATTENTION=flash run_rc 2 --kernels ref translate --model "$T/run" "go ."
err_has "qkv: error: QKV_ATTENTION=flash needs the fast kernels, but --kernels ref selects"
run_rc 2 eval --model "$T/keep" --no-progress --hyp-out "$T/keep/model.safetensors"
err_has "qkv: error: --hyp-out '$T/keep/model.safetensors' is the model folder's own model.safetensors"
[ "$(md5sum < "$T/keep/model.safetensors")" = "$sum" ] || fail "eval --hyp-out overwrote model.safetensors"
run_rc 2 eval --model "$T/keep" --no-progress --json "$T/keep/../keep/config.json"
err_has "qkv: error: --json '$T/keep/../keep/config.json' is the model folder's own config.json"
run_rc 2 eval --model "$T/keep" --no-progress --hyp-out "$T/same.out" --json "$T/./same.out"
err_has "qkv: error: --hyp-out and --json name the same file '$T/./same.out'"
[ ! -e "$T/same.out" ] || fail "eval wrote same.out before refusing"
run_rc 0 eval --model "$T/keep" --no-progress --limit 3 --hyp-out "$T/keep/hyp.txt"  # other names in the folder are fine
[ -s "$T/keep/hyp.txt" ] || fail "eval wrote no hypotheses into the model folder"
# qkv nw on a CSV whose values overflow float32's squared error: training diverges at epoch 1
printf 'x,y\n0,1e20\n1,-1e20\n2,1e20\n' > "$T/huge.csv"
run_rc 1 nw --data "$T/huge.csv" --out "$T/nw"
err_has "qkv: error: training diverged: the loss is not finite at epoch 1" "scale the data down"
no_internal_names
# a metrics.jsonl line that is not a record: --resume drops it with a note naming the file and the
# line (it was dropped without a word)
cp -r "$T/run" "$T/mj"
n=$(($(wc -l < "$T/mj/metrics.jsonl") + 1))
echo 'not json' >> "$T/mj/metrics.jsonl"
run_rc 0 train --resume --out "$T/mj" --max-steps 3 --no-progress
err_has "note: $T/mj/metrics.jsonl: 1 line is not a JSON record, dropped (line $n first: a write cut short, or an edit)"
! grep -q "not json" "$T/mj/metrics.jsonl" || fail "the bad line is still in metrics.jsonl"
# --preset d2l on a data file too small for D2L EN's split
run_rc 1 train --preset d2l --data "$T/fra.txt" --out "$T/d2l" --no-progress
err_has "qkv: error: '$T/fra.txt' has only 60 sentence pairs in its first " "use a larger data file, or another preset"
! grep -q prepare_d2l_en "$T/err" || { cat "$T/err"; fail "an internal function name in the message"; }
echo "cli messages (empty path and value flags; truncated, duplicated and CRLF vocabularies, unwritable output files, warmup_steps 0, flash with reference kernels, eval outputs on each other or the model's files, a diverging nw CSV, a small file for --preset d2l, a metrics.jsonl line that is not a record): ok"
