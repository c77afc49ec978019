#!/usr/bin/env bash
# CLI decoding options on a 2-step model of a tiny corpus written here: n-best lines and their
# format, --scores, --alignments, --attention-json, --prefix, seeded --sampling, --batch-type
# tokens (same lines, input order), --replace-unknowns, and the usage errors.
# Usage: test_decode_options.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs > "$T/fra.txt"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --num-steps 6 --no-progress)
"$QKV" train --data "$T/fra.txt" --preset demo --max-steps 2 --out "$T/run" "${small[@]}" > /dev/null 2> "$T/train.err" \
  || { cat "$T/train.err"; fail "qkv train"; }
M=(--model "$T/run")

# n-best: K lines per input, "i ||| words ||| logP ||| normalised", scores sorted, logP <= 0
run_rc 0 translate "${M[@]}" --beam 3 --num-hypotheses 3 "go ." "i lost ."
[ "$(wc -l < "$T/out")" = 6 ] || { cat "$T/out"; fail "n-best line count"; }
[ "$(grep -c '^0 ||| ' "$T/out")" = 3 ] && [ "$(grep -c '^1 ||| ' "$T/out")" = 3 ] || fail "n-best line numbers"
awk -F' \\|\\|\\| ' '{ if ($3 > 0) bad=1; if ($1 == prev && $4 > last + 1e-9) bad=1; prev=$1; last=$4 } END { exit bad }' "$T/out" \
  || { cat "$T/out"; fail "n-best scores"; }
run_rc 0 translate "${M[@]}" --scores "go ."
grep -qE '^0 \|\|\| .* \|\|\| -[0-9.]+ \|\|\| -[0-9.]+$' "$T/out" || { cat "$T/out"; fail "--scores"; }

# alignments: pairs i-j; attention JSON with one row per output token (+ <eos>)
run_rc 0 translate "${M[@]}" --alignments "i'm home ."
grep -qE ' \|\|\| ([0-9]+-[0-9]+( |$))*$' "$T/out" || { cat "$T/out"; fail "--alignments"; }
run_rc 0 translate "${M[@]}" --attention-json "$T/a.json" "go ."
python3 - "$T/a.json" <<'PY' || fail "--attention-json"
import json, sys
j = json.load(open(sys.argv[1]))
e = j[0]
assert e["line"] == 1 and e["source"] == ["go", "."], e
assert len(e["attention"]) in (len(e["translation"]), len(e["translation"]) + 1), e
for row in e["attention"]:
    assert abs(sum(row) - 1) < 1e-4, row
    assert len(row) == len(e["source"]) + 1, ("columns: the source units then <eos>, no padding", row)
PY
# an output file that is one of the model's own files is refused before anything is written
cp "${M[1]}/config.json" "$T/config.before"
run_rc 2 translate "${M[@]}" --attention-json "${M[1]}/config.json" "go ."
err_has "--attention-json" "is the model folder's own config.json"
cmp -s "${M[1]}/config.json" "$T/config.before" || fail "--attention-json wrote over the model's config.json"

# prefix: forced first words
run_rc 0 translate "${M[@]}" --prefix "nous avons" "go ." "i lost ."
[ "$(grep -c '^nous avons' "$T/out")" = 2 ] || { cat "$T/out"; fail "--prefix"; }
run_rc 1 translate "${M[@]}" --prefix "zzzq" "go ."
err_has "'zzzq'"
# reserved tokens are refused by name (<pad> and <bos> were printed as words)
for tok in "<pad>" "<bos>" "<eos>"; do
  run_rc 1 translate "${M[@]}" --prefix "$tok" "go ."
  err_has "target prefix word '$tok' is a reserved token, not a word"
done
run_rc 1 translate "${M[@]}" --no-unk --prefix "<unk>" "go ."
err_has "target prefix word '<unk>' is <unk>, which --no-unk bans"
# a forced prefix is exempt from --no-repeat-ngram-size (was: empty lines, and none with --scores)
run_rc 0 translate "${M[@]}" --no-repeat-ngram-size 1 --prefix "nous nous" --scores "go ." "i lost ."
[ "$(grep -c '||| nous nous' "$T/out")" = 2 ] || { cat "$T/out"; fail "--prefix with --no-repeat-ngram-size 1"; }

# sampling: the same seed gives the same lines
"$QKV" translate "${M[@]}" --sampling --seed 5 --max-len 8 "go ." "i lost ." "we won ." > "$T/s1"
"$QKV" translate "${M[@]}" --sampling --seed 5 --max-len 8 "we won ." "go ." "i lost ." > "$T/s2"
[ "$(sed -n 1p "$T/s1")" = "$(sed -n 2p "$T/s2")" ] && [ "$(sed -n 3p "$T/s1")" = "$(sed -n 1p "$T/s2")" ] \
  || fail "seeded sampling not reproducible"

# token batching: the same lines in input order as example batching
printf 'go .\ni lost .\nhe is calm and i am home and we won .\nwe won .\nthank you .\n' > "$T/in.txt"
"$QKV" translate "${M[@]}" --file "$T/in.txt" --batch-size 2 > "$T/ex" 2> /dev/null
"$QKV" translate "${M[@]}" --file "$T/in.txt" --batch-type tokens --batch-size 7 > "$T/tok" 2> /dev/null
cmp -s "$T/ex" "$T/tok" || { paste "$T/ex" "$T/tok"; fail "--batch-type tokens changed the output"; }

run_rc 0 translate "${M[@]}" --replace-unknowns "go ."

# coverage penalty: with --max-len 2 the outputs cannot cover the long source, so the penalty
# (< 0) enters the normalised score: score < log P / lp(n) on every line, n = words (+ <eos>);
# without it the column is log P / lp(n) exactly
src6="he is calm and i am home and we won ."
run_rc 0 translate "${M[@]}" --beam 3 --num-hypotheses 3 --max-len 2 "$src6"
cp "$T/out" "$T/nocov"
run_rc 0 translate "${M[@]}" --beam 3 --num-hypotheses 3 --max-len 2 --coverage-penalty 1 "$src6"
python3 - "$T/nocov" "$T/out" <<'PY' || { cat "$T/nocov" "$T/out"; fail "--coverage-penalty"; }
import sys
def rows(p):
    return [l.rstrip("\n").split(" ||| ") for l in open(p)]
plain, cov = rows(sys.argv[1]), rows(sys.argv[2])
assert plain and cov and all(len(r) == 4 for r in plain + cov), (plain, cov)
def lp(n): return ((5 + n) / 6) ** 0.6
def normalised(r):  # log P / lp(n) for n = words and words + 1 (finished)
    return [float(r[2]) / lp(len(r[1].split()) + k) for k in (0, 1)]
for r in plain:
    assert min(abs(float(r[3]) - x) for x in normalised(r)) < 1e-5, r
for r in cov:
    assert float(r[3]) < min(normalised(r)) - 1e-4, r
scores = [float(r[3]) for r in cov]
assert scores == sorted(scores, reverse=True), scores
PY
run_rc 2 translate "${M[@]}" --coverage-penalty -1 "go ."

# usage errors (exit 2)
run_rc 2 translate "${M[@]}" --top-k 3 "go ."
err_has "apply to --sampling only"
run_rc 2 translate "${M[@]}" --beam 2 --num-hypotheses 3 "go ."
err_has "--num-hypotheses 3 needs --beam >= 3"
run_rc 2 translate "${M[@]}" --batch-type lines "go ."
run_rc 2 eval "${M[@]}" --sampling --beam 2
err_has "not with --beam > 1"
run_rc 2 translate "${M[@]}" --min-len 6 --max-len 5 "go ."
err_has "--min-len 6 is above the output limit of 5 tokens"
run_rc 2 eval "${M[@]}" --min-len 6 --max-len 5
err_has "--min-len 6 is above the output limit of 5 tokens"
echo "cli decoding options: ok"
