#!/usr/bin/env python3
"""Prints the corpus used by tests/decode/test_bleu.cpp (CorpusBleu.MatchesAnchorScript) and its
score from the quality anchor's own corpus_bleu.

Run from the folder that holds shared/:  PYENV_VERSION=system python3 qkv/tools/bleu_reference.py
(imports shared/bench/fra_full_anchor.py, which needs torch only to import).
"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench"))
sys.path.insert(0, os.path.join("shared", "bench"))
import fra_full_anchor as anchor  # noqa: E402

r = random.Random(7)
words = "le la chat chien est sur tapis un une noir .".split()
hyps, refs = [], []
for _ in range(6):
    refs.append([r.choice(words) for _ in range(r.randint(3, 9))])
    h = [t if r.random() < 0.7 else r.choice(words) for t in refs[-1]]
    if r.random() < 0.5:
        h = h[:-1]
    hyps.append(h)
for h, f in zip(hyps, refs):
    print(" ".join(h), "|", " ".join(f))
print(repr(anchor.corpus_bleu(hyps, refs)))
