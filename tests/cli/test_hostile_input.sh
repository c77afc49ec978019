#!/usr/bin/env bash
# Rough edges and bounds of issue 28, through the qkv binary:
#  1. durations under 1 s are refused like 0 (--val-every 1e-9s would validate after every step);
#  2. a global flag given both before and after the command is refused (the later silently won);
#  3. an unknown option is named in command-line order with the option it resembles (CLI11 2.1
#     printed "3 --epoch" for "--epoch 3");
#  4. a config.json edited after training (num_heads: no tensor shape changes) is reported by
#     qkv info and refused by translate; a config.json with a repeated key is refused;
#  5. a 200,000-character word given to a subword model is cut to a bounded number of characters,
#     with a warning (a 5,000,000-character one took 14 s and 1.3 GB before, 0.5 s and 43 MB now).
# Usage: test_hostile_input.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--preset demo --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6
       --no-progress --time-budget none --test-pairs 3 --valid-pairs 3 --data "$T/fra.txt")

# ---- 1
run_rc 2 train --val-every 1e-9s --out "$T/x"
err_has "--val-every: a duration under 1 s is not allowed, got '1e-9s'" "write 'none'"
run_rc 2 train --time-budget 0.5s --out "$T/x"
err_has "--time-budget: a duration under 1 s is not allowed"
# ---- 2
run_rc 2 --threads 2 info "$T/x" --threads 3
err_has "--threads is given both before and after 'info' (2, then 3): give it once"
run_rc 2 --attention math train --attention flash --out "$T/x"
err_has "--attention is given both before and after 'train' (math, then flash)"
# ---- 3
run_rc 2 train --epoch 3 --out "$T/x"
err_has "train: unexpected arguments '--epoch 3' (unknown option --epoch: did you mean --epochs?)"
run_rc 2 info "$T/x" --no-param
err_has "info: unexpected argument '--no-param' (unknown option --no-param: did you mean --no-params?); qkv info --help lists the options"
# an unknown option before the command: named once ("qkv: error: qkv: unexpected ..." before)
run_rc 2 --bogus train
err_has "qkv: error: unexpected argument '--bogus' (unknown option --bogus); qkv --help lists the options"
run_rc 2 --bogus
err_has "qkv: error: unexpected argument '--bogus' (unknown option --bogus), and no command is given; qkv --help lists the options and the commands"
# ---- 4
run_rc 0 train "${small[@]}" --max-steps 2 --out "$T/m"
run_rc 0 info "$T/m" --no-params
out_has "consistency: config.json matches the configuration stored in model.safetensors"
sed -i 's/"num_heads": 2/"num_heads": 4/' "$T/m/config.json"
run_rc 1 info "$T/m" --no-params
out_has "consistency: INCONSISTENT" "model.num_heads: 4 vs 2 (config.json vs model.safetensors)"
err_has "does not match the configuration stored in" "model.num_heads: 4 vs 2"
run_rc 1 translate --model "$T/m" "go ."
err_has "$T/m/config.json does not match" "was config.json edited after training?"
sed -i 's/"num_heads": 4/"num_heads": 2, "num_heads": 2/' "$T/m/config.json"
run_rc 1 translate --model "$T/m" "go ."
err_has "$T/m/config.json': duplicate key \"model.num_heads\""
# ---- 5
run_rc 0 train "${small[@]}" --subword bpe --vocab-size 40 --max-steps 2 --out "$T/s"
/usr/bin/python3 -c "print('a' * 200000)" > "$T/long.txt"
run_rc 0 translate --model "$T/s" --file "$T/long.txt"
err_has "line 1: word 1 has 200000 characters; the subword model encodes its first"
echo "hostile input: ok"
