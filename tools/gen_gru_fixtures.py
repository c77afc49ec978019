#!/usr/bin/env python3
"""PyTorch parity fixtures for the GRU and D2L's Bahdanau model (issue 5).

  PYENV_VERSION=system python3 tools/gen_gru_fixtures.py

Writes, into tests/fixtures/:
  gru_layer.safetensors      torch.nn.GRU(5, 7, num_layers=2) (dropout off) on X (T=4, B=3, 5)
                             with h0 (2, 3, 7): outputs, final state, and the gradients of every
                             parameter, X and h0 for loss = Σ out ⊙ R_out + Σ h_n ⊙ R_state.
  gru_bahdanau.safetensors   D2L's Seq2SeqEncoder + Seq2SeqAttentionDecoder (classes written
                             below from the spec, d2l_spec.md §1.3, §1.10-1.11; no d2l package),
                             V_src 11, V_tgt 13, E 8, H 16, 2 layers, dropout 0, B 4, Ts 7, Tt 6:
                             logits, per-step attention weights, the EN unmasked mean
                             cross-entropy and the gradient of every parameter ("p.<name>" /
                             "grad.<name>" with the state_dict names).
  gru_bidirectional.safetensors
                             "gru.*": torch.nn.GRU(4, 6, num_layers=2, bidirectional=True)
                             (dropout off) on X (T=5, B=3, 4) with h0 (4, 3, 6), as gru_layer
                             (outputs (5, 3, 12), final state, every gradient; "_noh0" without
                             h0). "bahdanau.*": as gru_bahdanau, with the OpenNMT "brnn" encoder
                             BiEncoder below (a bidirectional GRU of H/2 per direction; the
                             decoder's initial state per layer = [forward final | reverse final]).
"""
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))
META = {"made_by": "PYENV_VERSION=system python3 tools/gen_gru_fixtures.py", "torch": torch.__version__}


def gru_tensors(T, B, I, H, L, bidirectional, seed):
    torch.manual_seed(seed)
    D = 2 if bidirectional else 1
    rnn = nn.GRU(I, H, L, bidirectional=bidirectional)
    X = torch.randn(T, B, I, requires_grad=True)
    h0 = torch.randn(D * L, B, H, requires_grad=True)
    r_out, r_state = torch.randn(T, B, D * H), torch.randn(D * L, B, H)
    out, hn = rnn(X, h0)
    loss = (out * r_out).sum() + (hn * r_state).sum()
    loss.backward()
    d = {"X": X, "h0": h0, "R_out": r_out, "R_state": r_state, "out": out, "h_n": hn,
         "grad.X": X.grad, "grad.h0": h0.grad}
    for name, p in rnn.named_parameters():
        d["p." + name] = p
        d["grad." + name] = p.grad.clone()
    # Same weights, no h0 (zeros): only outputs and parameter gradients.
    rnn.zero_grad()
    out0, hn0 = rnn(X.detach())
    ((out0 * r_out).sum() + (hn0 * r_state).sum()).backward()
    d["out_noh0"], d["h_n_noh0"] = out0, hn0
    for name, p in rnn.named_parameters():
        d["grad_noh0." + name] = p.grad.clone()
    return d


def gru_layer():
    d = gru_tensors(T=4, B=3, I=5, H=7, L=2, bidirectional=False, seed=1)
    safetensors_min.save(os.path.join(FIX, "gru_layer.safetensors"), d, META)


# ---- D2L classes (EN edition, LazyLinear replaced by Linear with explicit input sizes) ----------

def masked_softmax(X, valid_lens):
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = X.reshape(-1, shape[-1])
    mask = torch.arange(shape[-1], dtype=torch.float32)[None, :] < valid_lens[:, None]
    X = X.masked_fill(~mask, -1e6)
    return F.softmax(X.reshape(shape), dim=-1)


class AdditiveAttention(nn.Module):
    def __init__(self, key_size, query_size, num_hiddens, dropout):
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class Seq2SeqEncoder(nn.Module):
    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout)

    def forward(self, X):
        embs = self.embedding(X.t().long())          # (T, B, E)
        return self.rnn(embs)                        # (T, B, H), (L, B, H)


class Seq2SeqAttentionDecoder(nn.Module):
    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, dropout=dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        outputs, hidden_state = enc_outputs
        return outputs.permute(1, 0, 2), hidden_state, enc_valid_lens

    def forward(self, X, state):
        enc_outputs, hidden_state, enc_valid_lens = state
        X = self.embedding(X).permute(1, 0, 2)        # (T, B, E)
        outputs, self.attention_weights = [], []
        for x in X:
            query = hidden_state[-1].unsqueeze(1)     # (B, 1, H)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)
            x = torch.cat((context, x.unsqueeze(1)), dim=-1)   # context first
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
            self.attention_weights.append(self.attention.attention_weights)
        outputs = self.dense(torch.cat(outputs, dim=0))
        return outputs.permute(1, 0, 2), [enc_outputs, hidden_state, enc_valid_lens]


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, enc_X, dec_X, enc_valid_lens):
        enc_outputs = self.encoder(enc_X)
        state = self.decoder.init_state(enc_outputs, enc_valid_lens)
        return self.decoder(dec_X, state)[0]


class BiEncoder(nn.Module):
    """OpenNMT's "brnn" encoder: bidirectional GRU with H/2 per direction; outputs (T, B, H) =
    [forward | reverse]; state (L, B, H), layer l = [forward final | reverse final] of layer l."""
    def __init__(self, V, E, H, L, dropout=0):
        super().__init__()
        self.embedding = nn.Embedding(V, E)
        self.rnn = nn.GRU(E, H // 2, L, dropout=dropout, bidirectional=True)
        self.L = L

    def forward(self, X):
        out, st = self.rnn(self.embedding(X.t().long()))   # (T, B, H), (2L, B, H/2)
        L, B = self.L, st.shape[1]
        return out, st.view(L, 2, B, -1).permute(0, 2, 1, 3).reshape(L, B, -1)


def bahdanau_tensors(encoder_class, seed):
    torch.manual_seed(seed)
    Vs, Vt, E, H, L, B, Ts, Tt = 11, 13, 8, 16, 2, 4, 7, 6
    model = EncoderDecoder(encoder_class(Vs, E, H, L), Seq2SeqAttentionDecoder(Vt, E, H, L))
    src = torch.randint(0, Vs, (B, Ts))
    valid = torch.tensor([7, 3, 1, 5])
    dec_X = torch.randint(0, Vt, (B, Tt))
    Y = torch.randint(0, Vt, (B, Tt))
    logits = model(src, dec_X, valid)
    attn = torch.cat(model.decoder.attention_weights, dim=1)   # (B, Tt, Ts)
    loss = F.cross_entropy(logits.reshape(-1, Vt), Y.reshape(-1))
    loss.backward()
    d = {"src": src, "valid_lens": valid, "dec_X": dec_X, "Y": Y, "logits": logits,
         "attention_weights": attn, "loss": loss.reshape(1)}
    for name, p in model.named_parameters():
        d["p." + name] = p
        d["grad." + name] = p.grad.clone()
    return d


def bahdanau():
    safetensors_min.save(os.path.join(FIX, "gru_bahdanau.safetensors"), bahdanau_tensors(Seq2SeqEncoder, 2), META)


def bidirectional():
    d = {"gru." + k: v for k, v in gru_tensors(T=5, B=3, I=4, H=6, L=2, bidirectional=True, seed=3).items()}
    d.update({"bahdanau." + k: v for k, v in bahdanau_tensors(BiEncoder, 4).items()})
    safetensors_min.save(os.path.join(FIX, "gru_bidirectional.safetensors"), d, META)


if __name__ == "__main__":
    gru_layer()
    bahdanau()
    bidirectional()
    print("wrote", *(os.path.join(FIX, f + ".safetensors") for f in ("gru_layer", "gru_bahdanau", "gru_bidirectional")))
