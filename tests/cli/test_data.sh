#!/usr/bin/env bash
# qkv data (issue 45 item 6): the text pipeline's split and SentencePiece model as plain files, line-
# aligned, in the sizes the summary gives, the train files ending with the concatenated pairs (2-8
# train pairs each); no test or validation source occurs in train; spm.model
# encodes; the errors (a preset of another pipeline, a non-empty --out, a missing --out).
# Usage: test_data.sh /path/to/qkv
source "$(dirname "$0")/lib.sh" "$1"

# 360 English–French pairs from words, every source once, then 40 sources again with another
# translation (the source-disjoint split must keep both translations on one side).
python3 - "$T/corpus.tsv" <<'PY'
import sys
subj = [("The cat", "Le chat"), ("My brother", "Mon frère"), ("The teacher", "Le professeur"), ("Our neighbour", "Notre voisin"),
        ("This child", "Cet enfant"), ("The old man", "Le vieil homme"), ("Her friend", "Son ami"), ("The doctor", "Le médecin"),
        ("A student", "Un étudiant"), ("The king", "Le roi"), ("His father", "Son père"), ("The pilot", "Le pilote")]
verb = [("sees", "voit"), ("wants", "veut"), ("paints", "peint"), ("buys", "achète"), ("finds", "trouve"), ("forgets", "oublie")]
obj = [("the red house", "la maison rouge"), ("a small boat", "un petit bateau"), ("the green apple", "la pomme verte"),
       ("an old book", "un vieux livre"), ("the blue car", "la voiture bleue"), ("a strange letter", "une lettre étrange")]
rows = []
for i, (s, t) in enumerate(subj):
    for j, (v, w) in enumerate(verb):
        for k, (o, p) in enumerate(obj[:5]):
            rows.append((f"{s} {v} {o}.", f"{t} {w} {p}."))
for i in range(0, 360, 9):
    e, f = rows[i]
    rows.append((e, f[:-1] + " !"))
with open(sys.argv[1], "w") as fh:
    for e, f in rows:
        fh.write(f"{e}\t{f}\n")
PY
[ "$(wc -l < "$T/corpus.tsv")" = 400 ] || fail "corpus: $(wc -l < "$T/corpus.tsv") lines, want 400"

run_rc 0 data --data "$T/corpus.tsv" --src-lang en --tgt-lang fr --vocab-size 320 --out "$T/d"
out_has "wrote $T/d:" "spm.model (320 pieces)"
for f in train.en train.fr valid.en valid.fr test.en test.fr spm.model; do
  [ -s "$T/d/$f" ] || fail "qkv data did not write $f"
done
# Line-aligned, the counts printed, every pair of the corpus in exactly one split.
python3 - "$T/d" "$T/out" "$T/corpus.tsv" "$T/err" <<'PY' || fail "qkv data files"
import re, sys
d, out, corpus, err = sys.argv[1:]
lines = {}
for split in ("train", "valid", "test"):
    e = open(f"{d}/{split}.en", encoding="utf-8").read().split("\n")
    f = open(f"{d}/{split}.fr", encoding="utf-8").read().split("\n")
    assert e[-1] == "" and f[-1] == "", f"{split}: the last line lacks its newline"
    assert len(e) == len(f), f"{split}: {len(e) - 1} sources, {len(f) - 1} targets"
    lines[split] = list(zip(e[:-1], f[:-1]))
m = re.search(r"train (\d+), valid (\d+), test (\d+) pairs", open(out).read())
assert m, open(out).read()
assert [len(lines[s]) for s in ("train", "valid", "test")] == [int(x) for x in m.groups()], (m.groups(), {s: len(v) for s, v in lines.items()})
assert all(len(lines[s]) > 0 for s in lines), {s: len(v) for s, v in lines.items()}
pairs = [tuple(l.rstrip("\n").split("\t")) for l in open(corpus, encoding="utf-8")]
# The train files end with the preset's concatenated pairs (data.concat_fraction): each is 2-8
# original train pairs, sources and targets joined by a space in the same order.
m = re.search(r"(\d+) concatenated train pairs", open(err).read())
assert m, open(err).read()
n_concat = int(m.group(1))
assert n_concat > 0, n_concat
originals, concatenated = lines["train"][:-n_concat], lines["train"][-n_concat:]
cut = lambda s: re.split(r"(?<=[.!?]) (?=[A-Z])", s)
for e, f in concatenated:
    parts = list(zip(cut(e), cut(f)))
    assert 2 <= len(parts) <= 8 and len(cut(e)) == len(cut(f)), (e, f)
    assert set(parts) <= set(originals), set(parts) - set(originals)
lines["train"] = originals
written = lines["train"] + lines["valid"] + lines["test"]
# every written pair is a corpus pair, as the file has it (raw, cased, punctuation attached)
assert set(written) <= set(pairs), set(written) - set(pairs)
assert len(written) == len(set(written)), "a pair written twice"
train_src = {e.strip() for e, _ in lines["train"]}
for split in ("valid", "test"):
    shared = {e.strip() for e, _ in lines[split]} & train_src
    assert not shared, f"{split} sources in train: {sorted(shared)[:3]}"
# The second translations of held-out sources are in no split (source-disjoint); the rest are all kept.
held = {e for e, _ in lines["valid"] + lines["test"]}
missing = [p for p in pairs if p not in set(written)]
assert all(e in held for e, _ in missing), [p for p in missing if p[0] not in held][:3]
print("splits", {s: len(v) for s, v in lines.items()}, "unused", len(missing))
PY
# spm.model is a SentencePiece model of 320 pieces with qkv's special ids (what the PyTorch script reads)
if python3 -c "import sentencepiece" 2> /dev/null; then
  python3 - "$T/d/spm.model" <<'PY' || fail "spm.model"
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
assert sp.get_piece_size() == 320, sp.get_piece_size()
assert (sp.unk_id(), sp.pad_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3), (sp.unk_id(), sp.pad_id(), sp.bos_id(), sp.eos_id())
ids = sp.encode("The cat sees the red house.")
assert 0 not in ids and sp.decode(ids) == "The cat sees the red house.", (ids, sp.decode(ids))
PY
fi

# The split and the pieces are those a training run on the same data gets.
run_rc 0 train --preset real --data "$T/corpus.tsv" --src-lang en --tgt-lang fr --vocab-size 320 --max-steps 1 \
  --num-hiddens 16 --num-heads 2 --num-blks 1 --ffn-num-hiddens 16 --no-progress --out "$T/m"
cmp -s "$T/m/spm.model" "$T/d/spm.model" || fail "spm.model differs from the one qkv train learned"
python3 - "$T/m/config.json" "$T/d" <<'PY' || fail "split sizes differ from qkv train's"
import json, sys
split = json.load(open(sys.argv[1]))["data"]["applied"]["split"]  # train: with the concatenated pairs
for name, n in split.items():
    assert sum(1 for _ in open(f"{sys.argv[2]}/{name}.en", encoding="utf-8")) == n, (name, n)
PY

# A non-empty --out is refused (nothing changed), unless --overwrite.
before=$(md5sum "$T/d/train.en")
echo keep > "$T/d/other.txt"
run_rc 2 data --data "$T/corpus.tsv" --src-lang en --tgt-lang fr --vocab-size 320 --out "$T/d"
err_has "--out '$T/d' is not empty" "--overwrite"
run_rc 0 data --data "$T/corpus.tsv" --src-lang en --tgt-lang fr --vocab-size 320 --out "$T/d" --overwrite
[ "$(md5sum "$T/d/train.en")" = "$before" ] || fail "--overwrite: another split from the same data"
[ -f "$T/d/other.txt" ] || fail "--overwrite removed a file qkv data does not write"

# Another pipeline's preset, a missing --out, a missing file: errors naming the argument.
run_rc 2 data --preset demo --data "$T/corpus.tsv" --out "$T/demo"
err_has "--preset demo: qkv data writes the split of the text pipeline (preset real)"
[ -e "$T/demo" ] && fail "--preset demo created --out"
run_rc 2 data --data "$T/corpus.tsv"
err_has "--out is required"
run_rc 1 data --data "$T/nothing.tsv" --out "$T/none"
err_has "$T/nothing.tsv"
run_rc 2 data --data "$T/corpus.tsv" --vocab-size 3 --out "$T/none"
err_has "--vocab-size"
echo "qkv data: split files, counts, source-disjoint, spm.model, errors: ok"
