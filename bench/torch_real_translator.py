#!/usr/bin/env python3
"""qkv's real-text translator (preset real, issue 45 item 6) in PyTorch: the same model, data, recipe
and decoding, to compare BLEU / chrF and training tokens/s with `qkv train --preset real`.

Input: the folder `qkv data --preset real --out DIR` writes (train/valid/test.{en,fr}: the source-
disjoint split, raw text; spm.model: the shared SentencePiece model, ids <unk> 0 <pad> 1 <bos> 2
<eos> 3). Runs in the PyTorch 2.6 chroot (../shared/bench/torch2/setup_chroot.sh), plus
`chroot /opt/trixie apt-get install -y --no-install-recommends python3-sentencepiece` (trixie has no
python3-sacrebleu). The chroot sees /work, not the host's /tmp: DIR and OUT must lie under /work.
The 20-minute comparison (2 threads, beam 4; ~1 min for qkv data), from the project root:
    ./build/bin/qkv data --preset real --out "$PWD/build/realdata"
    chroot /opt/trixie /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 python3 \
        "$PWD/bench/torch_real_translator.py" --data "$PWD/build/realdata" --out "$PWD/build/torch_real" \
        --time-budget 1200 --threads 2
    ./build/bin/qkv score --hyp-file build/torch_real/hyp.test.fr --ref-file build/realdata/test.fr
It prints training tokens/s (non-<pad> target tokens per second of training time, as qkv) and writes
OUT/hyp.test.fr (one detokenized hypothesis per line, test order) and OUT/ref.test.fr (their
references); qkv score gives sacreBLEU's BLEU and chrF2 (qkv's implementation, as qkv eval); with
sacrebleu importable the script prints them too.

Matches qkv (models/transformer.cpp, nn/, optim/, data/batcher.cpp, decode/beam_search.cpp): post-norm
D2L blocks (LayerNorm(dropout(Y) + X)), bias-free attention projections with dropout on the weights,
FFN dense2(relu(dense1)), D2L's sinusoidal PE (dropout after the add), embeddings times sqrt(d); one
(V, d) matrix N(0, 1/d) for both embeddings and the output layer (which has a bias); Linear init
U(+-1/sqrt(fan_in)); label-smoothed CE (eps/V) over non-<pad> labels; Adam(0.9, 0.98, 1e-9), lr *
min(step/warmup, sqrt(warmup/step)), clipping at norm 1; ceil(cost/batch_tokens) batches per epoch
(cost: max(src, tgt) length with <eos>) cut from pools of bucket_pool batches sorted by length,
shuffled, trimmed; beam search over the best 2K candidates, GNMT penalty ((5+n)/6)^alpha, <unk>
banned. Differences: the random streams (init, dropout, shuffles) are PyTorch's; padded batches (qkv
packs the non-<pad> rows: same loss); decoding recomputes the prefix (qkv caches keys and values).
"""
import argparse, math, os, random, sys, time  # noqa: E401

import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F

UNK, PAD, BOS, EOS = 0, 1, 2, 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--data", required=True, help="folder written by `qkv data` (train/valid/test.<lang>, spm.model)")
    a("--out", required=True, help="output folder (hyp.test.<tgt>)")
    a("--src-lang", default="en"), a("--tgt-lang", default="fr"), a("--seed", type=int, default=0)
    a("--time-budget", type=float, default=1200, help="seconds of training time (the comparison's 20 minutes; "
      "the real preset's own run is 7200)")
    a("--max-steps", type=int, default=0, help="stop after N steps (0: none)")
    a("--epochs", type=int, default=1000), a("--threads", type=int, default=2, help="torch.set_num_threads")
    a("--num-hiddens", type=int, default=256), a("--num-blks", type=int, default=3)
    a("--num-heads", type=int, default=4), a("--ffn-num-hiddens", type=int, default=1024)
    a("--dropout", type=float, default=0.1), a("--pe-max-len", type=int, default=128)
    a("--num-steps", type=int, default=128, help="length cap in pieces, <eos> included (the real preset's)")
    a("--batch-tokens", type=int, default=2000), a("--bucket-pool", type=int, default=50)
    a("--lr", type=float, default=1e-3), a("--warmup", type=int, default=1000)
    a("--label-smoothing", type=float, default=0.1), a("--clip", type=float, default=1.0)
    a("--log-every", type=int, default=50, help="print a step line every N steps (0: none)")
    a("--beam", type=int, default=4, help="1: greedy"), a("--length-penalty", type=float, default=0.6)
    a("--max-len", type=int, default=96, help="most output pieces, <eos> included")
    a("--test-limit", type=int, default=0, help="decode only the first N test sentences (0: all)")
    a("--decode-batch", type=int, default=64, help="sources per decoder batch")
    a("--autocast", action="store_true", help="train under torch.autocast('cpu', torch.bfloat16): PyTorch's mixed "
      "precision, against `qkv train --precision bf16` (the loss in fp32 as qkv's)")
    a("--load", help="OUT/model.pt of an earlier run: no training, decode only")
    a("--load-qkv", help="a qkv --preset real model folder's model.safetensors: no training, decode only "
      "(the same weights in both frameworks: decoding speed and BLEU side by side)")
    return p.parse_args()


# ---- model -----------------------------------------------------------------------------------------

class MultiHeadAttention(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p = h, p
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, q, k, v, mask=None, causal=False):
        B, Tq, d = q.shape
        split = lambda x: x.view(B, x.size(1), self.h, d // self.h).transpose(1, 2)
        o = F.scaled_dot_product_attention(split(self.W_q(q)), split(self.W_k(k)), split(self.W_v(v)), attn_mask=mask,
                                           dropout_p=self.p if self.training else 0.0, is_causal=causal)
        return self.W_o(o.transpose(1, 2).reshape(B, Tq, d))


class AddNorm(nn.Module):  # post-norm residual (D2L 11.7)
    def __init__(self, d, p):
        super().__init__()
        self.dropout, self.ln = nn.Dropout(p), nn.LayerNorm(d)  # eps 1e-5, as qkv

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


def FFN(d, f):
    return nn.Sequential(nn.Linear(d, f), nn.ReLU(), nn.Linear(f, d))


class EncoderBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.num_hiddens
        self.attention, self.addnorm1 = MultiHeadAttention(d, a.num_heads, a.dropout), AddNorm(d, a.dropout)
        self.ffn, self.addnorm2 = FFN(d, a.ffn_num_hiddens), AddNorm(d, a.dropout)

    def forward(self, X, mask):
        Y = self.addnorm1(X, self.attention(X, X, X, mask))
        return self.addnorm2(Y, self.ffn(Y))


class DecoderBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.num_hiddens
        self.attention1, self.addnorm1 = MultiHeadAttention(d, a.num_heads, a.dropout), AddNorm(d, a.dropout)
        self.attention2, self.addnorm2 = MultiHeadAttention(d, a.num_heads, a.dropout), AddNorm(d, a.dropout)
        self.ffn, self.addnorm3 = FFN(d, a.ffn_num_hiddens), AddNorm(d, a.dropout)

    def forward(self, X, enc, enc_mask):
        Y = self.addnorm1(X, self.attention1(X, X, X, causal=True))
        Z = self.addnorm2(Y, self.attention2(Y, enc, enc, enc_mask))
        return self.addnorm3(Z, self.ffn(Z))


class Transformer(nn.Module):
    """D2L 11.7's encoder-decoder with tied embeddings (qkv's --preset real model)."""

    def __init__(self, a, V):
        super().__init__()
        d = self.d = a.num_hiddens
        self.encoder = nn.ModuleList(EncoderBlock(a) for _ in range(a.num_blks))
        self.decoder = nn.ModuleList(DecoderBlock(a) for _ in range(a.num_blks))
        self.weight = nn.Parameter(torch.randn(V, d) / math.sqrt(d))  # embeddings and output layer
        self.bias = nn.Parameter(torch.empty(V).uniform_(-1 / math.sqrt(d), 1 / math.sqrt(d)))
        self.pe_dropout = nn.Dropout(a.dropout)
        X = torch.arange(a.pe_max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, d, 2, dtype=torch.float32) / d)
        P = torch.zeros(1, a.pe_max_len, d)
        P[:, :, 0::2], P[:, :, 1::2] = torch.sin(X), torch.cos(X)
        self.register_buffer("P", P)

    def embed(self, ids):
        return self.pe_dropout(F.embedding(ids, self.weight) * math.sqrt(self.d) + self.P[:, :ids.size(1)])

    @staticmethod
    def key_mask(valid_len, T):  # (B, 1, 1, T) bool: True = attend
        return (torch.arange(T)[None, :] < valid_len[:, None])[:, None, None, :]

    def encode(self, src, src_len):
        X, mask = self.embed(src), self.key_mask(src_len, src.size(1))
        for blk in self.encoder:
            X = blk(X, mask)
        return X

    def decode_hidden(self, dec_in, enc, src_len):
        X, mask = self.embed(dec_in), self.key_mask(src_len, enc.size(1))
        for blk in self.decoder:
            X = blk(X, enc, mask)
        return X

    def logits(self, hidden):
        return F.linear(hidden, self.weight, self.bias)


def load_qkv(model, path):
    """qkv's model.safetensors (PyTorch's names for D2L's modules) into this model: encoder.blks.i ->
    encoder.i, ffn.dense1 / dense2 -> ffn.0 / ffn.2, the tied embedding and output weight -> weight,
    decoder.dense.bias -> bias. Read with numpy (trixie has no python3-safetensors)."""
    import json, struct  # noqa: E401
    import numpy as np
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header, data = json.loads(fh.read(n)), fh.read()
    sd = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        b, e = v["data_offsets"]
        t = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy()).reshape(v["shape"])
        name = (k.replace("encoder.blks.", "encoder.").replace("decoder.blks.", "decoder.")
                 .replace("ffn.dense1", "ffn.0").replace("ffn.dense2", "ffn.2"))
        name = {"encoder.embedding.weight": "weight", "decoder.embedding.weight": "weight",
                "decoder.dense.weight": "weight", "decoder.dense.bias": "bias"}.get(name, name)
        assert name not in sd or torch.equal(sd[name], t), f"{k}: not tied to the other {name}"
        sd[name] = t
    r = model.load_state_dict(sd, strict=False)
    assert list(r.missing_keys) == ["P"] and not r.unexpected_keys, r  # P: the positional encoding, computed


# ---- data and batches (data/batcher.cpp) -----------------------------------------------------------

def encode(sp, lines, T):
    """ids + <eos>, cut to T (held-out pairs are cut; qkv data's train pairs all fit)."""
    return [(sp.encode(l) + [EOS])[:T] for l in lines]


def token_batches(src, tgt, batch_tokens, bucket_pool, rng):
    """One epoch's batches of row indices as qkv's Batcher(batch_tokens, bucket_pool, shuffle) cuts them."""
    n = len(src)
    cost = [max(1, len(s), len(t)) for s, t in zip(src, tgt)]
    nb = max(1, min(n, -(-sum(cost) // batch_tokens)))
    order = list(range(n))
    rng.shuffle(order)
    pool = bucket_pool * max(1, n // nb)
    for p in range(0, n, pool):
        order[p:p + pool] = sorted(order[p:p + pool], key=lambda r: cost[r])  # stable
    total, run, i, batches = float(sum(cost)), 0.0, 0, []
    for k in range(nb):  # batch k ends where the running cost reaches (k + 1) / nb of the total
        goal, end = total * (k + 1) / nb, i + 1
        run += cost[order[i]]
        while end < n - (nb - 1 - k) and run + cost[order[end]] <= goal + 1e-9:
            run += cost[order[end]]
            end += 1
        if k == nb - 1:
            end = n
        batches.append(order[i:end])
        i = end
    rng.shuffle(batches)
    return batches


def pad(seqs):
    T = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (T - len(s)) for s in seqs]), torch.tensor([len(s) for s in seqs])


def make_batch(rows, src, tgt):
    X, X_len = pad([src[r] for r in rows])
    label, _ = pad([tgt[r] for r in rows])
    dec_in = torch.cat([torch.full((len(rows), 1), BOS), label[:, :-1]], 1)
    dec_in[dec_in == EOS] = PAD  # the <eos> of the longest row is never an input; shorter rows' are pads
    return X, X_len, dec_in, label


def loss_fn(model, X, X_len, dec_in, label, eps):
    hidden = model.decode_hidden(dec_in, model.encode(X, X_len), X_len)
    keep = label != PAD  # the output layer only on the positions the loss counts
    return F.cross_entropy(model.logits(hidden[keep]), label[keep], label_smoothing=eps), int(keep.sum())


# ---- decoding (decode/beam_search.cpp; K = 1 is greedy) --------------------------------------------

@torch.no_grad()
def beam_search(model, src, src_len, K, alpha, max_len):
    lp = lambda n: ((5 + n) / 6) ** alpha if alpha else 1.0
    B, dead = src.size(0), -math.inf
    enc = model.encode(src, src_len).repeat_interleave(K, 0)
    enc_len = src_len.repeat_interleave(K)
    tokens = [[[] for _ in range(K)] for _ in range(B)]
    score = [[0.0] + [dead] * (K - 1) for _ in range(B)]
    finished, done = [[] for _ in range(B)], [False] * B
    for t in range(max_len):
        act = [b for b in range(B) if not done[b]]
        rows = torch.tensor([b * K + k for b in act for k in range(K)])
        dec_in = torch.tensor([[BOS] + tokens[b][k] for b in act for k in range(K)])
        logp = F.log_softmax(model.logits(model.decode_hidden(dec_in, enc[rows], enc_len[rows])[:, -1]), -1)
        logp[:, UNK] = dead
        top_v, top_i = (x.tolist() for x in logp.topk(min(2 * K, logp.size(1)), -1))
        for a, b in enumerate(act):
            cand = [(score[b][k] + v, k, i) for k in range(K) if score[b][k] != dead
                    for v, i in zip(top_v[a * K + k], top_i[a * K + k])]
            cand.sort(key=lambda c: (-c[0], c[1], c[2]))
            new_tok, new_score = [], []
            for r, (s, k, v) in enumerate(cand[:2 * K]):
                if len(new_tok) == K:
                    break
                if v == EOS:
                    if r < K:
                        finished[b].append((s / lp(len(tokens[b][k]) + 1), tokens[b][k]))
                    continue
                new_tok.append(tokens[b][k] + [v])
                new_score.append(s)
            n_live = len(new_tok)
            if len(finished[b]) >= K:
                kth = sorted((f[0] for f in finished[b]), reverse=True)[K - 1]
                done[b] = n_live == 0 or new_score[0] / lp(t + 1) <= kth
            done[b] = done[b] or n_live == 0
            fill = new_tok[0] if new_tok else [PAD] * (t + 1)
            tokens[b] = new_tok + [fill] * (K - n_live)  # dead rows keep the batch rectangular
            score[b] = (new_score + [dead] * (K - n_live)) if not done[b] else [dead] * K
        if all(done):
            break
    out = []
    for b in range(B):
        if not done[b]:  # cut at max_len: live beams count as unfinished hypotheses
            finished[b] += [(s / lp(len(tk)), tk) for s, tk in zip(score[b], tokens[b]) if s != dead]
        out.append(sorted(finished[b], key=lambda f: -f[0])[0][1] if finished[b] else [])
    return out


def translate(model, sp, lines, a):
    src = encode(sp, lines, a.num_steps)
    order = sorted(range(len(src)), key=lambda i: len(src[i]))  # similar lengths per batch; output in input order
    hyps = [None] * len(src)
    for p in range(0, len(order), a.decode_batch):
        rows = order[p:p + a.decode_batch]
        X, X_len = pad([src[r] for r in rows])
        for r, ids in zip(rows, beam_search(model, X, X_len, a.beam, a.length_penalty, a.max_len)):
            hyps[r] = sp.decode(ids).replace("\n", " ")
    return hyps


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.data, "spm.model"))
    assert (sp.unk_id(), sp.pad_id(), sp.bos_id(), sp.eos_id()) == (UNK, PAD, BOS, EOS), "spm.model: not qkv's ids"
    def f(split, lang):  # the lines of qkv data's file (each ends in a newline)
        with open(os.path.join(a.data, f"{split}.{lang}"), encoding="utf-8") as fh:
            return fh.read().split("\n")[:-1]
    enc = lambda split, lang: encode(sp, f(split, lang), a.num_steps)  # noqa: E731
    train_src, train_tgt = enc("train", a.src_lang), enc("train", a.tgt_lang)
    valid_src, valid_tgt = enc("valid", a.src_lang), enc("valid", a.tgt_lang)
    n_test = a.test_limit or None
    test_src, test_ref = f("test", a.src_lang)[:n_test], f("test", a.tgt_lang)[:n_test]
    model = Transformer(a, sp.get_piece_size())
    print(f"data: {len(train_src)} train, {len(valid_src)} valid, {len(test_src)} test pairs; {sp.get_piece_size()} "
          f"pieces; {sum(p.numel() for p in model.parameters())} parameters; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.98), eps=1e-9)
    if a.load:  # decode only
        model.load_state_dict(torch.load(a.load))
        a.epochs = 0
    if a.load_qkv:  # decode only, qkv's weights
        load_qkv(model, a.load_qkv)
        a.epochs = 0
    step, tokens, train_s, epoch, stop = 0, 0, 0.0, 0, False
    while epoch < a.epochs and not stop:
        model.train()
        for rows in token_batches(train_src, train_tgt, a.batch_tokens, a.bucket_pool, rng):
            t0 = time.perf_counter()  # from the batch's making to the update, as qkv's training clock
            X, X_len, dec_in, label = make_batch(rows, train_src, train_tgt)
            step += 1
            for g in opt.param_groups:
                g["lr"] = a.lr * min(step / a.warmup, math.sqrt(a.warmup / step))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
                loss, n = loss_fn(model, X, X_len, dec_in, label, a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip, error_if_nonfinite=True)
            opt.step()
            train_s += time.perf_counter() - t0
            tokens += n
            if a.log_every and step % a.log_every == 0:
                print(f"step {step} epoch {epoch + 1} loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.2e} "
                      f"{tokens / train_s:.0f} tok/s {train_s:.0f}s", flush=True)
            if (a.time_budget and train_s >= a.time_budget) or (a.max_steps and step >= a.max_steps):
                stop = True
                break
        else:
            epoch += 1
    print(f"trained {step} steps ({epoch} full epochs) in {train_s:.1f} s of training time: "
          f"{tokens / max(train_s, 1e-9):.0f} target tokens/s", flush=True)
    os.makedirs(a.out, exist_ok=True)
    if not (a.load or a.load_qkv):
        torch.save(model.state_dict(), os.path.join(a.out, "model.pt"))  # --load decodes it again
    model.eval()
    with torch.no_grad():  # CE without label smoothing, as qkv's val_loss
        vl = [loss_fn(model, *make_batch(range(p, min(p + 256, len(valid_src))), valid_src, valid_tgt), 0.0)
              for p in range(0, len(valid_src), 256)]
    print(f"valid loss {sum(l.item() * n for l, n in vl) / max(1, sum(n for _, n in vl)):.4f}", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()  # wall, and CPU time (a shared machine's measure)
    hyps = translate(model, sp, test_src, a)
    decode_cpu = time.process_time() - c0
    hyp_path, ref_path = (os.path.join(a.out, f"{w}.test.{a.tgt_lang}") for w in ("hyp", "ref"))
    for path, lines in ((hyp_path, hyps), (ref_path, test_ref)):  # ref: test.fr, or its first --test-limit
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for line in lines)
    print(f"decoded {len(hyps)} test sentences ({'greedy' if a.beam == 1 else f'beam {a.beam}'}) in "
          f"{time.perf_counter() - t0:.1f} s ({decode_cpu:.1f} s CPU): {hyp_path}", flush=True)
    print("\n".join(f"  {s}  =>  {h}" for s, h in list(zip(test_src, hyps))[:5]))
    try:
        import sacrebleu
        print(sacrebleu.corpus_bleu(hyps, [test_ref]), sacrebleu.corpus_chrf(hyps, [test_ref]), sep="\n")
    except ImportError:
        print(f"score: qkv score --hyp-file {hyp_path} --ref-file {ref_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
