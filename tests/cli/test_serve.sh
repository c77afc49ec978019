#!/usr/bin/env bash
# CLI test (run by ctest with the qkv binary as $1): qkv serve on a free loopback port (--port 0)
# with a tiny model trained here. The HTTP checks are in serve_check.py (Debian's python3,
# standard library only): translations equal to qkv translate's (LibreTranslate and /v1 shapes,
# greedy and beam, requests batched together), every error status, the API key, queue-full and
# deadline 503s, SIGHUP reload (a damaged folder refused), SIGTERM with requests in flight.
source "$(dirname "$0")/lib.sh" "$1"
six_pairs > "$T/fra.txt"
small=(--preset demo --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8
       --num-steps 6 --no-progress --threads 1)
"$QKV" train --data "$T/fra.txt" --max-steps 200 --out "$T/a" "${small[@]}" > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train a"; }
"$QKV" train --data "$T/fra.txt" --max-steps 3 --seed 7 --out "$T/b" "${small[@]}" > "$T/train.log" 2>&1 \
  || { cat "$T/train.log"; fail "qkv train b"; }
/usr/bin/python3 "$(dirname "$0")/serve_check.py" "$QKV" "$T" || fail "serve_check.py"
echo "test_serve: ok"
