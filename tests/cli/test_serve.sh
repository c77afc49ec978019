#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): qkv serve on a free loopback port (--port 0)
# with a tiny model trained here. The HTTP checks are in serve_check.py (Debian's python3,
# standard library only): translations equal to qkv translate's (LibreTranslate and /v1 shapes,
# greedy and beam, requests batched together), the model's own languages (a fr→en model and one
# recording none: /languages, the checks, the page), every error status, the API key, queue-full and
# deadline 503s, SIGHUP reload (a damaged folder refused), SIGTERM with requests in flight.
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--preset demo --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8
       --num-steps 6 --no-progress --threads 1)
"$QKV" train --data "$T/fra.txt" --max-steps 200 --out "$T/a" "${small[@]}" > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train a"; }
"$QKV" train --data "$T/fra.txt" --max-steps 3 --seed 7 --out "$T/b" "${small[@]}" > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train b"; }
# c: French→English (fra-eng's columns swapped, languages recorded) and u: the same corpus with no
# languages recorded; the server must take both pairs from config.json, not assume en→fr.
six_pairs | awk -F'\t' '{ print $2 "\t" $1 }' > "$T/fr-en.tsv"
"$QKV" train --data "$T/fr-en.tsv" --src-lang fr --tgt-lang en --subword none --max-steps 3 --out "$T/c" "${small[@]}" \
  > "$T/train.log" 2>&1 || { cat "$T/train.log"; fail "qkv train c"; }
"$QKV" train --data "$T/fr-en.tsv" --subword none --max-steps 3 --out "$T/u" "${small[@]}" \
  > "$T/train.log" 2>&1 || { cat "$T/train.log"; fail "qkv train u"; }
# g: a Bahdanau (GRU) model, whose page must not ask for attention weights
"$QKV" train --data "$T/fra.txt" --model bahdanau --max-steps 3 --out "$T/g" --preset demo --num-hiddens 16 \
  --batch-size 8 --num-steps 6 --no-progress --threads 1 > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train g"; }
# --port-file that cannot be written, or one of the model's files: a usage error before the model
# loads and before listening (was: "terminate called without an active exception", exit 134, or
# the model overwritten by the port number).
run_rc 2 serve --model "$T/a" --port 0 --port-file "$T/nonexist/p" --threads 1
err_has "--port-file" "the folder '$T/nonexist' does not exist"
run_rc 2 serve --model "$T/a" --port 0 --port-file "$T" --threads 1
err_has "--port-file" "is a folder"
cp "$T/a/model.safetensors" "$T/model.before"
run_rc 2 serve --model "$T/a" --port 0 --port-file "$T/a/model.safetensors" --threads 1
err_has "--port-file" "is the model folder's own model.safetensors"
cmp -s "$T/model.before" "$T/a/model.safetensors" || fail "--port-file overwrote the model"
# a FIFO: with no reader it would wait in open() where SIGTERM cannot end it: refused; with a reader
# it gets the port
mkfifo "$T/port.fifo"
run_rc 2 serve --model "$T/a" --port 0 --port-file "$T/port.fifo" --threads 1
err_has "qkv: error: --port-file '$T/port.fifo' is a FIFO that no process reads: start its reader first"
exec 7<> "$T/port.fifo"  # a reader (read-write, so opening does not wait)
"$QKV" serve --model "$T/a" --port 0 --port-file "$T/port.fifo" --threads 1 2> "$T/fifo.err" &
pid=$!
read -r -t 60 port <&7 || { cat "$T/fifo.err"; fail "no port from the FIFO"; }
exec 7<&-
[ -p "$T/port.fifo" ] || fail "--port-file replaced the FIFO"
for _ in $(seq 1 600); do grep -q "qkv serve: ready" "$T/fifo.err" && break; sleep 0.1; done
kill -TERM $pid && wait $pid || fail "serve with a FIFO --port-file: exit $?"
grep -q "listening on http://127.0.0.1:$port " "$T/fifo.err" || { cat "$T/fifo.err"; fail "the FIFO's port $port is not the one listened on"; }
/usr/bin/python3 "$(dirname "$0")/serve_check.py" "$QKV" "$T" || fail "serve_check.py"
echo "test_serve: ok"
