#!/usr/bin/env python3
"""The decoder-only language model of `qkv train --model lm --preset lm` in PyTorch (1.13), for a
side-by-side run on the same machine and the same wall-clock budget (bench/RESULTS.md, "Decoder-only
language model").

Same data (The Time Machine after D2L 9.2's preprocessing: lower case, every run of non-letters
one space; characters; the last 10% held out; training windows of T + 1 every T characters), same
model (token embedding, pre-norm blocks x + MHA(LN x), x + FFN(LN x), RoPE rotate-half on q and k,
final LN, output layer; C 128, 2 blocks, 4 heads, FFN 512, dropout 0.1), same optimisation (Adam
β2 0.98, lr 1e-3 with 100 warmup steps then 1/√step, clip 1, batch 32, T 64, epochs reshuffled
with seed 0). Prints steps, training tokens/s and the validation perplexity at the end.

    PYENV_VERSION=system python3 bench/lm_torch.py --data ../shared/data/timemachine.txt --budget 120 --threads 2
"""
import argparse
import math
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load(path, T, valid_fraction=0.1):
    text = re.sub("[^A-Za-z]+", " ", open(path, encoding="utf-8", errors="replace").read()).lower().strip()
    chars = sorted(set(text) - {" "})
    itos = ["<unk>", "<pad>", " "] + chars
    stoi = {c: i for i, c in enumerate(itos)}
    ids = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    split = int(len(ids) * (1 - valid_fraction))

    def windows(a, b):
        starts = range(a, b - T, T)
        x = torch.stack([ids[s:s + T] for s in starts if s + T + 1 <= b])
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts if s + T + 1 <= b])
        return x, y

    return windows(0, split), windows(split, len(ids)), len(itos)


def rope(x, base=10000.0):  # x (B, H, T, D), rotate-half layout
    T, D = x.shape[-2], x.shape[-1]
    inv = base ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    a, b = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, C, H, F_, p):
        super().__init__()
        self.H, self.p = H, p
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(C, F_), nn.ReLU(), nn.Linear(F_, C))
        self.drop = nn.Dropout(p)
        causal = torch.ones(4096, 4096, dtype=torch.bool).tril()
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = (w(h).view(B, T, self.H, C // self.H).transpose(1, 2) for w in (self.W_q, self.W_k, self.W_v))
        q, k = rope(q), rope(k)
        s = q @ k.transpose(-1, -2) / math.sqrt(C // self.H)
        s = s.masked_fill(~self.causal[:T, :T], float("-inf"))
        a = F.dropout(s.softmax(-1), self.p, self.training) @ v
        x = x + self.drop(self.W_o(a.transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.ffn(self.ln2(x)))


class LM(nn.Module):
    def __init__(self, V, C=128, H=4, L=2, F_=512, p=0.1):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.blks = nn.ModuleList(Block(C, H, F_, p) for _ in range(L))
        self.ln_f, self.dense = nn.LayerNorm(C), nn.Linear(C, V)

    def forward(self, x):
        h = self.emb(x)
        for b in self.blks:
            h = b(h)
        return self.dense(self.ln_f(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/timemachine.txt")
    ap.add_argument("--budget", type=float, default=120.0, help="training seconds (validation excluded)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    (xt, yt), (xv, yv), V = load(a.data, a.num_steps)
    m = LM(V)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.9, 0.98))
    warm = 100
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, math.sqrt(warm / (s + 1))))
    g = torch.Generator().manual_seed(0)
    steps, tokens, t0 = 0, 0, time.perf_counter()
    done = False
    while not done:
        perm = torch.randperm(len(xt), generator=g)
        for i in range(0, len(perm), a.batch_size):
            idx = perm[i:i + a.batch_size]
            m.train()
            loss = F.cross_entropy(m(xt[idx]).reshape(-1, V), yt[idx].reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            sched.step()
            steps += 1
            tokens += idx.numel() * a.num_steps
            if time.perf_counter() - t0 >= a.budget:
                done = True
                break
    secs = time.perf_counter() - t0
    m.eval()
    with torch.no_grad():
        tot, n = 0.0, 0
        for i in range(0, len(xv), 256):
            lo = m(xv[i:i + 256])
            tot += F.cross_entropy(lo.reshape(-1, V), yv[i:i + 256].reshape(-1), reduction="sum").item()
            n += yv[i:i + 256].numel()
    print(f"RESULT torch {torch.__version__}: {steps} steps in {secs:.1f} s, {tokens / secs:.0f} training tokens/s, "
          f"validation loss {tot / n:.4f}, perplexity {math.exp(tot / n):.3f} ({n} held-out characters, "
          f"{sum(p.numel() for p in m.parameters())} parameters)")


if __name__ == "__main__":
    main()
