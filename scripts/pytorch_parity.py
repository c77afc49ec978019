#!/usr/bin/env python3
"""Loads a qkv model folder's model.safetensors into a PyTorch re-implementation of D2L's
Transformer (shared/bench/d2l_transformer_bench.py, which keeps D2L's module names) and checks
that PyTorch's greedy translations equal `qkv translate`'s, token for token. Proves the
state_dict names, shapes and the model's arithmetic match D2L's PyTorch model.

Usage: PYENV_VERSION=system python3 scripts/pytorch_parity.py --model DIR [--qkv build/bin/qkv]
       [--sentences FILE]   (default: the book's four sentences and a few more)
Exit status 1 when any translation differs.
"""
import argparse, json, os, struct, subprocess, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
for cand in (os.path.join(HERE, "..", "..", "shared", "bench"), "/work/shared/bench"):
    if os.path.exists(os.path.join(cand, "d2l_transformer_bench.py")):
        sys.path.insert(0, cand)
        break
import d2l_transformer_bench as d2l  # noqa: E402

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).copy()).reshape(e["shape"])
    return out


def preprocess(s):  # D2L's preprocessing (spec §2)
    s = s.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = []
    for i, ch in enumerate(s):
        if i > 0 and ch in ",.!?" and s[i - 1] != " ":
            out.append(" ")
        out.append(ch)
    return [t for t in "".join(out).split(" ") if t]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--qkv", default="build/bin/qkv")
    ap.add_argument("--sentences")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    m, steps, max_len = cfg["model"], cfg["data"]["num_steps"], cfg["decode"]["max_len"]
    src_vocab = open(os.path.join(a.model, "src_vocab.txt"), encoding="utf-8").read().split("\n")[:-1]
    tgt_vocab = open(os.path.join(a.model, "tgt_vocab.txt"), encoding="utf-8").read().split("\n")[:-1]
    s2i = {t: i for i, t in enumerate(src_vocab)}
    unk, pad, bos, eos = s2i["<unk>"], s2i["<pad>"], tgt_vocab.index("<bos>"), tgt_vocab.index("<eos>")

    torch.manual_seed(0)
    net = d2l.Seq2Seq(m["src_vocab_size"], m["tgt_vocab_size"], h=m["num_hiddens"], ffn_h=m["ffn_num_hiddens"],
                      heads=m["num_heads"], blks=m["num_blks"], dropout=0.0)
    sd = load_safetensors(os.path.join(a.model, "model.safetensors"))
    res = net.load_state_dict(sd, strict=False)
    assert not res.unexpected_keys, f"names PyTorch does not know: {res.unexpected_keys}"
    assert all(k.endswith("pos_encoding.P") for k in res.missing_keys), f"missing: {res.missing_keys}"
    print(f"loaded {len(sd)} tensors into PyTorch's D2L Transformer (missing only the PE buffers)")
    net.train()  # the causal mask in this script's decoder is on in train mode only; dropout is 0

    if a.sentences:
        sents = [l.rstrip("\n") for l in open(a.sentences, encoding="utf-8")]
    else:
        sents = ["go .", "i lost .", "he's calm .", "i'm home .", "we won .", "i like tea .",
                 "she is happy .", "they left early .", "is it yours ?", "thank you ."]
    hyps = []
    with torch.no_grad():
        for s in sents:
            ids = [s2i.get(t, unk) for t in preprocess(s)] + [s2i["<eos>"]]
            ids = ids[:steps]
            n = len(ids)
            src = torch.tensor([ids + [pad] * (steps - n)])
            vl = torch.tensor([n])
            enc = net.encoder(src, vl)
            out = [bos]
            for _ in range(max_len):  # full recomputation over the prefix; PE position t at step t
                logits = net.decoder(torch.tensor([out]), enc, vl)
                tok = int(logits[0, -1].argmax())
                if tok == eos:
                    break
                out.append(tok)
            hyps.append(" ".join(tgt_vocab[t] for t in out[1:]))
    q = subprocess.run([a.qkv, "translate", "--model", a.model] + sents, capture_output=True, text=True, check=True)
    qkv_hyps = q.stdout.rstrip("\n").split("\n")
    bad = 0
    for s, h, k in zip(sents, hyps, qkv_hyps):
        same = h == k
        bad += not same
        print(f"{'same' if same else 'DIFF'}  {s} => pytorch: {h} | qkv: {k}")
    print(f"{len(sents) - bad}/{len(sents)} translations identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
