#!/usr/bin/env bash
# Inputs a fresh user gets wrong, checked before any work is done: translate --file naming a
# folder or a missing file, a UTF-8 byte-order mark on the first line, a NUL byte in the training
# data or in translate's input, a truncated model.safetensors (its path named once, the bytes
# expected and found), eval's output files in a missing folder, --model naming a file, QKV_DATA
# for eval when config.json's data path is gone, info running the loader's checks (a folder
# without weights, a damaged vocabulary), a checkpoint whose 'qkv.config' metadata is not JSON,
# heatmap images too large to draw (nothing written), QKV_KERNELS or QKV_ATTENTION misspelt (exit
# 2 before any work), an unknown command.
# Usage: test_inputs.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
unset QKV_DATA QKV_KERNELS QKV_ATTENTION

# ---- commands and environment
run_rc 2 bogus;                         err_has "qkv: error: unknown command 'bogus'" "translate"
# (bash passes a VAR=value prefix of a function call to the commands it runs)
QKV_KERNELS=fsat run_rc 2 info "$T";      err_has "qkv: error: QKV_KERNELS must be 'fast' or 'ref', got 'fsat'"
QKV_KERNELS=fsat run_rc 0 info --help;    err_has "qkv: warning: QKV_KERNELS must be 'fast' or 'ref', got 'fsat'"
QKV_KERNELS=ref run_rc 0 info --help
QKV_ATTENTION=flsh run_rc 2 info "$T";    err_has "qkv: error: QKV_ATTENTION must be 'auto', 'math' or 'flash', got 'flsh'"
QKV_ATTENTION=flsh run_rc 0 info --help;  err_has "qkv: warning: QKV_ATTENTION must be 'auto', 'math' or 'flash', got 'flsh'"
QKV_ATTENTION=math run_rc 0 info --help

# ---- a tiny model
for i in $(seq 1 60); do
  case $((i % 4)) in
    0) echo -e "Go.\tVa !" ;;
    1) echo -e "I lost.\tJ'ai perdu." ;;
    2) echo -e "He's calm.\tIl est calme." ;;
    3) echo -e "I'm home.\tJe suis chez moi." ;;
  esac
done > "$T/fra.txt"
printf "I\0 won.\tJ'ai gagn\xc3\xa9.\n" >> "$T/fra.txt"  # line 61: a NUL byte is no text (it would be <unk>)
cd "$T"
tiny=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --threads 1)
run_rc 1 train --data fra.txt --preset demo --max-steps 2 --out strict --time-budget none --no-progress --strict "${tiny[@]}"
err_has "qkv: error: " "fra.txt: line 61: NUL byte (byte offset 1)"
run_rc 0 train --data fra.txt --preset demo --max-steps 2 --out run --time-budget none --no-progress "${tiny[@]}"
err_has "60 pairs from 61 lines; 1 malformed line skipped (line 61: NUL byte (byte offset 1))"

# ---- info checks what translate and eval would load
run_rc 0 info run --no-params;                     grep -qF "check: the folder loads" "$T/out" || fail "info: no load check"
cp -r run run_nomodel && rm run_nomodel/model.safetensors run_nomodel/checkpoint.safetensors
run_rc 1 info run_nomodel;                         err_has "model.safetensors' not found and no checkpoint.safetensors"
cp -r run run_ckpt && rm run_ckpt/model.safetensors
run_rc 0 info run_ckpt --no-params;                grep -qF "model.safetensors: not written yet" "$T/out" || fail "info: run in progress"
cp -r run run_badvocab && head -c 5 run/src_vocab.txt > run_badvocab/src_vocab.txt
run_rc 1 info run_badvocab --no-params;            err_has "src_vocab.txt"
# The checksum covers the tensors, not the metadata: a damaged 'qkv.config' (its first '{' made a
# '[', same length) is named with the file and key, not as a bare JSON parser message.
cp run/checkpoint.safetensors badmeta.safetensors
off=$(grep -obaF '"qkv.config":"{' badmeta.safetensors | head -1 | cut -d: -f1)
[ -n "$off" ] || fail "no qkv.config metadata in the checkpoint"
printf '[' | dd of=badmeta.safetensors bs=1 seek=$((off + 14)) conv=notrunc status=none
run_rc 1 info badmeta.safetensors --no-params
err_has "qkv: error: checkpoint 'badmeta.safetensors': metadata 'qkv.config' is not valid JSON (parse error at line 1"
! grep -qF "[json.exception" "$T/err" || { cat "$T/err"; fail "info: the JSON parser's tag"; }
[ ! -s "$T/out" ] || { cat "$T/out"; fail "info printed metadata before failing"; }

# ---- translate --file: a folder or a missing file is refused before the model is loaded
mkdir adir
run_rc 1 translate --model run -f adir;            err_has "qkv: error: " "--file 'adir' is a folder"
run_rc 1 translate --model run -f missing.txt;     err_has "--file 'missing.txt' does not exist"

# ---- a byte-order mark on the first line changes nothing
printf 'i lost .\ngo .\n' > plain.txt
printf '\xef\xbb\xbfi lost .\ngo .\n' > bom.txt
run_rc 0 translate --model run -f plain.txt; cp "$T/out" plain.out
run_rc 0 translate --model run -f bom.txt
cmp -s "$T/out" plain.out || { diff "$T/out" plain.out; fail "a BOM changed the translation"; }
printf '\xef\xbb\xbfi lost .\n' | "$QKV" translate --model run > stdin.out 2> /dev/null
[ "$(cat stdin.out)" = "$(head -1 plain.out)" ] || fail "a BOM on stdin changed the translation"

# ---- a NUL byte in the input: like invalid UTF-8, the line is named, its output line left empty,
# exit 1 (from a file and from stdin)
printf 'go .\ni\0 lost .\ni lost .\n' > nul.txt
for src in "-f nul.txt" "-f -"; do
  # shellcheck disable=SC2086
  run_rc 1 translate --model run $src < nul.txt
  err_has "qkv translate: line 2: NUL byte (byte offset 1); output left empty" \
          "1 of 3 lines not translated (invalid UTF-8 or a NUL byte; their output lines are empty)"
  [ "$(wc -l < "$T/out")" = 3 ] && [ -z "$(sed -n 2p "$T/out")" ] || { cat "$T/out"; fail "NUL line ($src): output lines"; }
  [ "$(sed -n 1p "$T/out")" = "$(sed -n 2p plain.out)" ] && [ "$(sed -n 3p "$T/out")" = "$(sed -n 1p plain.out)" ] ||
    fail "NUL line ($src): the other lines' translations changed"
done

# ---- --shard-optimizer in one process: said to shard nothing (recorded for a resume under mpirun)
run_rc 0 train --data fra.txt --preset demo --max-steps 1 --out sharded1 --time-budget none --no-progress --shard-optimizer "${tiny[@]}"
err_has "note: shard_optimizer has nothing to shard in one process"
grep -q '"shard_optimizer": true' sharded1/config.json || fail "--shard-optimizer not recorded in config.json"

# ---- --warmup with the constant schedule does nothing: said so
run_rc 0 train --data fra.txt --preset demo --max-steps 1 --out warm1 --time-budget none --no-progress --schedule constant --warmup 5 "${tiny[@]}"
err_has "note: --warmup has no effect with the constant learning-rate schedule"
run_rc 0 train --data fra.txt --preset demo --max-steps 1 --out warm2 --time-budget none --no-progress --warmup 5 "${tiny[@]}"
if grep -q "has no effect" "$T/err"; then cat "$T/err"; fail "--warmup with the demo preset's warmup schedule was called ineffective"; fi

# ---- a binary file: notes for the first 5 bad lines, then one line counting the rest, not 40
for i in $(seq 1 40); do printf 'go\0 .\n'; done > binary.txt
run_rc 1 translate --model run -f binary.txt
err_has "line 5: NUL byte" "35 more lines not valid text (invalid UTF-8 or a NUL byte); output left empty (notes for the first 5 only)" \
        "40 of 40 lines not translated"
[ "$(grep -c "NUL byte (byte offset" "$T/err")" = 5 ] || { cat "$T/err"; fail "binary file: not 5 per-line notes"; }

# ---- a translation cut at --max-len is said on stderr (it may end mid-word), naming the lines
run_rc 0 translate --model run --max-len 1 "go ." "i lost ."
err_has "qkv translate: warning: 2 sentences (1, 2) reached the length limit of 1 token (--max-len) before the end of the sentence: the translation is cut there; raise --max-len"
# and only those lines: the attention JSON has a row for <eos> exactly when a translation finished
run_rc 0 translate --model run --max-len 4 --attention-json att.json "go ." "i lost ." "he's calm ."
python3 - att.json "$T/err" <<'PY' || fail "the --max-len warning does not name exactly the unfinished lines"
import json, re, sys
cut = [e["line"] for e in json.load(open(sys.argv[1])) if len(e["attention"]) == len(e["translation"])]
m = re.search(r"(\d+) sentences? \(([\d, ]+)\) reached the length limit of 4 tokens \(--max-len\)", open(sys.argv[2]).read())
said = [int(x) for x in m.group(2).split(", ")] if m else []
assert said == cut and (not m or int(m.group(1)) == len(cut)), (said, cut)
PY

# ---- a damaged model.safetensors: the error names the file once
cp -r run run_cut && head -c 100 run/model.safetensors > run_cut/model.safetensors
# and says once that it is truncated, with the bytes expected and found (it said "... exceeds the N
# bytes that follow it (file truncated?) (the file is truncated, corrupt or not a qkv file)")
cut_msg="qkv: error: model file 'run_cut/model.safetensors': the file is truncated: expected"
run_rc 1 translate --model run_cut "go ."
err_has "$cut_msg" "bytes (8-byte header length + " ", found 100"
[ "$(grep -o "model.safetensors" "$T/err" | wc -l)" = 1 ] || { cat "$T/err"; fail "the path is not named once"; }
[ "$(grep -o "truncated" "$T/err" | wc -l)" = 1 ] || { cat "$T/err"; fail "truncation is explained more than once"; }
# qkv info names it the same way (it said "checkpoint '…/model.safetensors'")
run_rc 1 info run_cut --no-params
err_has "$cut_msg" ", found 100"
# cut inside the tensor data: the whole size expected
cp run/model.safetensors run_cut/model.safetensors
size=$(stat -c %s run/model.safetensors)
truncate -s $((size - 1)) run_cut/model.safetensors
run_rc 1 info run_cut --no-params
err_has "$cut_msg $size bytes (8-byte header length + " " bytes of tensor data), found $((size - 1))"

# ---- --model naming a file
run_rc 1 translate --model fra.txt "go .";         err_has "'fra.txt' is a file, not a model folder"

# ---- eval: output files checked before decoding; QKV_DATA when the recorded data path is gone
run_rc 2 eval --model run --no-progress --hyp-out nodir/h.txt;  err_has "--hyp-out 'nodir/h.txt': the folder 'nodir' does not exist"
run_rc 2 eval --model run --no-progress --json adir;            err_has "--json 'adir' is a folder"
for f in --json --hyp-out; do  # "-" is not stdout: it wrote a file named "-" in the working folder
  run_rc 2 eval --model run --no-progress $f -;                 err_has "qkv: error: $f '-': '-' is not standard output here; give a file name, or /dev/stdout"
  [ ! -e ./- ] || fail "eval $f - wrote a file named '-'"
done
[ ! -e nodir ] || fail "eval created nodir"
mv fra.txt moved.txt
run_rc 1 eval --model run --no-progress;           err_has "--data PATH or \$QKV_DATA"
err_has "\$QKV_DATA is used only when the recorded file is missing"  # not "overrides config.json"
set +e
QKV_DATA="$T/moved.txt" "$QKV" eval --model run --no-progress > "$T/out" 2> "$T/err"; rc=$?
set -e
[ "$rc" = 0 ] || { cat "$T/err"; fail "eval with QKV_DATA: exit $rc"; }
err_has "not found; using \$QKV_DATA '$T/moved.txt'"
grep -q "corpus BLEU-4" "$T/out" || fail "eval with QKV_DATA printed no BLEU"
mv moved.txt fra.txt

# ---- heatmap: an image too large to draw is refused before any file is written
long=$(for i in $(seq 1 40); do printf 'i lost . '; done)
mkdir maps
# Whether the tiny model decodes long enough to overflow depends on when it emits <eos>: either it
# fails with the message and writes nothing, or every image it writes is within the limit.
set +e
"$QKV" heatmap --model run --out maps/ --max-len 1000 "$long" > "$T/out" 2> "$T/err"; rc=$?
set -e
if [ "$rc" = 1 ]; then
  err_has "px (at most 20000 each way)" "--max-len"
  [ -z "$(ls maps)" ] || { ls maps; fail "heatmap wrote files before failing"; }
else
  [ "$rc" = 0 ] || { cat "$T/err"; fail "heatmap --max-len 1000: exit $rc"; }
  for f in maps/*.png; do
    set -- $(od -An -tu1 -j16 -N8 "$f")  # PNG IHDR: width, height as big-endian 32-bit
    w=$(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 )); h=$(( ($5 << 24) | ($6 << 16) | ($7 << 8) | $8 ))
    [ "$w" -ge 16 ] && [ "$w" -le 20000 ] && [ "$h" -ge 16 ] && [ "$h" -le 20000 ] || fail "$f is $w x $h px"
  done
  rm -f maps/*
fi
run_rc 0 heatmap --model run --out maps/ "i lost ."
[ -n "$(ls maps)" ] || fail "heatmap wrote nothing"
echo "test_inputs: ok"
