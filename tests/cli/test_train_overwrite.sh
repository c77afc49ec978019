#!/usr/bin/env bash
# qkv train into a folder that already holds a model, on a tiny corpus written here:
#  1. without --resume or --overwrite: refused before the data is read (exit 2), naming the folder
#     and both ways on; the folder's files stay byte for byte; --overwrite with --resume refused;
#     a folder with files of the run files' names but no model (a user's spm.model, vocabularies,
#     metrics.jsonl, loss.png) is refused too, naming them, also through --out DIR/new/.. and for
#     lm; the refused folder keeps its modification time (the write test of --out, a file made and
#     removed, comes only once a run is accepted); --overwrite replaces them, and a replacement
#     that fails gives them back (kept checkpoints too, section 6); a folder a run left before its
#     first checkpoint (a qkv config.json, no model, no checkpoint) is trained into without a flag
#     (also lm, section 3), and --resume there, or into a model without its checkpoint or into
#     nothing, names the way that works;
#  2. --overwrite replaces the model and leaves nothing aside; a replacement that fails before its
#     first checkpoint (a stale temporary it cannot remove: a folder) gets the earlier files back,
#     byte for byte; a left-over OUT/.qkv-replaced (a killed --overwrite) is refused;
#  3. an empty existing folder, or one with other files only, is trained into without a flag; so
#     is one with a killed run's temporaries of run files only, which the run removes (also lm);
#  4. --resume refuses the other architecture's flags, as a fresh run does: bahdanau-only flags on
#     a Transformer folder and Transformer-only ones on a bahdanau folder, naming the flag and the
#     folder's architecture; nothing in the folder changes;
#  5. scripts/demo_translation.sh run twice (qkv wrapped to add the tiny data and 2 steps): the
#     second run continues the model with --resume (nothing to do: the model stays byte for byte)
#     and still translates, evaluates and draws; QKV_DEMO_OVERWRITE=1 trains a new one; a folder
#     left before the first checkpoint (config.json, no model) is trained into without a flag;
#  6. a fresh run that fails before its first checkpoint removes what it wrote and the folders it
#     made, also for --out spelt with ".." or through a link (translation and lm).
# Usage: test_train_overwrite.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
base=(--num-heads 2 --num-blks 1 --batch-size 8 --num-steps 6 --no-progress --time-budget none)
small=("${base[@]}" --num-hiddens 16 --ffn-num-hiddens 16)
wide=("${base[@]}" --num-hiddens 32 --ffn-num-hiddens 32)
files=(config.json src_vocab.txt tgt_vocab.txt model.safetensors checkpoint.safetensors metrics.jsonl)
sums() { (cd "$1" && md5sum "${files[@]}"); }
# old_mtime DIR: sets DIR's modification time to 2020; mtime_kept DIR WHAT: fails unless it still is.
old_mtime() { touch -d "2020-01-01 00:00:00" "$1"; }
mtime_kept() { [ "$(stat -c %Y "$1")" = "$(date -d "2020-01-01 00:00:00" +%s)" ] || fail "$2 changed the modification time of $1"; }

# ---- 1. a second fresh run into a model folder is refused; the model stays
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/run"
sums "$T/run" > "$T/before"
old_mtime "$T/run"
run_rc 2 train --preset demo --data "$T/fra.txt" "${wide[@]}" --max-steps 2 --out "$T/run"
err_has "qkv: error: --out '$T/run' already holds a qkv model (model.safetensors, checkpoint.safetensors, config.json)" \
        "continue its training with --resume" "replace it with --overwrite"
! grep -q "^data:" "$T/err" || fail "train read the data before refusing a model folder"
sums "$T/run" | cmp -s - "$T/before" || fail "a refused train changed the model folder"
mtime_kept "$T/run" "a refused train"
# A run stopped before its first checkpoint (killed: config.json and the files written with it, no
# model, no checkpoint) trained nothing: --resume says so and names the way that works, and a fresh
# run trains into the folder without a flag, saying so (issue 44, item 4).
mkdir "$T/cfg" && cp "$T/run/config.json" "$T/run/src_vocab.txt" "$T/run/tgt_vocab.txt" "$T/run/metrics.jsonl" "$T/cfg/"
run_rc 2 train --resume --out "$T/cfg" --data "$T/fra.txt" --no-progress
err_has "qkv: error: --resume: no checkpoint at '$T/cfg/checkpoint.safetensors': the run in '$T/cfg' was stopped before its first checkpoint, so nothing was trained to continue; train it again without --resume (qkv train --out $T/cfg ...)"
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/cfg"
err_has "qkv train: '$T/cfg' holds a run stopped before its first checkpoint (config.json, src_vocab.txt, tgt_vocab.txt, metrics.jsonl; no model, no checkpoint): training a new one in its place"
out_has "trained 2 steps"
[ -s "$T/cfg/model.safetensors" ] && [ ! -e "$T/cfg/.qkv-replaced" ] || { ls -la "$T/cfg"; fail "the stopped run's folder was not trained into"; }
[ "$(wc -l < "$T/cfg/metrics.jsonl")" = "$(wc -l < "$T/run/metrics.jsonl")" ] ||
  fail "the new run kept the stopped run's metrics.jsonl records"
# a model without its checkpoint: --resume is not offered (it cannot continue), --overwrite is
mkdir "$T/nockpt" && cp "$T/run/config.json" "$T/run/src_vocab.txt" "$T/run/tgt_vocab.txt" "$T/run/model.safetensors" "$T/nockpt/"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/nockpt"
err_has "qkv: error: --out '$T/nockpt' already holds a qkv model (model.safetensors, config.json) without a checkpoint.safetensors to continue from: replace it with --overwrite, or give another --out"
run_rc 2 train --resume --out "$T/nockpt" --data "$T/fra.txt" --no-progress
err_has "--resume: no checkpoint at '$T/nockpt/checkpoint.safetensors': '$T/nockpt' holds a model (model.safetensors) but not the checkpoint its training would continue from; train a new model with --overwrite"
# nothing there at all
run_rc 2 train --resume --out "$T/nothing" --data "$T/fra.txt" --no-progress
err_has "--resume: no checkpoint at '$T/nothing/checkpoint.safetensors': '$T/nothing' does not exist, so there is nothing to resume; train a model with: qkv train --out $T/nothing"
[ ! -e "$T/nothing" ] || fail "a refused --resume made its folder"
# a config.json of someone else's (not a qkv run's) is not taken for a stopped run: refused as before
mkdir "$T/alien" && echo '{"name": "my project"}' > "$T/alien/config.json"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/alien"
err_has "--out '$T/alien' already holds a qkv model (config.json)" "replace it with --overwrite"
[ "$(cat "$T/alien/config.json")" = '{"name": "my project"}' ] || fail "a refused train changed a foreign config.json"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/run" --overwrite --resume
err_has "qkv: error: --resume continues the model in --out and --overwrite replaces it: give one of them"
sums "$T/run" | cmp -s - "$T/before" || fail "--overwrite --resume changed the model folder"
# the model folder spelt through a folder the run would make
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/run/new/.."
err_has "qkv: error: --out '$T/run/new/..' already holds a qkv model (model.safetensors, checkpoint.safetensors, config.json)"
[ ! -e "$T/run/new" ] || fail "a refused train made $T/run/new"
sums "$T/run" | cmp -s - "$T/before" || fail "a refused train into --out $T/run/new/.. changed the model folder"
# run files without a model: refused too, naming them
mkdir "$T/mine"
for f in spm.model src_vocab.txt tgt_vocab.txt metrics.jsonl loss.png; do echo "mine: $f" > "$T/mine/$f"; done
mine_sums() { (cd "$T/mine" && ls -A && md5sum ./*); }
mine_sums > "$T/mine.before"
for out in "$T/mine" "$T/mine/" "$T/mine/new/.."; do
  run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$out"
  err_has "qkv: error: --out '$out' holds files that qkv train writes (src_vocab.txt, tgt_vocab.txt, spm.model, metrics.jsonl, loss.png) but no model" \
          "give another --out, or replace them with --overwrite (they wait in '${out%/}/.qkv-replaced' until the new run's first checkpoint"
  ! grep -q "^data:" "$T/err" || fail "train read the data before refusing --out $out"
  mine_sums | cmp -s - "$T/mine.before" || fail "a refused train into --out $out changed the user's files"
done
old_mtime "$T/mine"
run_rc 2 train --model lm --data "$T/fra.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --max-steps 1 --no-progress \
  --out "$T/mine"
err_has "qkv: error: --out '$T/mine' holds files that qkv train writes (src_vocab.txt, tgt_vocab.txt, spm.model, metrics.jsonl, loss.png) but no model"
mine_sums | cmp -s - "$T/mine.before" || fail "a refused lm train changed the user's files"
mtime_kept "$T/mine" "a refused lm train"

# ---- 2. --overwrite: a failed replacement restores the earlier files; a good one replaces them
# A temporary counts as stale (a killed write) when no live process has its pid: this shell's child
# that has exited.
dead=$(sh -c 'echo $$')
mkdir -p "$T/run/model.safetensors.tmp.$dead/x"   # fit cannot remove this "stale temporary"
run_rc 1 train --preset demo --data "$T/fra.txt" "${wide[@]}" --max-steps 2 --out "$T/run" --overwrite
err_has "cannot remove '$T/run/model.safetensors.tmp.$dead'" \
        "the new run failed before its first checkpoint; the earlier model in $T/run is restored"
sums "$T/run" | cmp -s - "$T/before" || fail "a failed --overwrite did not restore the earlier files"
[ ! -e "$T/run/.qkv-replaced" ] || fail "a failed --overwrite left .qkv-replaced"
rm -r "$T/run/model.safetensors.tmp.$dead"
mkdir "$T/run/.qkv-replaced"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/run" --overwrite
err_has "qkv: error: --overwrite: '$T/run/.qkv-replaced' holds the model an earlier qkv train --overwrite"
sums "$T/run" | cmp -s - "$T/before" || fail "a refused --overwrite changed the model folder"
rmdir "$T/run/.qkv-replaced"
# ... and so is a fresh run into a folder that holds only what a killed --overwrite left aside.
mkdir -p "$T/killed/.qkv-replaced" && echo "earlier" > "$T/killed/.qkv-replaced/model.safetensors"
run_rc 2 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/killed"
err_has "qkv: error: --out: '$T/killed/.qkv-replaced' holds the model an earlier qkv train --overwrite"
[ "$(ls -A "$T/killed")" = ".qkv-replaced" ] && [ "$(cat "$T/killed/.qkv-replaced/model.safetensors")" = earlier ] ||
  { ls -la "$T/killed"; fail "a refused fresh run changed the folder"; }
run_rc 0 train --preset demo --data "$T/fra.txt" "${wide[@]}" --max-steps 2 --out "$T/run" --overwrite
out_has "trained 2 steps"
grep -q '"num_hiddens": 32' "$T/run/config.json" || fail "--overwrite did not write the new config.json"
[ "$(cd "$T/run" && md5sum model.safetensors)" != "$(grep model.safetensors "$T/before")" ] ||
  fail "--overwrite kept the earlier model.safetensors"
[ ! -e "$T/run/.qkv-replaced" ] || fail "--overwrite left .qkv-replaced after its checkpoint"
run_rc 0 translate --model "$T/run" "go ."

# ---- 3. an empty folder, or one with other files only: no flag needed, the other files stay
mkdir "$T/empty"
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/empty"
mkdir "$T/notes" && echo "mine" > "$T/notes/notes.txt"
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/notes"
[ "$(cat "$T/notes/notes.txt")" = mine ] || fail "train touched an unrelated file in --out"
# a killed run's temporaries (a write cut short) are not the user's: trained into, and removed
mkdir "$T/stale" "$T/lmstale"
touch "$T/stale/config.json.tmp.$dead" "$T/stale/src_vocab.txt.tmp.$dead" "$T/stale/metrics.jsonl.tmp.$dead"
mkdir "$T/stale/checkpoints"  # a kept checkpoint's temporary is ours; another program's is not
touch "$T/stale/checkpoints/model-step-000000002.safetensors.tmp.$dead" "$T/stale/checkpoints/resnet50.safetensors.tmp.$dead"
run_rc 0 train --preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 2 --out "$T/stale"
[ "$(cd "$T/stale" && find . -name '*.tmp.*')" = "./checkpoints/resnet50.safetensors.tmp.$dead" ] ||
  fail "train left a killed run's temporaries or removed another program's: $(cd "$T/stale" && find . -name '*.tmp.*')"
touch "$T/lmstale/config.json.tmp.$dead" "$T/lmstale/vocab.txt.tmp.$dead" "$T/lmstale/checkpoint.safetensors.tmp.$dead"
printf 'the time machine by h g wells\n%.0s' $(seq 40) > "$T/tm.txt"
run_rc 0 train --model lm --data "$T/tm.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --batch-size 4 --num-steps 8 \
  --max-steps 1 --no-progress --out "$T/lmstale"
[ -z "$(find "$T/lmstale" -name '*.tmp.*')" ] || fail "train --model lm left a killed run's temporaries: $(ls "$T/lmstale")"
# a language model's run stopped before its first checkpoint: the same rules (--model lm named)
mkdir "$T/lmstop" && cp "$T/lmstale/config.json" "$T/lmstale/vocab.txt" "$T/lmstop/"
lmsmall=(--model lm --data "$T/tm.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --batch-size 4 --num-steps 8 --no-progress)
run_rc 2 train "${lmsmall[@]}" --resume --out "$T/lmstop"
err_has "--resume: no checkpoint at '$T/lmstop/checkpoint.safetensors': the run in '$T/lmstop' was stopped before its first checkpoint" \
        "train it again without --resume (qkv train --model lm --out $T/lmstop ...)"
run_rc 0 train "${lmsmall[@]}" --max-steps 1 --out "$T/lmstop"
err_has "qkv train: '$T/lmstop' holds a run stopped before its first checkpoint (config.json, vocab.txt; no model, no checkpoint)"
[ -s "$T/lmstop/model.safetensors" ] || fail "the lm stopped run's folder was not trained into"

# ---- 4. --resume with the other architecture's flags
sums "$T/empty" > "$T/before"
for bad in "--embed-size 8" "--num-layers 2" "--bidirectional"; do
  run_rc 2 train --resume --out "$T/empty" --data "$T/fra.txt" --max-steps 3 --no-progress $bad
  err_has "qkv: error: ${bad%% *} applies to --model bahdanau only" \
          "--resume continues the Transformer in '$T/empty' ($T/empty/config.json: model.architecture transformer)"
done
run_rc 2 train --resume --out "$T/empty" --data "$T/fra.txt" --max-steps 3 --no-progress --bidirectional --embed-size 8
err_has "applies to --model bahdanau only"
sums "$T/empty" | cmp -s - "$T/before" || fail "a refused --resume changed the Transformer folder"
run_rc 0 train --model bahdanau --preset demo --data "$T/fra.txt" --num-hiddens 16 --embed-size 8 --batch-size 8 \
  --num-steps 6 --no-progress --time-budget none --max-steps 2 --out "$T/gru"
sums "$T/gru" > "$T/before"
for bad in "--num-blks 1" "--num-heads 2" "--ffn-num-hiddens 16" "--pe-quirk" "--tie-weights"; do
  run_rc 2 train --resume --out "$T/gru" --data "$T/fra.txt" --max-steps 3 --no-progress $bad
  err_has "qkv: error: ${bad%% *} applies to the Transformer only (not --model bahdanau)" \
          "--resume continues the bahdanau model in '$T/gru' ($T/gru/config.json: model.architecture bahdanau)"
done
sums "$T/gru" | cmp -s - "$T/before" || fail "a refused --resume changed the bahdanau folder"
run_rc 0 train --resume --out "$T/gru" --data "$T/fra.txt" --max-steps 3 --no-progress
out_has "trained 3 steps"

# ---- 5. scripts/demo_translation.sh twice into one folder
demo="$(cd "$(dirname "$0")/../../scripts" && pwd)/demo_translation.sh"
cat > "$T/qkv" <<WRAP
#!/usr/bin/env bash
echo "\$*" >> "$T/calls"
if [ "\$1" = train ]; then exec "$QKV" "\$@" --data "$T/fra.txt" --max-steps 2 --no-progress; fi
exec "$QKV" "\$@"
WRAP
chmod +x "$T/qkv"
demo_run() {
  : > "$T/calls"
  bash "$demo" "$T/qkv" "$T/demo" > "$T/out" 2> "$T/err" || { cat "$T/err"; fail "demo_translation.sh: $1"; }
  grep -q "^heatmap --model $T/demo" "$T/calls" || fail "demo_translation.sh $1 did not reach the heatmap"
}
demo_run "first run"
grep -q "^train --preset demo --out $T/demo$" "$T/calls" || { cat "$T/calls"; fail "first demo run's train"; }
out_has "trained 2 steps"
sums "$T/demo" > "$T/before"
demo_run "second run"
grep -q "^train --resume --out $T/demo$" "$T/calls" || { cat "$T/calls"; fail "second demo run did not resume"; }
out_has "already holds a demo model: continuing it" "nothing to do" "corpus BLEU"
sums "$T/demo" | cmp -s - "$T/before" || fail "a second demo run changed the model"
QKV_DEMO_OVERWRITE=1 demo_run "QKV_DEMO_OVERWRITE=1"
grep -q "^train --preset demo --out $T/demo --overwrite$" "$T/calls" || { cat "$T/calls"; fail "QKV_DEMO_OVERWRITE=1"; }
out_has "trained 2 steps"
rm "$T/demo/model.safetensors" "$T/demo/checkpoint.safetensors"
demo_run "after a run stopped before its first checkpoint"
grep -q "^train --preset demo --out $T/demo$" "$T/calls" || { cat "$T/calls"; fail "config.json-only demo folder"; }
out_has "trained 2 steps"

# ---- 6. a fresh run that fails before its first checkpoint (files of at most 16 KiB: the
# checkpoint write fails after config.json, the vocabularies and metrics.jsonl were written)
# leaves nothing that would refuse the same command once the cause is fixed: a folder it created
# is gone, an existing one keeps only its own files.
# fails_fresh OUT ARGS...: `qkv train ARGS --out OUT` under RLIMIT_FSIZE 16 KiB (a write past it
# fails with EFBIG, SIGXFSZ ignored; stderr through a pipe, the limit binds it too): exit 1, the
# error names the checkpoint it could not write.
fails_fresh() {
  local out=$1 rc; shift
  set +e; (trap '' XFSZ; ulimit -f 16; exec "$QKV" train "$@" --out "$out") 2>&1 | cat > "$T/err"; rc=${PIPESTATUS[0]}; set -e
  [ "$rc" = 1 ] || { cat "$T/err"; fail "'qkv train $* --out $out' under ulimit -f 16: exit $rc, want 1"; }
  err_has "checkpoint.safetensors': writing its temporary file" "File too large"
}
fresh=(--preset demo --data "$T/fra.txt" "${small[@]}" --max-steps 1)
fails_fresh "$T/fail" "${fresh[@]}"
[ ! -e "$T/fail" ] || { ls -la "$T/fail"; fail "a fresh run that failed before its first checkpoint left its folder"; }
fails_fresh "$T/nest/a/b/" "${fresh[@]}"
[ ! -e "$T/nest" ] || { find "$T/nest"; fail "a failed fresh run into a new nested folder left the parents it created"; }
mkdir -p "$T/nest1/keep"
fails_fresh "$T/nest1/a/b" "${fresh[@]}"
[ "$(cd "$T/nest1" && find . | sort | tr '\n' ' ')" = ". ./keep " ] || { find "$T/nest1"; fail "a failed fresh run removed or left folders it did not create"; }
# --out spelt through a folder it makes and back out, or through a link to a folder elsewhere: the
# folders the run made are found as the OS resolved the path (all removed), pre-existing ones stay
mkdir -p "$T/dots/keep"
fails_fresh "$T/dots/new/.." "${fresh[@]}"
fails_fresh "$T/dots/new/../other" "${fresh[@]}"
fails_fresh "$T/dots/keep/../new/../made/x" "${fresh[@]}"
[ "$(cd "$T/dots" && find . | sort | tr '\n' ' ')" = ". ./keep " ] ||
  { find "$T/dots"; fail "a failed fresh run into --out DIR/new/.., DIR/new/../other or DIR/keep/../new/../made/x left folders it made or removed one it did not"; }
mkdir -p "$T/links/elsewhere/target" "$T/links/here/x"  # here/x: the lexical reading of here/L/../x
ln -s ../elsewhere/target "$T/links/here/L"
fails_fresh "$T/links/here/L/../x" "${fresh[@]}"
err_has "$T/links/here/L/../x/checkpoint.safetensors"
[ "$(cd "$T/links" && find . | sort | tr '\n' ' ')" = ". ./elsewhere ./elsewhere/target ./here ./here/L ./here/x " ] ||
  { find "$T/links"; fail "a failed fresh run into --out L/../x (L a link to elsewhere/target) left elsewhere/x or removed a folder it did not make"; }
# --overwrite of run files without a model (section 1): a replacement that fails gives them back
fails_fresh "$T/mine/new/.." "${fresh[@]}" --overwrite
err_has "the earlier model in $T/mine/new/.. is restored"
mine_sums | cmp -s - "$T/mine.before" || { ls -la "$T/mine"; fail "a failed --overwrite did not give the user's run files back"; }
run_rc 0 train "${fresh[@]}" --out "$T/mine" --overwrite
out_has "trained 1 step"
[ ! -e "$T/mine/spm.model" ] && [ ! -e "$T/mine/.qkv-replaced" ] || { ls -la "$T/mine"; fail "--overwrite kept a file it replaced"; }
run_rc 0 translate --model "$T/mine" "go ."
# kept checkpoints (--keep-checkpoints) are run files too: a failed --overwrite gives them back;
# without a model they are refused like the other run files (a new run would remove them)
run_rc 0 train "${fresh[@]}" --keep-checkpoints 2 --out "$T/kept"
kept_sums() { (cd "$T/kept" && find . | sort && find . -type f | sort | xargs md5sum); }
kept_sums > "$T/kept.before"
grep -q "checkpoints/model-step-" "$T/kept.before" || { cat "$T/kept.before"; fail "--keep-checkpoints 2 kept none"; }
fails_fresh "$T/kept" "${fresh[@]}" --overwrite
err_has "the earlier model in $T/kept is restored"
kept_sums | cmp -s - "$T/kept.before" || { find "$T/kept"; fail "a failed --overwrite did not give the kept checkpoints back"; }
find "$T/kept" -maxdepth 1 -type f -delete
kept_sums > "$T/kept.before"
run_rc 2 train "${fresh[@]}" --out "$T/kept"
err_has "qkv: error: --out '$T/kept' holds files that qkv train writes (1 kept checkpoint in checkpoints/) but no model"
kept_sums | cmp -s - "$T/kept.before" || { find "$T/kept"; fail "a refused train changed the kept checkpoints"; }
mkdir "$T/fail2" && echo keep > "$T/fail2/notes.txt"
fails_fresh "$T/fail2" "${fresh[@]}"
[ "$(ls -A "$T/fail2")" = notes.txt ] || { ls -la "$T/fail2"; fail "a failed fresh run left files in an existing folder"; }
run_rc 0 train "${fresh[@]}" --out "$T/fail2"
out_has "trained 1 step"
lm=(--model lm --data "$T/tm.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --batch-size 4 --num-steps 8 --max-steps 1
    --no-progress)
fails_fresh "$T/lmfail" "${lm[@]}"
[ ! -e "$T/lmfail" ] || { ls -la "$T/lmfail"; fail "a fresh lm run that failed before its first checkpoint left its folder"; }
fails_fresh "$T/lmnest/x/y" "${lm[@]}"
[ ! -e "$T/lmnest" ] || { find "$T/lmnest"; fail "a failed fresh lm run into a new nested folder left the parents it created"; }
echo "cli train into a model folder (refusal, --overwrite, resume architecture flags, demo rerun, failed fresh run): ok"
