#!/usr/bin/env bash
# qkv average: two folders trained with different seeds average into a new folder that loads
# (qkv info's checks) and translates; a folder averaged with its copy translates as it does; a
# folder of another architecture, an existing non-empty output, a missing input and a missing
# --out are refused, and nothing is written then.
# Usage: test_average.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"
small=(--num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
for s in 1 2; do
  "$QKV" train --data "$T/fra.txt" --preset demo --max-steps 2 --seed $s --out "$T/s$s" --num-hiddens 16 "${small[@]}" > /dev/null 2> "$T/train.err" \
    || { cat "$T/train.err"; fail "qkv train --seed $s"; }
done

run_rc 0 average --out "$T/avg" "$T/s1" "$T/s2"
err_has "averaged 2 model folders" "into $T/avg"
run_rc 0 info "$T/avg"
out_has "check: the folder loads" "consistency: config.json matches"
run_rc 0 translate --model "$T/avg" "i lost ." "go ."
[ "$(wc -l < "$T/out")" = 2 ] || fail "translate with the averaged model"
cmp -s "$T/s1/model.safetensors" "$T/avg/model.safetensors" && fail "the average equals one of its inputs"

# An output named with a trailing slash is the folder itself.
run_rc 0 average --out "$T/slash/" "$T/s1" "$T/s2"
cmp -s "$T/avg/model.safetensors" "$T/slash/model.safetensors" || fail "--out DIR/ gave another model"

# An --out that links to an empty folder fills that folder (the link stays); a link to nothing is
# refused before any work (it failed after averaging with "cannot rename ...: Not a directory").
mkdir "$T/linked" && ln -s linked "$T/linkout"
run_rc 0 average --out "$T/linkout" "$T/s1" "$T/s2"
[ -L "$T/linkout" ] && cmp -s "$T/avg/model.safetensors" "$T/linked/model.safetensors" || fail "--out through a link"
ln -s "$T/nowhere" "$T/dangling"
run_rc 1 average --out "$T/dangling" "$T/s1" "$T/s2"
err_has "average: the output folder '$T/dangling' is a symbolic link to '$T/nowhere', which is not a folder"
[ -L "$T/dangling" ] && [ ! -e "$T/nowhere" ] || fail "a refused average changed the dangling link"
[ -z "$(find "$T" -maxdepth 1 -name '*.tmp.*')" ] || fail "temporaries left: $(find "$T" -maxdepth 1 -name '*.tmp.*')"

# The average of a folder with its copy translates exactly as the folder does; the folder given
# twice, or an output inside an input, is refused.
run_rc 1 average --out "$T/twice" "$T/s1" "$T/s2" "$T/../$(basename "$T")/s1"
err_has "is the folder '$T/s1' again (arguments 1 and 3)"
run_rc 1 average --out "$T/s1/checkpoints/avg" "$T/s1" "$T/s2"
err_has "the output folder '$T/s1/checkpoints/avg' is inside the input folder '$T/s1'"
[ -e "$T/twice" ] || [ -e "$T/s1/checkpoints/avg" ] && fail "a refused average left a folder"
cp -r "$T/s1" "$T/s1copy"
run_rc 0 average --out "$T/same" "$T/s1" "$T/s1copy"
"$QKV" translate --model "$T/s1" --beam 2 "i lost ." "he's calm ." "we won ." > "$T/a.txt" || fail "translate s1"
"$QKV" translate --model "$T/same" --beam 2 "i lost ." "he's calm ." "we won ." > "$T/b.txt" || fail "translate same"
cmp -s "$T/a.txt" "$T/b.txt" || fail "self-average translates differently"
run_rc 0 average --out "$T/single" "$T/s1"
err_has "averaged 1 model folder (" "into $T/single"

# Refusals, before anything is written.
"$QKV" train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/wide" --num-hiddens 24 "${small[@]}" > /dev/null 2>&1 \
  || fail "qkv train (wide)"
run_rc 1 average --out "$T/bad" "$T/s1" "$T/wide"
err_has "cannot average '$T/wide' with '$T/s1': different architecture"
[ -e "$T/bad" ] && fail "a refused average left $T/bad"
run_rc 1 average --out "$T/avg" "$T/s1" "$T/s2"
err_has "'$T/avg' exists and is not empty"
run_rc 1 average --out "$T/bad" "$T/s1" "$T/nope"
err_has "$T/nope"
# an --out that cannot be made is a usage error naming --out (not a library message about a
# temporary folder)
run_rc 2 average --out "$T/a.txt/avg" "$T/s1" "$T/s2"
err_has "--out '$T/a.txt/avg'" "is a file, so the folder cannot be created"
run_rc 2 average "$T/s1" "$T/s2"
err_has "--out"
ls "$T" | grep -q '\.tmp\.' && fail "a temporary folder was left"
echo "test_average: ok"
