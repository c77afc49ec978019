#!/usr/bin/env bash
# CLI end to end for `train --model bahdanau --bidirectional` on a tiny corpus written here: it
# trains, config.json says model.bidirectional true, the checkpoint and model hold the reverse
# direction's GRU weights (PyTorch's names), and translate, heatmap, info and --resume work with
# it; --resume refuses turning the flag on for a unidirectional model; the flag is refused with
# the Transformer and with an odd --num-hiddens (exit 2, nothing written); a config.json without
# the key (older folders) loads as unidirectional. The bahdanau demo preset is bidirectional
# unless --no-bidirectional is given.
# Usage: test_bahdanau_bidirectional.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"
small=(--model bahdanau --num-hiddens 16 --embed-size 8 --num-layers 2 --batch-size 8 --num-steps 6 --no-progress)

run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/bi" "${small[@]}" --bidirectional
err_has "bidirectional encoder"
out_has "trained 2 steps"
grep -q '"bidirectional": *true' "$T/bi/config.json" || { cat "$T/bi/config.json"; fail "config.json model.bidirectional"; }
# the reverse direction's weights, PyTorch's names, in both the checkpoint and the final model
for f in checkpoint.safetensors model.safetensors; do
  run_rc 0 info "$T/bi/$f"
  out_has "encoder.rnn.weight_ih_l0_reverse" "encoder.rnn.weight_hh_l1_reverse"
done
run_rc 0 info "$T/bi"
out_has '"bidirectional": true' "encoder.rnn.weight_ih_l1_reverse" "the folder loads"

run_rc 0 translate --model "$T/bi" "i lost ." "go ."
[ "$(wc -l < "$T/out")" = 2 ] || fail "translate gave $(wc -l < "$T/out") lines"
run_rc 0 translate --model "$T/bi" --beam 3 "we won ."
run_rc 0 heatmap --model "$T/bi" "i'm home ." --out "$T/att"
[ -s "$T/att-cross.png" ] || fail "missing att-cross.png"
out_has "attention weights"

run_rc 0 train --resume --out "$T/bi" --data "$T/fra.txt" --max-steps 3 --no-progress
out_has "trained 3 steps"
err_has "bidirectional encoder"
grep -q '"bidirectional": *true' "$T/bi/config.json" || fail "resume lost model.bidirectional"
# giving the flag again on resume agrees with config.json: accepted without a warning
run_rc 0 train --resume --out "$T/bi" --data "$T/fra.txt" --max-steps 4 --no-progress --bidirectional
if grep -q "warning" "$T/err"; then cat "$T/err"; fail "resume --bidirectional warned"; fi

# --bidirectional with the Transformer, and with an odd width: usage errors before --out exists
run_rc 2 train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/other" --num-hiddens 16 --no-progress --bidirectional
err_has "qkv: error: --bidirectional applies to --model bahdanau only"
run_rc 2 train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/other" --model bahdanau --num-hiddens 15 --embed-size 8 --no-progress --bidirectional
err_has "qkv: error:" "model.num_hiddens' is 15" "even"
[ ! -e "$T/other" ] || fail "a refused train created --out"

run_rc 2 train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/other" --num-hiddens 16 --no-progress --no-bidirectional
err_has "qkv: error: --no-bidirectional applies to --model bahdanau only"
# --no-bidirectional on resume of a bidirectional model: refused (it would change the model)
run_rc 2 train --resume --out "$T/bi" --data "$T/fra.txt" --max-steps 5 --no-progress --no-bidirectional
err_has "--no-bidirectional" "model.bidirectional is true"

# The bahdanau demo preset is bidirectional without the flag; the d2l preset is not.
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 1 --out "$T/demo" "${small[@]}"
err_has "bidirectional encoder"
grep -q '"bidirectional": *true' "$T/demo/config.json" || fail "the bahdanau demo preset is not bidirectional"

# A unidirectional model (--no-bidirectional): config.json says false; --resume refuses turning
# the flag on.
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/uni" "${small[@]}" --no-bidirectional
if grep -q "bidirectional encoder" "$T/err"; then cat "$T/err"; fail "--no-bidirectional built a bidirectional encoder"; fi
grep -q '"bidirectional": *false' "$T/uni/config.json" || fail "config.json of a unidirectional model"
run_rc 2 train --resume --out "$T/uni" --data "$T/fra.txt" --max-steps 3 --no-progress --bidirectional
err_has "--bidirectional" "model.bidirectional is false"
# A config.json from before the key: loads as unidirectional (translate, info, resume).
grep -v '"bidirectional"' "$T/uni/config.json" > "$T/cfg" && mv "$T/cfg" "$T/uni/config.json"
if grep -q bidirectional "$T/uni/config.json"; then fail "key not removed"; fi
run_rc 0 translate --model "$T/uni" "go ."
run_rc 0 info "$T/uni"
out_has '"bidirectional": false' "the folder loads"
if grep -q "_reverse" "$T/out"; then fail "a unidirectional model lists reverse weights"; fi
run_rc 0 train --resume --out "$T/uni" --data "$T/fra.txt" --max-steps 3 --no-progress
out_has "trained 3 steps"
echo "ok"
