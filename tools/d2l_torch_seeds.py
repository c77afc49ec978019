#!/usr/bin/env python3
"""Reference distribution for the d2l presets (issues 4 and 5): trains D2L EN's own Transformer in PyTorch
(the module classes of shared/bench/d2l_transformer_bench.py, which keep D2L's names, default
init, bias-free attention projections and dropout placement) on D2L EN's data (spec §2: first 641
pairs, alphabetical vocabularies over the padded lists, 512 train rows, num_steps 9) with D2L EN's
training loop (spec §1.12–1.13: unmasked mean cross-entropy, Adam lr 1e-3, clip 1, batch 128,
shuffled every epoch, 30 epochs) for several seeds, then scores the four book sentences as
`scripts/d2l_seeds.py` does for qkv: greedy decoding with correct decoder positions, D2L's BLEU
(k = 2). It answers: how often does the book's own model reach mean book BLEU >= 0.8?

--model bahdanau does the same for D2L EN's Bahdanau model (the classes of tools/gen_gru_fixtures.py,
which the qkv parity fixtures come from; EN init: Xavier-uniform on the GRU weights only, spec
§1.11; embed = hidden = 256, 2 layers, dropout 0.2, Adam lr 5e-3) and also reports whether the
argmax source position of the attention for "i'm home ." is non-decreasing along the output
(issue 5's heatmap criterion), as tools/bahdanau_d2l_seeds.py does for qkv. --bidirectional swaps in
the bidirectional ("brnn") encoder that `qkv train --bidirectional` builds.

Usage: PYENV_VERSION=system python3 tools/d2l_torch_seeds.py [--data ../shared/data/fra-eng.zip]
       [--seeds 0 1 2 3 4] [--threads 2] [--check-vocab runs/d2l_seeds/seed0]
--check-vocab compares the vocabularies with a qkv model folder's src_vocab.txt / tgt_vocab.txt.
Prints one line per seed and a markdown table. Needs python3-torch (optional oracle).
"""
import argparse, collections, math, os, statistics, sys, zipfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
for cand in (os.path.join(HERE, "..", "..", "shared", "bench"), "/work/shared/bench"):
    if os.path.exists(os.path.join(cand, "d2l_transformer_bench.py")):
        sys.path.insert(0, cand)
        break
import d2l_transformer_bench as d2l  # noqa: E402

BOOK = [("go .", "va !"), ("i lost .", "j'ai perdu ."), ("he's calm .", "il est calme ."),
        ("i'm home .", "je suis chez moi .")]
NUM_STEPS, NUM_TRAIN, NUM_VAL = 9, 512, 128


def preprocess(s):  # spec §2
    s = s.replace("\u202f", " ").replace("\xa0", " ").lower()
    return "".join(" " + ch if i > 0 and ch in ",.!?" and s[i - 1] != " " else ch for i, ch in enumerate(s))


def read_text(path):
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("fra.txt") and not n.startswith("__MACOSX"))
            return z.read(name).decode("utf-8")
    return open(path, encoding="utf-8").read()


def load(path):
    src, tgt = [], []
    for i, line in enumerate(preprocess(read_text(path)).split("\n")):
        if i > NUM_TRAIN + NUM_VAL:
            break
        parts = line.split("\t")
        if len(parts) == 2:
            src.append([t for t in f"{parts[0]} <eos>".split(" ") if t])
            tgt.append([t for t in f"{parts[1]} <eos>".split(" ") if t])

    def pad(seqs):
        return [s[:NUM_STEPS] + ["<pad>"] * (NUM_STEPS - len(s[:NUM_STEPS])) for s in seqs]

    def vocab(seqs):
        c = collections.Counter(t for s in seqs for t in s)
        return sorted({"<unk>"} | {t for t, n in c.items() if n >= 2})

    src_p = pad(src)
    tgt_p = [["<bos>"] + s for s in pad(tgt)]
    sv, tv = vocab(src_p), vocab(tgt_p)
    return src_p, tgt_p, sv, tv


def ids(tokens, vocab_index):
    unk = vocab_index["<unk>"]
    return [vocab_index.get(t, unk) for t in tokens]


def bleu(pred, label, k=2):  # D2L's BLEU (spec §6)
    p, l = pred.split(" "), label.split(" ")
    lp, ll = len(p), len(l)
    score = math.exp(min(0, 1 - ll / lp))
    for n in range(1, min(k, lp) + 1):
        matches, subs = 0, collections.defaultdict(int)
        for i in range(ll - n + 1):
            subs[" ".join(l[i:i + n])] += 1
        for i in range(lp - n + 1):
            g = " ".join(p[i:i + n])
            if subs[g] > 0:
                matches += 1
                subs[g] -= 1
        score *= math.pow(matches / (lp - n + 1), math.pow(0.5, n))
    return score


def make_bahdanau(vs, vt, bidirectional=False):
    import gen_gru_fixtures as g
    enc = (g.BiEncoder if bidirectional else g.Seq2SeqEncoder)(vs, 256, 256, 2, dropout=0.2)
    dec = g.Seq2SeqAttentionDecoder(vt, 256, 256, 2, dropout=0.2)
    for rnn in (enc.rnn, dec.rnn):  # EN init_seq2seq: Xavier on GRU weights; Lazy layers keep defaults
        for name, p in rnn.named_parameters():
            if name.startswith("weight"):
                torch.nn.init.xavier_uniform_(p)
    return g.EncoderDecoder(enc, dec)


def predict_bahdanau(net, src, n_valid, bos, eos):
    """Greedy; returns output ids and, per output token (its <eos> included), the attention argmax."""
    enc_out = net.encoder(torch.tensor([src]))
    state = net.decoder.init_state(enc_out, torch.tensor([n_valid]))
    out, argmax, tok = [], [], bos
    for _ in range(NUM_STEPS):
        y, state = net.decoder(torch.tensor([[tok]]), state)
        tok = int(y[0, -1].argmax())
        argmax.append(int(net.decoder.attention_weights[-1].reshape(-1).argmax()))
        if tok == eos:
            break
        out.append(tok)
    return out, argmax


def run_seed(seed, data, threads, model="transformer", bidirectional=False):
    src_p, tgt_p, sv, tv = data
    si, ti = {t: i for i, t in enumerate(sv)}, {t: i for i, t in enumerate(tv)}
    X = torch.tensor([ids(s, si) for s in src_p])
    T = torch.tensor([ids(t, ti) for t in tgt_p])
    pad_s = si["<pad>"]
    vl = (X != pad_s).sum(1)
    dec_in, Y = T[:, :-1], T[:, 1:]
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    if model == "bahdanau":
        net, lr = make_bahdanau(len(sv), len(tv), bidirectional), 5e-3
    else:
        net, lr = d2l.Seq2Seq(len(sv), len(tv), h=256, ffn_h=64, heads=4, blks=2, dropout=0.2), 1e-3
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for _ in range(30):
        perm = torch.randperm(NUM_TRAIN)
        for b in range(0, NUM_TRAIN, 128):
            idx = perm[b:b + 128]
            out = net(X[idx], dec_in[idx], vl[idx])
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), Y[idx].reshape(-1))  # unmasked (spec §1.12)
            opt.zero_grad()
            loss.backward()
            d2l.clip_gradients(net.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
    for m in net.modules():  # prediction: no dropout, causal self-attention kept (train-mode mask)
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    res, mono = [], None
    with torch.no_grad():
        for eng, fra in BOOK:
            toks = (eng + " <eos>").split(" ")
            src = ids(toks + ["<pad>"] * (NUM_STEPS - len(toks)), si)
            if model == "bahdanau":
                net.eval()
                out, argmax = predict_bahdanau(net, src, len(toks), ti["<bos>"], ti["<eos>"])
                pred = " ".join(tv[t] for t in out)
                res.append((eng, pred, bleu(pred, fra) if pred else 0.0))
                if eng == "i'm home .":
                    mono = (all(a <= b for a, b in zip(argmax, argmax[1:])), argmax)
                continue
            enc = net.encoder(torch.tensor([src]), torch.tensor([len(toks)]))
            out = [ti["<bos>"]]
            for _ in range(NUM_STEPS):  # full recomputation: decoder position t at step t
                tok = int(net.decoder(torch.tensor([out]), enc, torch.tensor([len(toks)]))[0, -1].argmax())
                if tok == ti["<eos>"]:
                    break
                out.append(tok)
            pred = " ".join(tv[t] for t in out[1:])
            res.append((eng, pred, bleu(pred, fra) if pred else 0.0))
    return statistics.mean(losses[-2:] if model == "transformer" else losses[-4:]), res, mono


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("QKV_DATA", "../shared/data/fra-eng.zip"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-vocab")
    ap.add_argument("--model", choices=["transformer", "bahdanau"], default="transformer")
    ap.add_argument("--bidirectional", action="store_true",
                    help="bahdanau: the brnn encoder of tools/gen_gru_fixtures.py (BiEncoder), as qkv train "
                         "--bidirectional")
    a = ap.parse_args()
    if not os.path.exists(a.data):
        sys.exit(f"data not found: {a.data} (pass --data or set QKV_DATA)")
    data = load(a.data)
    print(f"vocabularies: source {len(data[2])}, target {len(data[3])} (spec: 194 / 214)")
    if a.check_vocab:
        for name, v in (("src_vocab.txt", data[2]), ("tgt_vocab.txt", data[3])):
            theirs = open(os.path.join(a.check_vocab, name), encoding="utf-8").read().split("\n")[:-1]
            print(f"{name}: {'identical to' if theirs == v else 'DIFFERS from'} qkv's")
    rows = []
    for s in a.seeds:
        loss, res, mono = run_seed(s, data, a.threads, a.model, a.bidirectional)
        mean = statistics.mean(b for _, _, b in res)
        rows.append((s, loss, mean, res, mono))
        print(f"seed {s}: loss {loss:.4f}, book BLEU {mean:.3f}: " +
              "; ".join(f"{e} => {p} ({b:.3f})" for e, p, b in res) +
              (f"; i'm home . attention argmax {mono[1]} monotone {'yes' if mono[0] else 'no'}" if mono else ""),
              flush=True)
    print("\n| seed | final train loss (last 2 batches) | mean book BLEU | translations |\n|---|---|---|---|")
    for s, loss, mean, res, _ in rows:
        print(f"| {s} | {loss:.3f} | {mean:.3f} | " + "; ".join(f"{e} => {p}" for e, p, _ in res) + " |")
    if a.model == "bahdanau":
        print(f"monotone attention for i'm home .: {sum(r[4][0] for r in rows)} of {len(rows)} seeds, "
              f"{sum(r[4][0] and len(set(r[4][1])) > 1 for r in rows)} of them moving along the source")
    print(f"| **median** | **{statistics.median(r[1] for r in rows):.3f}** | "
          f"**{statistics.median(r[2] for r in rows):.3f}** | |")


if __name__ == "__main__":
    main()
