#!/usr/bin/env bash
# CLI end to end for --model bahdanau on a tiny corpus written here: train (2 steps), translate
# (greedy and beam, batched), eval, info, heatmap (one panel + printed weights), resume, and
# --pe-quirk refused for this architecture, and train refusing the Transformer's flags for it (and
# its own flags for the Transformer).
# Usage: test_bahdanau.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"

small=(--model bahdanau --num-hiddens 16 --embed-size 8 --num-layers 2 --batch-size 8 --num-steps 6 --no-progress)
"$QKV" train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/run" "${small[@]}" > "$T/train.out" 2> "$T/train.err" \
  || { cat "$T/train.err"; fail "qkv train --model bahdanau"; }
grep -q "model: Bahdanau" "$T/train.err" || { cat "$T/train.err"; fail "model line"; }
grep -q "trained 2 steps" "$T/train.out" || { cat "$T/train.out"; fail "train summary"; }
grep -q '"architecture": *"bahdanau"' "$T/run/config.json" || fail "config.json architecture"
grep -q '"embed_size": *8' "$T/run/config.json" || fail "config.json embed_size"

n=$("$QKV" translate --model "$T/run" "i lost ." "go ." | wc -l)
[ "$n" = 2 ] || fail "translate args gave $n lines"
n=$(printf 'go .\ni lost .\nwe won .\n' | "$QKV" translate --model "$T/run" --beam 3 | wc -l)
[ "$n" = 3 ] || fail "translate --beam 3 gave $n lines"
"$QKV" eval --model "$T/run" --no-progress > "$T/eval.out" || fail "qkv eval"
grep -q "corpus BLEU-4" "$T/eval.out" || fail "eval output"
# Captured, then searched: `qkv info | grep -q` under pipefail fails when grep exits at its first
# match while qkv info is still writing (SIGPIPE), as a slow (sanitizer) build does.
"$QKV" info "$T/run" > "$T/info.out" || fail "qkv info"
grep -q "decoder.attention.W_k.weight" "$T/info.out" || fail "qkv info output"
"$QKV" heatmap --model "$T/run" "i'm home ." --out "$T/att" > "$T/heat.out" || fail "qkv heatmap"
[ -s "$T/att-cross.png" ] || fail "missing att-cross.png"
grep -q "attention weights" "$T/heat.out" || fail "heatmap weights not printed"
# Additive attention has no flash path, so forcing the dot-product backend does not concern it
# (a Transformer's heatmap refuses it: tests/cli/test_usage_checks.sh).
"$QKV" --attention flash heatmap --model "$T/run" "i'm home ." --out "$T/attf" > "$T/heatf.out" \
  || fail "heatmap of a Bahdanau model refused --attention flash"
cmp -s "$T/heat.out" <(sed "s#$T/attf#$T/att#g" "$T/heatf.out") || fail "heatmap output changed with --attention flash"
QKV_ATTENTION=flash "$QKV" heatmap --model "$T/run" "i'm home ." --out "$T/attf" > /dev/null \
  || fail "heatmap of a Bahdanau model refused QKV_ATTENTION=flash"
if "$QKV" translate --model "$T/run" --pe-quirk "go ." > /dev/null 2> "$T/quirk.err"; then fail "--pe-quirk accepted"; fi
grep -q "Transformer only" "$T/quirk.err" || fail "--pe-quirk message"
# train: the other architecture's flags are usage errors before --out is touched (they were
# ignored without a word: --num-heads 3 was never checked against the width)
for bad in "--num-heads 3" "--num-blks 5" "--ffn-num-hiddens 32" "--pe-quirk"; do
  rc=0; "$QKV" train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/other" "${small[@]}" $bad \
    > /dev/null 2> "$T/other.err" || rc=$?
  [ "$rc" = 2 ] || { cat "$T/other.err"; fail "train --model bahdanau $bad: exit $rc, want 2"; }
  grep -q -- "qkv: error: ${bad%% *} applies to the Transformer only (not --model bahdanau)" "$T/other.err" \
    || { cat "$T/other.err"; fail "train --model bahdanau $bad: message"; }
done
for bad in "--embed-size 8" "--num-layers 2"; do
  rc=0; "$QKV" train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/other" --num-hiddens 16 --no-progress $bad \
    > /dev/null 2> "$T/other.err" || rc=$?
  [ "$rc" = 2 ] || { cat "$T/other.err"; fail "train (Transformer) $bad: exit $rc, want 2"; }
  grep -q -- "qkv: error: ${bad%% *} applies to --model bahdanau only" "$T/other.err" \
    || { cat "$T/other.err"; fail "train (Transformer) $bad: message"; }
done
[ ! -e "$T/other" ] || fail "a refused train created --out"

"$QKV" train --resume --out "$T/run" --data "$T/fra.txt" --max-steps 3 --no-progress > "$T/resume.out" 2> "$T/resume.err" \
  || { cat "$T/resume.err"; fail "resume"; }
grep -q "trained 3 steps" "$T/resume.out" || { cat "$T/resume.out"; fail "resume step count"; }
echo "ok"
