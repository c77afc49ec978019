#!/usr/bin/env bash
# The default model folder (issue 44, item 3), run from a temporary current folder:
#  1. without a model there, translate, eval, heatmap, info and serve each name the folder they
#     looked in (absolute) and how to make a model (exit 1);
#  2. qkv train without --out writes runs/qkv, and translate, eval, heatmap, info and serve read it
#     without --model;
#  3. scripts/demo_translation.sh (qkv wrapped to add the tiny data and 2 steps) trains into
#     runs/qkv by default, and the commands its last lines print work as printed, from that folder;
#     a runs/qkv that holds a model of another preset is left alone (the demo uses out/translation).
# Usage: test_default_model.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
demo="$(cd "$(dirname "$0")/../../scripts" && pwd)/demo_translation.sh"
six_pairs > "$T/fra.txt"
small=(--data "$T/fra.txt" --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16
       --batch-size 8 --num-steps 6 --no-progress --threads 1)
mkdir "$T/cwd"
cd "$T/cwd"

# ---- 1. no model in the default folder
looked="no model folder 'runs/qkv' (looked in $T/cwd/runs/qkv): train one with: qkv train --out runs/qkv (make demo trains one into runs/qkv"
run_rc 1 translate "go ."; err_has "$looked"
run_rc 1 eval;             err_has "$looked"
run_rc 1 heatmap "go .";   err_has "$looked"
run_rc 1 info;             err_has "$looked"
run_rc 1 serve --port 0;   err_has "$looked"

# ---- 2. train's default --out is the folder the others read
run_rc 0 train --preset demo "${small[@]}" --max-steps 2
[ -s runs/qkv/model.safetensors ] || { ls -R; fail "qkv train without --out did not write runs/qkv"; }
out_has "model folder: runs/qkv"
run_rc 0 translate "go ." "i lost ."
[ "$(wc -l < "$T/out")" = 2 ] || { cat "$T/out"; fail "translate without --model"; }
run_rc 0 eval --no-progress;         out_has "corpus BLEU-4"
run_rc 0 heatmap "go ." --out "$T/att"; [ -s "$T/att-cross.png" ] || fail "heatmap without --model"
run_rc 0 info --no-params;           out_has "check: the folder loads"
mkfifo "$T/port.fifo"
exec 7<> "$T/port.fifo"  # a reader (read-write, so opening does not wait)
"$QKV" serve --port 0 --port-file "$T/port.fifo" --threads 1 2> "$T/serve.err" &
pid=$!
read -r -t 120 port <&7 || { cat "$T/serve.err"; kill $pid; fail "serve without --model: no port"; }
exec 7<&-
kill -TERM $pid && wait $pid || fail "serve without --model: exit $?"
grep -q "listening on http://127.0.0.1:$port " "$T/serve.err" || { cat "$T/serve.err"; fail "serve without --model"; }

# ---- 3. the demo's model folder and its last lines
cat > "$T/qkv" <<WRAP
#!/usr/bin/env bash
if [ "\$1" = train ]; then exec "$QKV" "\$@" --data "$T/fra.txt" --max-steps 2 --no-progress --num-hiddens 16 \
  --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6; fi
exec "$QKV" "\$@"
WRAP
chmod +x "$T/qkv"
mkdir "$T/demo" && cd "$T/demo"
bash "$demo" "$T/qkv" > "$T/demo.out" 2> "$T/demo.err" || { cat "$T/demo.err"; fail "demo_translation.sh"; }
[ -s runs/qkv/model.safetensors ] || { cat "$T/demo.out"; fail "the demo did not train into runs/qkv"; }
grep -q "^next, from $T/demo:$" "$T/demo.out" || { cat "$T/demo.out"; fail "the demo's last lines do not say what to run next"; }
# the printed commands, as printed (serve waits for requests: checked by name only)
sed -n '/^next, from /,$p' "$T/demo.out" | tail -n +2 > "$T/next"
grep -q "^  $T/qkv translate \"go .\"" "$T/next" && grep -q "^  $T/qkv serve " "$T/next" ||
  { cat "$T/next"; fail "the next commands: translate and serve without --model"; }
grep -v " serve " "$T/next" > "$T/next.sh"
[ "$(wc -l < "$T/next.sh")" = 3 ] || { cat "$T/next"; fail "want translate, eval, heatmap and serve"; }
bash -e "$T/next.sh" > "$T/next.out" 2> "$T/next.err" || { cat "$T/next.sh" "$T/next.err"; fail "a printed command failed"; }
[ "$(grep -c "corpus BLEU-4" "$T/next.out")" = 1 ] || { cat "$T/next.out"; fail "the printed eval"; }
ls attention-*.png > /dev/null 2>&1 || fail "the printed heatmap wrote no attention-*.png here"
# a runs/qkv model of another preset (the user's own) stays; the demo goes to out/translation
mkdir "$T/mine" && cd "$T/mine"
run_rc 0 train --preset anchor "${small[@]}" --max-steps 1
sums() { md5sum runs/qkv/model.safetensors runs/qkv/config.json; }
sums > "$T/mine.sums"
bash "$demo" "$T/qkv" > "$T/demo.out" 2> "$T/demo.err" || { cat "$T/demo.err"; fail "demo_translation.sh beside a user's model"; }
grep -q "runs/qkv holds a model of another preset (anchor): the demo leaves it and trains into out/translation" \
  "$T/demo.out" || { cat "$T/demo.out"; fail "the demo did not say where it trained"; }
sums | cmp -s - "$T/mine.sums" || fail "the demo changed the user's runs/qkv"
[ -s out/translation/model.safetensors ] || fail "the demo did not train into out/translation"
grep -q "^  $T/qkv translate --model out/translation \"go .\"" "$T/demo.out" ||
  { cat "$T/demo.out"; fail "the next commands must name --model out/translation"; }
echo "cli default model folder (runs/qkv for train, translate, eval, heatmap, info, serve; demo's next steps): ok"
