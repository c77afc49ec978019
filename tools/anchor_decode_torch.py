"""Same-machine decoding reference: loads a qkv model folder trained with `--preset anchor` into
the PyTorch anchor script's own D2L Transformer (shared/bench/fra_full_anchor.py; the state_dict
names are the same) and times that script's greedy_decode on the 5,000 test sources, batch 250,
<= 20 tokens, exactly as the script does after training. Prints the decode time, corpus BLEU-4,
and, with --qkv-hyp, how many hypotheses equal qkv's (`qkv eval --hyp-out`).

Run PyTorch in its best configuration (shared/bench/README.md), e.g.
  PYENV_VERSION=system OMP_WAIT_POLICY=passive env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 tools/anchor_decode_torch.py \
    --model runs/anchor --qkv-hyp runs/anchor/test_hyp_greedy.txt
"""
import argparse
import importlib.util
import json
import os
import struct
import sys
import time

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def load_safetensors(path):
    """{name: tensor} from a .safetensors file (8-byte header size, JSON header, raw data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(blob[base + a:base + b]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="qkv model folder (--preset anchor)")
    ap.add_argument("--anchor", default=os.path.join(here, "..", "..", "shared", "bench", "fra_full_anchor.py"))
    ap.add_argument("--zip", default=os.path.join(here, "..", "..", "shared", "data", "fra-eng.zip"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=2, help="timed repetitions (the best is reported too)")
    ap.add_argument("--qkv-hyp", help="qkv eval --hyp-out file to compare with")
    a = ap.parse_args()

    spec = importlib.util.spec_from_file_location("anchor", a.anchor)
    anc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anc)
    torch.set_num_threads(a.threads)

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    m = cfg["model"]
    src_all, tgt_all = anc.load_pairs(a.zip)
    train_idx, _, test_idx = anc.split_indices(len(src_all))
    src_vocab = anc.Vocab([src_all[i] for i in train_idx])
    tgt_vocab = anc.Vocab([tgt_all[i] for i in train_idx])
    if (len(src_vocab), len(tgt_vocab)) != (m["src_vocab_size"], m["tgt_vocab_size"]):
        sys.exit(f"vocabulary sizes {len(src_vocab)}/{len(tgt_vocab)} differ from the model's "
                 f"{m['src_vocab_size']}/{m['tgt_vocab_size']}: not an anchor-protocol model")
    X, Xl = anc.build_array([src_all[i] for i in test_idx], src_vocab, 12)
    refs = [tgt_all[i] for i in test_idx]

    model = anc.Seq2Seq(len(src_vocab), len(tgt_vocab), m["num_hiddens"], m["ffn_num_hiddens"],
                        m["num_heads"], m["num_blks"], m["dropout"])
    sd = load_safetensors(os.path.join(a.model, "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        sys.exit(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
    model.eval()

    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        hyps = []
        for i in range(0, len(test_idx), a.batch):
            hyps += anc.greedy_decode(model, X[i:i + a.batch], Xl[i:i + a.batch], 20, False)
        times.append(time.perf_counter() - t0)
    hyp_tok = [[tgt_vocab.idx_to_token[t] for t in h] for h in hyps]
    cb = anc.corpus_bleu(hyp_tok, refs)
    print(f"torch {torch.__version__} threads {torch.get_num_threads()} | greedy decode of "
          f"{len(hyps)} sentences, batch {a.batch}: " + " / ".join(f"{t:.1f} s" for t in times) +
          f" | corpus BLEU-4 {100 * cb['bleu']:.2f}")
    if a.qkv_hyp:
        q = [line.rstrip("\n").split() for line in open(a.qkv_hyp, encoding="utf-8")]
        same = sum(x == y for x, y in zip(q, hyp_tok))
        print(f"hypotheses equal to qkv's: {same} of {len(hyp_tok)}")


if __name__ == "__main__":
    main()
