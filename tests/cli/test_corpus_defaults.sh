#!/usr/bin/env bash
# One's own small corpus under a preset's defaults (issue 44, items 5 and 6), on 200 made-up pairs:
#  1. the preset's length filters are not silent: train names what they dropped, by reason, and
#     whose limits they are (the preset's, or the flags'); config.json records what was done:
#     data.applied (pairs read, dropped by reason, kept, the split made, the pipeline in words) and
#     the real split sizes in data.n_valid / data.n_test (a small corpus shrinks them);
#  2. subword pieces without --num-steps: num_steps is chosen from the train split (99 % of its
#     sources and targets whole with <eos>), said on the data line and recorded, with
#     decode.max_len half as long again; --num-steps given is kept; the default pieces (BPE) are
#     about one per word, not unigram's ~3 on so few pairs.
# Usage: test_corpus_defaults.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"
# 200 pairs of made-up words, 2-9 source and 2-10 target words (a fixed LCG: the same file each run)
awk 'BEGIN {
  split("ka lo mi ne ru sa ti vo be do", a, " "); split("le ra tu po ni ce fa gu mo si", b, " ");
  r = 12345
  for (i = 0; i < 200; i++) {
    r = (r * 1103515245 + 12345) % 2147483648; ns = 2 + r % 8
    s = ""; for (k = 0; k < ns; k++) { r = (r * 1103515245 + 12345) % 2147483648; j = int(r / 65536) % 40;
      s = s (k ? " " : "") a[1 + j % 10] a[1 + int(j / 10) % 10] (j % 3 ? "" : a[1 + (j * 7) % 10]) }
    r = (r * 1103515245 + 12345) % 2147483648; nt = 2 + r % 9
    t = ""; for (k = 0; k < nt; k++) { r = (r * 1103515245 + 12345) % 2147483648; j = int(r / 65536) % 40;
      t = t (k ? " " : "") b[1 + j % 10] b[1 + int(j / 10) % 10] (j % 4 ? "" : b[1 + (j * 3) % 10]) }
    print s "\t" t
  }
}' > "$T/own.tsv"
[ "$(wc -l < "$T/own.tsv")" = 200 ] || fail "the corpus"
src_long=$(awk -F'\t' '{ if (split($1, x, " ") > 5) n++ } END { print n + 0 }' "$T/own.tsv")
tgt_long=$(awk -F'\t' '{ if (split($1, x, " ") <= 5 && split($2, y, " ") > 7) n++ } END { print n + 0 }' "$T/own.tsv")
kept=$((200 - src_long - tgt_long))
[ "$src_long" -gt 0 ] && [ "$tgt_long" -gt 0 ] && [ "$kept" -gt 20 ] || fail "corpus: $src_long / $tgt_long / $kept"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --no-progress --max-steps 1)

# ---- 1. the demo preset's filters on one's own corpus: said, by reason, and recorded
run_rc 0 train --preset demo --data "$T/own.tsv" "${small[@]}" --out "$T/a"
err_has "data: the filters kept $kept of 200 pairs: dropped $src_long with more than 5 source tokens, $tgt_long with more than 7 target tokens (--max-src-tokens 5 (the demo preset's), --max-tgt-tokens 7 (the demo preset's); larger values keep more)"
python3 - "$T/a/config.json" "$src_long" "$tgt_long" "$kept" <<'PY' || { cat "$T/a/config.json"; fail "config.json: what was done"; }
import json, sys
d = json.load(open(sys.argv[1]))["data"]
src_long, tgt_long, kept = map(int, sys.argv[2:5])
a = d["applied"]
assert a["pairs_read"] == 200 and a["pairs_kept"] == kept, a
assert a["dropped"] == {"source_too_long": src_long, "target_too_long": tgt_long, "beyond_max_pairs": 0,
                        "over_length_cap": 0, "held_out_other_translations": 0}, a
sp = a["split"]
assert sp["train"] + sp["valid"] + sp["test"] == kept, sp
# a small corpus: valid and test shrunk to 10 % each, and n_valid / n_test say so (not 1000 / 5000)
assert sp["valid"] == sp["test"] == kept // 10, sp
assert d["n_valid"] == sp["valid"] and d["n_test"] == sp["test"], (d["n_valid"], d["n_test"], sp)
assert a["pipeline"].startswith("anchor: seeded shuffle split (seed 0), valid and test shrunk to 10 % each"), a
assert "bpe vocabulary of" in a["pipeline"] and "num_steps %d" % d["num_steps"] in a["pipeline"], a
PY
# the recorded split sizes give the same split again: eval and --resume take the folder as it is
run_rc 0 eval --model "$T/a" --no-progress
out_has "corpus BLEU-4"
run_rc 0 train --resume --out "$T/a" --max-steps 2 --no-progress
out_has "trained 2 steps"
grep -q "is ignored" "$T/err" && { cat "$T/err"; fail "resume warned about its own recorded values"; }
# limits given as flags are named as such; nothing dropped: no line
run_rc 0 train --preset demo --data "$T/own.tsv" "${small[@]}" --max-src-tokens 6 --out "$T/b"
err_has "(--max-src-tokens 6, --max-tgt-tokens 7 (the demo preset's); larger values keep more)"
run_rc 0 train --preset demo --data "$T/own.tsv" "${small[@]}" --max-src-tokens 20 --max-tgt-tokens 20 --out "$T/c"
grep -q "the filters" "$T/err" && { cat "$T/err"; fail "a filter line when nothing was dropped"; }
python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['data']['applied']; assert a['pairs_kept']==200 and a['dropped']['source_too_long']==0, a" \
  "$T/c/config.json" || fail "config.json of an unfiltered run"

# ---- 2. num_steps for pieces chosen from the train split
re='truncated to ([0-9]+): source ([0-9.]+)%, target ([0-9.]+)% of train pairs.* \(num_steps ([0-9]+) from the train split: 99 % of its sentences fit\)'
line=$(grep "^data: " "$T/err" | head -1)
[[ "$line" =~ $re ]] || { cat "$T/err"; fail "the data line does not say how num_steps was chosen"; }
steps=${BASH_REMATCH[4]}
[ "${BASH_REMATCH[1]}" = "$steps" ] || fail "truncated to ${BASH_REMATCH[1]}, num_steps $steps"
awk -v s="${BASH_REMATCH[2]}" -v t="${BASH_REMATCH[3]}" 'BEGIN { exit !(s <= 1 && t <= 1) }' ||
  fail "more than 1 % of the train pairs cut at the chosen num_steps: $line"
python3 - "$T/c/config.json" "$steps" <<'PY' || { cat "$T/c/config.json"; fail "config.json num_steps / decode.max_len"; }
import json, sys
c = json.load(open(sys.argv[1])); steps = int(sys.argv[2])
assert c["data"]["num_steps"] == steps and c["decode"]["max_len"] == steps + steps // 2, (c["data"], c["decode"])
PY
run_rc 0 translate --model "$T/c" "kalo mine"
run_rc 0 train --preset demo --data "$T/own.tsv" "${small[@]}" --max-src-tokens 20 --max-tgt-tokens 20 --num-steps 9 --out "$T/d"
grep -q '"num_steps": 9,' "$T/d/config.json" || fail "--num-steps 9 not kept"
grep -q "from the train split" "$T/err" && fail "--num-steps given, yet chosen from the data"
# ---- 3. the default pieces fit a small corpus (item 6): 200 pairs of random words, each rare, as a
# few hundred real sentences are. Unigram learns only the pieces seen often (3.2 pieces per word
# here); the default, BPE, keeps every word whole.
awk 'BEGIN {
  r = 777
  for (i = 0; i < 200; i++) {
    for (side = 0; side < 2; side++) {
      r = (r * 1103515245 + 12345) % 2147483648; n = 3 + r % 6; s = ""
      for (k = 0; k < n; k++) {
        r = (r * 1103515245 + 12345) % 2147483648; len = 3 + int(r / 65536) % 6; w = ""
        for (c = 0; c < len; c++) { r = (r * 1103515245 + 12345) % 2147483648; w = w substr("abcdefghijklmnoprstuvy", 1 + int(r / 65536) % 22, 1) }
        s = s (k ? " " : "") w
      }
      line[side] = s
    }
    print line[0] "\t" line[1]
  }
}' > "$T/rare.tsv"
run_rc 0 train --preset demo --data "$T/rare.tsv" "${small[@]}" --out "$T/rare"
python3 - "$T/err" <<'PY' || { cat "$T/err"; fail "pieces per word on a small corpus of rare words"; }
import re, sys
m = re.search(r"bpe vocabulary of .*?([0-9.]+) / ([0-9.]+) pieces per word", open(sys.argv[1]).read())
assert m and float(m.group(1)) < 1.5 and float(m.group(2)) < 1.5, m and m.groups()
PY

echo "cli own corpus under a preset: filters said and recorded, num_steps from the pieces, pieces per word: ok"
