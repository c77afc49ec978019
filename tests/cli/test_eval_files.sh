#!/usr/bin/env bash
# qkv eval's standard metrics (decode/sacrebleu.h): the sacreBLEU BLEU and chrF2 lines with their
# signatures on the held-out split (beside D2L's BLEU-4) and on any test set with --src-file /
# --ref-file (JSON fields, --hyp-out, --limit, the note on sources longer than the model reads);
# references equal to the hypotheses score 100; the errors (line counts differ, one flag without
# the other, --data with --src-file, missing file).
# Usage: test_eval_files.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
run_rc 0 train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/run" "${small[@]}"

bleu_sig="BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = "
chrf_sig="chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = "

# The held-out split: D2L's corpus BLEU-4 as before, the standard metrics in addition.
run_rc 0 eval --model "$T/run" --no-progress --json "$T/split.json"
out_has "corpus BLEU-4" "$bleu_sig" "$chrf_sig" "qkv's implementation of sacreBLEU 2.6.0"
python3 - "$T/split.json" <<'PY' || fail "eval --json: standard metric fields"
import json, sys
j = json.load(open(sys.argv[1]))
assert "bleu4" in j and "book" in j, j.keys()
assert j["sacrebleu"]["signature"] == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0", j["sacrebleu"]
assert j["chrf"]["name"] == "chrF2" and j["chrf"]["signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0"), j["chrf"]
assert 0 <= j["sacrebleu"]["score"] <= 100 and 0 <= j["chrf"]["score"] <= 100
PY

# A test set of our own (a line with only spaces has nothing to translate: empty hypothesis).
printf "I lost.\nGo.\nWe won.\n   \nThank you.\n" > "$T/test.en"
printf "J'ai perdu.\nVa !\nNous avons gagné.\nRien.\nMerci.\n" > "$T/test.fr"
run_rc 0 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/test.fr" \
  --hyp-out "$T/hyp.txt" --json "$T/files.json" --show 2
out_has "test set --src-file '$T/test.en' / --ref-file '$T/test.fr': 5 pairs" "$bleu_sig" "$chrf_sig"
grep -q "corpus BLEU-4" "$T/out" && fail "--src-file printed the D2L BLEU of the held-out split"
[ "$(wc -l < "$T/hyp.txt")" = 5 ] || { cat "$T/hyp.txt"; fail "--hyp-out: one line per source line"; }
[ -z "$(sed -n 4p "$T/hyp.txt")" ] || fail "the blank source line got a hypothesis"
python3 - "$T/files.json" <<'PY' || fail "--src-file --json fields"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pairs"] == 5 and j["untranslated"] == 1 and j["cut_sources"] == 0, j
assert j["src_file"].endswith("test.en") and j["ref_file"].endswith("test.fr"), j
assert j["sacrebleu"]["ref_len"] == 13, j["sacrebleu"]  # 13a tokens of test.fr (3+2+4+2+2)
assert len(j["sacrebleu"]["precisions"]) == 4 and j["chrf"]["name"] == "chrF2", j
PY

# The hypotheses as references: every n-gram matches, so both metrics give 100 (when the
# hypotheses hold a 4-gram; an untrained model's have max_len tokens).
python3 - "$T/hyp.txt" <<'PY' || fail "hypotheses too short for the 100 check"
import sys
assert max(len(l.split()) for l in open(sys.argv[1])) >= 4
PY
run_rc 0 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/hyp.txt" --json "$T/self.json"
python3 - "$T/self.json" <<'PY' || fail "hypotheses scored against themselves"
import json, sys
j = json.load(open(sys.argv[1]))
assert abs(j["sacrebleu"]["score"] - 100) < 1e-9 and abs(j["chrf"]["score"] - 100) < 1e-9, j
PY
# A source longer than the model's 5 tokens + <eos> (--num-steps 6) is cut, and said once.
printf "I lost. I lost. I lost.\nGo.\n" > "$T/long.en"
printf "J'ai perdu.\nVa !\n" > "$T/long.fr"
run_rc 0 eval --model "$T/run" --no-progress --src-file "$T/long.en" --ref-file "$T/long.fr" --json "$T/long.json"
err_has "1 of 2 source lines have more than the 5 tokens the model reads"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['cut_sources']==1, j" "$T/long.json" \
  || fail "cut_sources"
# --limit scores the first N lines of both files
run_rc 0 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/test.fr" --limit 2 --json "$T/lim.json"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['pairs']==2 and j['sacrebleu']['ref_len']==5, j" \
  "$T/lim.json" || fail "--limit with --src-file"

# Errors
head -n 4 "$T/test.fr" > "$T/short.fr"
run_rc 1 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/short.fr"
err_has "--src-file '$T/test.en' has 5 lines but --ref-file '$T/short.fr' has 4"
run_rc 1 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/nope.fr"
err_has "--ref-file '$T/nope.fr': cannot open (no such file)"
# a source of 40 invalid lines and 2 good ones: 5 notes and a count, not 40 notes; all invalid: refused
{ for i in $(seq 1 40); do printf 'go\xff .\n'; done; echo "go ."; echo "i lost ."; } > "$T/junk.en"
for i in $(seq 1 42); do echo "va !"; done > "$T/junk.fr"
run_rc 0 eval --model "$T/run" --no-progress --src-file "$T/junk.en" --ref-file "$T/junk.fr"
err_has "line 5: invalid UTF-8; its hypothesis is empty" "35 more lines not valid text; their hypotheses are empty (notes for the first 5 only)"
[ "$(grep -c "invalid UTF-8; its hypothesis is empty" "$T/err")" = 5 ] || { cat "$T/err"; fail "not 5 per-line notes"; }
head -40 "$T/junk.en" > "$T/junk40.en"; head -40 "$T/junk.fr" > "$T/junk40.fr"
run_rc 1 eval --model "$T/run" --no-progress --src-file "$T/junk40.en" --ref-file "$T/junk40.fr"
err_has "none of its 40 lines is valid text"
# invalid references: refused before decoding, naming the file and the line
run_rc 1 eval --model "$T/run" --no-progress --src-file "$T/junk.fr" --ref-file "$T/junk.en"
err_has "--ref-file '$T/junk.en' line 1: invalid UTF-8 (byte offset 2)"
run_rc 2 eval --model "$T/run" --no-progress --src-file "$T/test.en"
err_has "--ref-file"
run_rc 2 eval --model "$T/run" --no-progress --ref-file "$T/test.fr"
err_has "--src-file"
run_rc 2 eval --model "$T/run" --no-progress --src-file "$T/test.en" --ref-file "$T/test.fr" --data "$T/fra.txt"
err_has "--data"

echo "cli eval --src-file/--ref-file and sacreBLEU/chrF lines: ok"
