#!/usr/bin/env bash
# qkv train / eval guards a fresh user relies on:
#  1. the data a model was trained on is fingerprinted in config.json (pair count + FNV-1a 64);
#     eval --data OTHER and train --resume --data OTHER refuse a different file or order (also for
#     subword models, whose vocabularies come from spm.model and so cannot tell); the same data
#     passes; an older config.json without the fingerprint is not checked (a note says so);
#  2. a bad configuration (heads that do not divide the width, --tie-weights without
#     --shared-vocab) is a usage error (exit 2) before the data is read or anything in --out changes
#     (its modification time included);
#  3. --resume with flags that differ from config.json: model-changing ones are refused (exit 2),
#     the others named in a warning as ignored;
#  4. --resume when the checkpoint has already trained the asked epochs/steps: "nothing to do",
#     exit 0, nothing written;
#  5. train --out / nw --out naming a file (or a path under one) fail up front (exit 2).
# Usage: test_train_guard.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
sums() { (cd "$1" && md5sum config.json src_vocab.txt tgt_vocab.txt model.safetensors checkpoint.safetensors metrics.jsonl); }

six_pairs > "$T/fra.txt"
tac "$T/fra.txt" > "$T/rev.txt"          # the same 60 pairs in another order: another split
head -n 54 "$T/fra.txt" > "$T/short.txt"  # fewer pairs
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --time-budget none)

# ---- 1. data fingerprint: subword model (same vocabularies whatever the file), then a word model
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/sw" \
  --subword bpe --vocab-size 40 --shared-vocab
grep -q '"fingerprint": {' "$T/sw/config.json" || fail "config.json has no data.fingerprint"
grep -q '"pairs": 60' "$T/sw/config.json" || fail "config.json fingerprint pair count"
grep -Eq '"fnv1a64": "[0-9a-f]{16}"' "$T/sw/config.json" || fail "config.json fingerprint hash"
run_rc 0 eval --model "$T/sw" --no-progress
run_rc 0 eval --model "$T/sw" --no-progress --data "$T/fra.txt"
! grep -q "fingerprint" "$T/err" || { cat "$T/err"; fail "a note about the fingerprint for the right data"; }
run_rc 1 eval --model "$T/sw" --no-progress --data "$T/rev.txt"
err_has "qkv: error: the data file '$T/rev.txt' is not the data the model in '$T/sw' was trained on" \
        "same number of pairs (60)" "contents or order differ" "$T/sw/config.json records" "--data"
grep -q "corpus BLEU" "$T/out" && fail "eval scored the wrong data"
run_rc 1 eval --model "$T/sw" --no-progress --data "$T/short.txt"
err_has "'$T/short.txt'" "it gives 54 pairs" "records 60"
# resume: other data refused before training, the same data passes
run_rc 1 train --resume --out "$T/sw" --data "$T/rev.txt" --max-steps 3 --no-progress
err_has "'$T/rev.txt' is not the data the model in '$T/sw' was trained on" "contents or order differ"
grep -q "trained 3 steps" "$T/out" && fail "resume trained on other data"
run_rc 0 train --resume --out "$T/sw" --data "$T/fra.txt" --max-steps 3 --no-progress
out_has "trained 3 steps"
# an older config.json (no fingerprint): no check, a note; a resume records the fingerprint
sed -i '/"fingerprint": {/,/}/d' "$T/sw/config.json"
! grep -q fingerprint "$T/sw/config.json" || fail "sed did not remove the fingerprint"
run_rc 0 eval --model "$T/sw" --no-progress --data "$T/fra.txt"
err_has "records no data fingerprint"
run_rc 0 train --resume --out "$T/sw" --data "$T/fra.txt" --max-steps 4 --no-progress
err_has "records no data fingerprint"
grep -q '"fingerprint": {' "$T/sw/config.json" || fail "resume did not record the fingerprint"
# a word model: the same check (here the vocabularies agree, the order does not)
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --epochs 2 --out "$T/w"
out_has "trained 12 steps"   # 48 train pairs (small corpus: 6 valid, 6 test), batch 8: 6 steps an epoch
run_rc 1 eval --model "$T/w" --no-progress --data "$T/rev.txt"
err_has "is not the data the model in '$T/w' was trained on"

# ---- 4. --resume with nothing left to train: says so, exit 0, writes nothing
sums "$T/w" > "$T/before"
for e in 1 2; do
  run_rc 0 train --resume --out "$T/w" --epochs $e --no-progress
  out_has "nothing to do: the checkpoint has already trained 2 epochs (--epochs $e)"
  ! grep -q "trained .* steps" "$T/out" || { cat "$T/out"; fail "--epochs $e: a training summary"; }
done
run_rc 0 train --resume --out "$T/w" --no-progress
out_has "nothing to do: the checkpoint has already trained 2 epochs (config.json's epochs 2)"
run_rc 0 train --resume --out "$T/w" --epochs 5 --max-steps 12 --no-progress
out_has "nothing to do: the checkpoint has already trained 12 steps (--max-steps 12)"
sums "$T/w" | diff - "$T/before" > /dev/null || fail "a resume with nothing to do changed the folder"
grep -q '"epochs": 2,' "$T/w/config.json" || fail "config.json epochs rewritten"

# ---- 3. --resume with other settings: the model's shape refused (exit 2), the rest ignored loudly
run_rc 2 train --resume --out "$T/w" --epochs 3 --num-hiddens 32 --num-heads 4 --no-progress
err_has "qkv: error: --resume continues the model in '$T/w'" "--num-hiddens 32 (the checkpoint's model.num_hiddens is 16)" \
        "--num-heads 4 (the checkpoint's model.num_heads is 2)" "another --out" "with --overwrite"
sums "$T/w" | diff - "$T/before" > /dev/null || fail "a refused resume changed the folder"
run_rc 2 train --resume --out "$T/w" --epochs 3 --subword bpe --no-progress
err_has "--subword bpe (the checkpoint's data.subword is none)"
# equal values pass silently; different optimisation/data settings are named and ignored
run_rc 0 train --resume --out "$T/w" --epochs 3 --num-hiddens 16 --lr 0.5 --batch-size 4 --seed 7 --dropout 0.3 \
  --max-pairs 30 --no-progress
for f in "--lr 0.5 is ignored; the checkpoint's train.lr 0.002" "--batch-size 4 is ignored; the checkpoint's train.batch_size 8" \
         "--seed 7 is ignored; the checkpoint's train.seed 0" "--dropout 0.3 is ignored; the checkpoint's model.dropout 0.1" \
         "--max-pairs 30 is ignored; the checkpoint's data.max_pairs 0"; do
  err_has "qkv train: warning: --resume: $f"
done
! grep -q -- "--num-hiddens" "$T/err" || { cat "$T/err"; fail "a warning for a flag equal to config.json's value"; }
out_has "trained 18 steps"
grep -q '"lr": 0.002' "$T/w/config.json" || fail "config.json lr changed by an ignored --lr"

# ---- 2. a bad configuration into an existing model folder: exit 2, nothing read or changed
sums "$T/w" > "$T/before"
touch -d "2020-01-01 00:00:00" "$T/w"
run_rc 2 train --preset demo --data "$T/fra.txt" --num-hiddens 32 --num-heads 3 --out "$T/w" --no-progress
err_has "qkv: error: the number of attention heads (--num-heads, 3) must divide the model width (--num-hiddens, 32)"
! grep -q "^data:" "$T/err" || fail "the data was read before the configuration was checked"
# before the data too: a missing data file is not reached
run_rc 2 train --preset demo --data "$T/none.txt" --num-hiddens 16 --num-heads 3 --out "$T/w"
err_has "must divide the model width (--num-hiddens, 16)"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --subword bpe --vocab-size 40 --tie-weights --out "$T/w"
err_has "qkv: error: --tie-weights needs one vocabulary for both languages: add --shared-vocab"
sums "$T/w" | diff - "$T/before" > /dev/null || fail "a refused configuration changed the model folder"
[ "$(stat -c %Y "$T/w")" = "$(date -d "2020-01-01 00:00:00" +%s)" ] ||
  fail "a refused configuration changed the model folder's modification time (the --out write test ran)"
run_rc 0 translate --model "$T/w" "go ."

# ---- 5. --out naming a file (or a path under one): a usage error before the data is read
touch "$T/afile"
run_rc 2 train --preset demo --data "$T/none.txt" "${small[@]}" --out "$T/afile"
err_has "qkv: error: --out '$T/afile' is an existing file, not a folder"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --out "$T/afile/run"
err_has "qkv: error: --out '$T/afile/run': '$T/afile' is a file, so the folder cannot be created"
! grep -q "^data:" "$T/err" || fail "train read the data before checking --out"
run_rc 2 nw --out "$T/afile/nw"
err_has "qkv: error: --out '$T/afile/nw': '$T/afile' is a file"
! grep -q "Nadaraya" "$T/out" || fail "nw trained before checking --out"
run_rc 2 nw --out "$T/afile"
err_has "--out '$T/afile' is an existing file"
run_rc 0 nw --out "$T/new/nested/nw" --epochs 1
[ -s "$T/new/nested/nw/fit.png" ] || fail "nw --out into new folders"
echo "cli train guards (data fingerprint, config validation, resume flags, nothing to do, --out): ok"
