#!/usr/bin/env bash
# Training on one's own corpus: a gzip TSV (French→English, fra-eng's columns swapped) and a
# line-aligned file pair; --src-lang/--tgt-lang in config.json and `qkv info`; SentencePiece pieces
# by default for such data (also for a language written without spaces); translate and eval on the
# model; --keep-checkpoints K and `qkv average --last K`; the errors (line-count mismatch, flags).
# Usage: test_corpus.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

six_pairs | awk -F'\t' '{ print $2 "\t" $1 }' | gzip > "$T/fr-en.tsv.gz"
small=(--num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --batch-size 8 --no-progress)

# TSV (gzip): languages recorded and shown, BPE pieces by default, no en→fr book sentences
run_rc 0 train --data "$T/fr-en.tsv.gz" --src-lang fr --tgt-lang en --preset demo --max-steps 3 --shared-vocab --vocab-size 40 \
  --out "$T/fren" "${small[@]}"
err_has "data: fr→en, $T/fr-en.tsv.gz: 60 pairs from 60 lines" "shared bpe vocabulary of 40 pieces"
grep -q "book sentences" "$T/err" && fail "train printed D2L's en→fr book sentences for a fr→en model"
python3 - "$T/fren/config.json" <<'PY' || fail "config.json data keys"
import json, sys
d = json.load(open(sys.argv[1]))["data"]
assert d["src_lang"] == "fr" and d["tgt_lang"] == "en" and d["subword"] == "bpe", d
assert d["path"].endswith("fr-en.tsv.gz") and d["path"].startswith("/"), d
PY
run_rc 0 info "$T/fren" --no-params
out_has "languages: fr→en" "check: the folder loads"
run_rc 0 translate --model "$T/fren" "je suis chez moi ." "merci ."
[ "$(wc -l < "$T/out")" = 2 ] || { cat "$T/out"; fail "translate: one line per input"; }
run_rc 0 eval --model "$T/fren"
out_has "held-out set (fr→en)"
grep -q "book sentences" "$T/out" && fail "eval printed D2L's en→fr book sentences for a fr→en model"
# --subword bpe without --vocab-size: the default is an upper bound on a small corpus too (was:
# SentencePiece's "Vocabulary size too high (8000)", exit 1)
run_rc 0 train --data "$T/fr-en.tsv.gz" --subword bpe --preset demo --max-steps 1 --out "$T/bpe" "${small[@]}"
err_has "per-side bpe vocabulary of"
# words on request
run_rc 0 train --data "$T/fr-en.tsv.gz" --subword none --preset demo --max-steps 1 --out "$T/words" "${small[@]}"
grep -q '"subword": "none"' "$T/words/config.json" || fail "--subword none on a TSV"
run_rc 0 info "$T/words" --no-params
out_has "languages: src→tgt"

# A file pair, gzip on one side: the same pairs
zcat "$T/fr-en.tsv.gz" | cut -f1 > "$T/a.fr"
zcat "$T/fr-en.tsv.gz" | cut -f2 | gzip > "$T/a.en.gz"
run_rc 0 train --src-file "$T/a.fr" --tgt-file "$T/a.en.gz" --preset demo --max-steps 1 --shared-vocab --vocab-size 40 \
  --out "$T/pair" "${small[@]}"
err_has "data: src→tgt, $T/a.fr + $T/a.en.gz: 60 pairs from 60 lines"
grep -q "\"src_file\": \"$T/a.fr\"" "$T/pair/config.json" || { cat "$T/pair/config.json"; fail "config.json src_file"; }
run_rc 0 eval --model "$T/pair"
# moved files: --resume names them anew (the fingerprint still checks them)
mkdir "$T/moved" && cp "$T/a.fr" "$T/a.en.gz" "$T/moved/"
mv "$T/a.fr" "$T/a.fr.away"
run_rc 1 train --resume --out "$T/pair" --max-steps 2 --no-progress
err_has "pass the moved files with --src-file PATH --tgt-file PATH"
run_rc 0 train --resume --out "$T/pair" --max-steps 2 --no-progress --src-file "$T/moved/a.fr" --tgt-file "$T/moved/a.en.gz"
out_has "trained 2 steps"
grep -q "is ignored" "$T/err" && { cat "$T/err"; fail "--src-file on resume was called ignored"; }
zcat "$T/moved/a.en.gz" | sed 's/./X/' | gzip > "$T/moved/other.en.gz"
run_rc 1 train --resume --out "$T/pair" --max-steps 3 --no-progress --src-file "$T/moved/a.fr" --tgt-file "$T/moved/other.en.gz"
err_has "is not the data the model in '$T/pair' was trained on"
mv "$T/a.fr.away" "$T/a.fr"

# Errors: line counts, lone --src-file, --data with --src-file, a truncated gzip
head -n 59 "$T/a.fr" > "$T/b.fr"
run_rc 1 train --src-file "$T/b.fr" --tgt-file "$T/a.en.gz" --out "$T/bad" "${small[@]}"
err_has "'$T/b.fr' has 59 lines, '$T/a.en.gz' has 60: line 60 of '$T/a.en.gz' has no partner"
[ -e "$T/bad" ] && fail "a refused run left a folder"
run_rc 2 train --src-file "$T/a.fr" --out "$T/bad" "${small[@]}"
err_has "--src-file requires --tgt-file"
run_rc 2 train --data "$T/fr-en.tsv.gz" --src-file "$T/a.fr" --tgt-file "$T/a.en.gz" --out "$T/bad" "${small[@]}"
head -c $(( $(stat -c %s "$T/fr-en.tsv.gz") / 2 )) "$T/fr-en.tsv.gz" > "$T/cut.tsv.gz"
run_rc 1 train --data "$T/cut.tsv.gz" --out "$T/bad" "${small[@]}"
err_has "'$T/cut.tsv.gz': truncated or corrupt gzip data"

# A language written without spaces: pieces, not one token per sentence
python3 - "$T/ja.tsv" <<'PY'
import sys
pairs = [("わたしはがくせいです", "i am a student ."), ("これはほんです", "this is a book ."),
         ("わたしはねこがすきです", "i like cats ."), ("これはねこです", "this is a cat ."),
         ("ほんがすきです", "i like books ."), ("がくせいはねこです", "the student is a cat .")]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(60):
        f.write("%s\t%s\n" % pairs[i % 6])
PY
run_rc 0 train --data "$T/ja.tsv" --src-lang ja --tgt-lang en --preset demo --max-steps 2 --shared-vocab --vocab-size 48 \
  --out "$T/ja" "${small[@]}"
run_rc 0 translate --model "$T/ja" --attention-json "$T/ja.json" "わたしはねこです"
python3 - "$T/ja.json" <<'PY' || fail "a no-space sentence was not split into pieces"
import json, sys
src = json.load(open(sys.argv[1]))[0]["source"]
assert len(src) >= 3, src  # pieces of one 8-character sentence
PY

# --keep-checkpoints K keeps exactly K, `average --last K` averages them
run_rc 0 train --data "$T/fr-en.tsv.gz" --preset demo --epochs 4 --shared-vocab --vocab-size 40 --keep-checkpoints 2 \
  --out "$T/keep" "${small[@]}"
[ "$(ls "$T/keep/checkpoints" | wc -l)" = 2 ] || { ls "$T/keep/checkpoints"; fail "--keep-checkpoints 2"; }
grep -q '"keep_checkpoints": 2' "$T/keep/config.json" || fail "config.json train.keep_checkpoints"
run_rc 0 average --last 2 "$T/keep" --out "$T/keep-avg"
err_has "averaged 2 checkpoints"
run_rc 0 translate --model "$T/keep-avg" "merci ."
run_rc 1 average --last 3 "$T/keep" --out "$T/keep-avg3"
err_has "--last 3 but '$T/keep' keeps 2 checkpoints"
[ -e "$T/keep-avg3" ] && fail "a refused average left a folder"
run_rc 2 average --last 2 "$T/keep" "$T/fren" --out "$T/keep-avg4"
err_has "--last 2 averages one folder's kept checkpoints; got 2 folders"

# language codes are BCP 47-shaped tags
run_rc 2 train --data "$T/fr-en.tsv.gz" --src-lang "french!" --tgt-lang en --preset demo --max-steps 1 --out "$T/badlang" "${small[@]}"
err_has "key 'data.src_lang' is \"french!\", expected a language code such as en, fr or pt-BR"
run_rc 2 train --data "$T/fr-en.tsv.gz" --src-lang fr --tgt-lang "e" --preset demo --max-steps 1 --out "$T/badlang" "${small[@]}"
err_has "key 'data.tgt_lang' is \"e\""
[ -e "$T/badlang" ] && fail "a refused language code left a folder"
# fra-eng data is read en→fr: other codes would be recorded wrongly (a server then refused "en")
six_pairs > "$T/fra.txt"
run_rc 1 train --data "$T/fra.txt" --src-lang fr --tgt-lang en --preset demo --max-steps 1 --out "$T/badlang" "${small[@]}"
err_has "the fra-eng data is read English -> French, so --src-lang must be en and --tgt-lang fr (got fr -> en)"
[ -e "$T/badlang" ] && fail "a refused language pair left a folder"
echo "cli corpus: ok"
