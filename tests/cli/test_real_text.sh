#!/usr/bin/env bash
# CLI test of the real-text translator (issue 45) on a tiny corpus of cased sentences: --preset
# real trains on raw text (pipeline "text", a source-disjoint split, a SentencePiece model with byte
# fallback, batches by tokens); qkv translate reads raw text and writes natural text (no piece
# marks, no <unk>, even for a character never seen), cuts a line into sentences and translates each
# as it would alone (--no-split keeps the line whole); qkv serve's LibreTranslate answer is qkv
# translate's line; qkv eval prints sacreBLEU's signature; bad lines get an error and an empty line.
# Usage: test_real_text.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

# 240 distinct sources ("Tom has 3 books.") and one source with three translations ("Go.")
python3 - "$T/corpus.tsv" <<'PY'
import random, sys
random.seed(1)
objects = {"apples": "pommes", "books": "livres", "cats": "chats", "dogs": "chiens"}
lines = []
for i in range(1, 61):
    for n in ["Tom", "Mary", "John", "Alice"]:
        en, fr = random.choice(sorted(objects.items()))
        lines.append(f"{n} has {i} {en}.\t{n} a {i} {fr}.")
lines += ["Go.\tVa !", "Go.\tBouge !", "Go.\tEn route !", "Hello!\tBonjour !"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

small=(--data "$T/corpus.tsv" --num-steps 24 --num-hiddens 32 --num-heads 2 --num-blks 1 --ffn-num-hiddens 64
       --batch-tokens 120 --max-steps 600 --warmup 30 --lr 3e-3 --time-budget none --val-every none --threads 1
       --no-progress)
"$QKV" train --preset real "${small[@]}" --out "$T/run" > "$T/train.out" 2> "$T/train.err" \
  || { cat "$T/train.err"; fail "qkv train --preset real"; }
grep -q '"pipeline": "text"' "$T/run/config.json" || fail "config.json: pipeline text"
grep -q '"batch_tokens": 120' "$T/run/config.json" || fail "config.json: batch_tokens"
grep -q "source-disjoint split" "$T/train.err" || { cat "$T/train.err"; fail "no source-disjoint split line"; }
grep -q "byte fallback" "$T/train.err" || fail "no byte-fallback vocabulary line"
grep -q "batches of ~120 tokens" "$T/train.err" || fail "no token batching line"
[ -s "$T/run/spm.model" ] || fail "missing spm.model"
# "Go." has three translations: drawn as a held-out source, its other two are counted as unused,
# else all three train; either way no held-out source is in the train split (train+valid+test+unused=all)
python3 - "$T/run/config.json" <<'PY' || fail "config.json data.applied counts"
import json, sys
a = json.load(open(sys.argv[1]))["data"]["applied"]
s, d, c = a["split"], a["dropped"], a["concatenated_train_pairs"]
assert s["train"] - c + s["valid"] + s["test"] + d["held_out_other_translations"] + d["over_length_cap"] == a["pairs_read"] == 244, a
assert 0 < c <= round(0.075 * (s["train"] - c)) + 1, a  # the preset's concatenated pairs (data.concat_fraction)
assert s["valid"] == 24 and s["test"] == 24, s  # 10 % of the pairs each (small corpus)
PY

# flags of the D2L pipelines are usage errors naming the flag, before the data is read
run_rc 2 train --preset real --data "$T/corpus.tsv" --max-src-tokens 5 --out "$T/x"
err_has "--max-src-tokens applies to D2L words" "--num-steps"
run_rc 2 train --preset real --data "$T/corpus.tsv" --batch-size 32 --out "$T/x"
err_has "--batch-size 32: this preset batches by tokens (--batch-tokens 2000); add --batch-tokens 0"

# natural text: cased, no piece marks, no <unk> even for characters never seen (byte fallback)
run_rc 0 translate --model "$T/run" --threads 1 "Tom has 3 books." "Mary has 🍎 cats ✓."
[ "$(wc -l < "$T/out")" = 2 ] || fail "two lines wanted: $(cat "$T/out")"
if grep -q $'\xe2\x96\x81' "$T/out"; then fail "piece marks in the output: $(cat "$T/out")"; fi
if grep -q "<unk>" "$T/out"; then fail "<unk> in the output: $(cat "$T/out")"; fi
grep -q "^Tom a 3" "$T/out" || fail "'Tom has 3 books.' gave '$(head -n 1 "$T/out")'"

# a line of two sentences is two translations in the line's layout
"$QKV" translate --model "$T/run" --threads 1 "Tom has 3 books." > "$T/a" 2> /dev/null
"$QKV" translate --model "$T/run" --threads 1 "Alice has 12 dogs!" > "$T/b" 2> /dev/null
"$QKV" translate --model "$T/run" --threads 1 "Tom has 3 books.  Alice has 12 dogs!" > "$T/ab" 2> /dev/null
[ "$(cat "$T/ab")" = "$(cat "$T/a")  $(cat "$T/b")" ] || fail "split: '$(cat "$T/ab")' is not '$(cat "$T/a")  $(cat "$T/b")'"
"$QKV" translate --model "$T/run" --threads 1 --no-split "Tom has 3 books.  Alice has 12 dogs!" > "$T/whole" 2> /dev/null
[ "$(wc -l < "$T/whole")" = 1 ] || fail "--no-split: one line wanted"
# scores and n-best lists join the sentences' hypotheses (the best is the plain line)
run_rc 0 translate --model "$T/run" --threads 1 --scores "Tom has 3 books.  Alice has 12 dogs!"
[ "$(cut -d'|' -f4 "$T/out" | sed 's/^ //; s/ $//')" = "$(cat "$T/ab")" ] || fail "--scores: '$(cat "$T/out")'"
run_rc 0 translate --model "$T/run" --threads 1 --beam 2 --num-hypotheses 2 "Tom has 3 books.  Alice has 12 dogs!"
[ "$(wc -l < "$T/out")" = 2 ] || fail "n-best: two lines wanted: $(cat "$T/out")"
# a sentence over the 23 pieces the model reads is cut between words, not truncated (runtime::split_text);
# --no-split keeps it whole and says what is dropped
long="Tom has 3 books, Mary has 5 cats, John has 7 dogs, Alice has 9 apples, Tom has 11 books and Mary has 13 cats."
run_rc 0 translate --model "$T/run" --threads 1 "$long"
if grep -q "positions" "$T/err"; then fail "a long sentence was truncated: $(cat "$T/err")"; fi
err_has "sentence 1 is over the 23 source pieces the model reads: translated in 2 parts, cut between words"
cp "$T/out" "$T/long"
run_rc 0 translate --model "$T/run" --threads 1 --no-split "$long"
err_has "the model reads 24 positions"
# alignments read one line as one sentence: said on stderr
run_rc 0 translate --model "$T/run" --threads 1 --alignments "Tom has 3 books.  Alice has 12 dogs!"
err_has "warning: sentence 1 holds 2 sentences; --alignments translates it as one"
# a line that is not UTF-8 gets an error and an empty line; the others are translated
printf 'Tom has 3 books.\n\xff\xfe bad\nAlice has 12 dogs!\n' > "$T/in.txt"
run_rc 1 translate --model "$T/run" --threads 1 -f "$T/in.txt"
err_has "line 2: invalid UTF-8 (byte offset 0)"
[ "$(sed -n 2p "$T/out")" = "" ] && [ "$(sed -n 1p "$T/out")" = "$(cat "$T/a")" ] \
  && [ "$(sed -n 3p "$T/out")" = "$(cat "$T/b")" ] || fail "lines around a bad one: $(cat "$T/out")"

# a forced prefix is read as the model's words (cased), and the heatmap reads the sentence as translate does
run_rc 0 translate --model "$T/run" --threads 1 --prefix "Alice a" "Tom has 3 books."
grep -q "^Alice a " "$T/out" || fail "--prefix 'Alice a': $(cat "$T/out")"
run_rc 0 heatmap --model "$T/run" --threads 1 "Tom has 3 books." --out "$T/att"
[ -s "$T/att-cross.png" ] || fail "no heatmap"
grep -q "^Tom has 3 books. => $(cat "$T/a")" "$T/out" || { cat "$T/out"; fail "heatmap's line is not translate's"; }

# qkv eval: sacreBLEU and chrF with their signatures, on the raw references
run_rc 0 eval --model "$T/run" --threads 1 --no-progress
out_has "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2" "chrF2"
# and it scores what qkv translate answers: a test line of two sentences, and one over the model's
# pieces, are translated sentence by sentence and in parts (qkv eval's translate_texts)
printf '%s\n' "Tom has 3 books.  Alice has 12 dogs!" "$long" > "$T/two.en"
printf '%s\n' "Tom a 3 livres. Alice a 12 chiens !" "Tom a 3 livres." > "$T/two.fr"
run_rc 0 eval --model "$T/run" --threads 1 --no-progress --src-file "$T/two.en" --ref-file "$T/two.fr" --hyp-out "$T/two.hyp"
[ "$(sed -n 1p "$T/two.hyp")" = "$(cat "$T/ab")" ] || fail "eval --src-file: '$(sed -n 1p "$T/two.hyp")', translate: '$(cat "$T/ab")'"
[ "$(sed -n 2p "$T/two.hyp")" = "$(cat "$T/long")" ] || fail "eval --src-file of the long line: '$(sed -n 2p "$T/two.hyp")', translate: '$(cat "$T/long")'"

printf '%s' "$long" > "$T/long_src"
# qkv serve: the LibreTranslate answer for the two-sentence text is qkv translate's line
python3 - "$QKV" "$T" "$(cat "$T/ab")" <<'PY' || fail "qkv serve"
import http.client, json, os, signal, subprocess, sys, time
qkv, T, want = sys.argv[1], sys.argv[2], sys.argv[3]
port_file = os.path.join(T, "port")
log = open(os.path.join(T, "serve.log"), "w")
p = subprocess.Popen([qkv, "serve", "--model", os.path.join(T, "run"), "--port", "0", "--port-file", port_file,
                      "--threads", "1"], stdout=subprocess.DEVNULL, stderr=log)
try:
    deadline = time.time() + 120  # a failure's bound only
    while not os.path.exists(port_file) or "ready" not in open(os.path.join(T, "serve.log")).read():
        assert p.poll() is None and time.time() < deadline, open(os.path.join(T, "serve.log")).read()
        time.sleep(0.02)
    c = http.client.HTTPConnection("127.0.0.1", int(open(port_file).read()), timeout=60)
    c.request("POST", "/translate", json.dumps({"q": "Tom has 3 books.  Alice has 12 dogs!", "source": "en",
                                                "target": "fr"}), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 200, body
    assert body["translatedText"] == want, (body, want)
    # /v1 (the page's API) with attention: the same translation; the weights block-diagonal
    c.request("POST", "/v1/translate", json.dumps({"q": "Tom has 3 books.  Alice has 12 dogs!", "attention": True,
                                                   "n_best": 1}), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 200, body
    t = body["translations"][0]
    assert t["translation"] == want, (t, want)
    a = t["attention"]
    assert len(a["source"]) > 6 and len(a["target"]) > 4, a
    # a sentence over the model's positions is cut as qkv translate cuts it
    c.request("POST", "/translate", json.dumps({"q": open(os.path.join(T, "long_src")).read(), "source": "en",
                                                "target": "fr"}), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 200 and body["translatedText"] == open(os.path.join(T, "long")).read().rstrip("\n"), body
    # 70 sentences in one text count as 70 against the per-request limit
    c.request("POST", "/translate", json.dumps({"q": "Go. " * 70, "source": "en", "target": "fr"}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 400 and "holds 70 sentences" in body["error"], body
    # the metrics count sentences, not texts: 2 + 2 (the two-sentence text twice) + 2 (the long one's parts)
    c.request("GET", "/metrics")
    m = c.getresponse().read().decode()
    assert "\nqkv_sentences_total 6\n" in m, m
finally:
    p.send_signal(signal.SIGTERM)
    p.wait(60)
PY
echo "ok"
