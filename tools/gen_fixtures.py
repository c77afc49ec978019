#!/usr/bin/env python3
"""PyTorch golden fixtures for qkv's D2L attention modules and the Nadaraya-Watson seed program.

Run from the repository root (Debian's python3-torch 1.13; no d2l or safetensors package needed):

    PYENV_VERSION=system python3 tools/gen_fixtures.py

Writes tests/fixtures/*.safetensors (and two CSV files for the CLI test). Each file's
__metadata__ records the command above, the torch version and the seed of its case.

The D2L classes below are written from /work/shared/docs/d2l_spec.md §1 in the ZH style
(constructors with explicit sizes, nn.Linear). The parametric Nadaraya-Watson program is the
seed document's (shared/seeds/000_*.txt) with the plotting removed; the ZH variant follows
d2l_spec.md §4. safetensors files are written by hand: 8-byte little-endian header length, the
JSON header padded with spaces to a multiple of 8, then raw little-endian row-major data.
"""
import json
import math
import os
import struct

import torch
from torch import nn

COMMAND = "PYENV_VERSION=system python3 tools/gen_fixtures.py"
OUT_DIR = os.path.join("tests", "fixtures")

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bool: "BOOL"}


def write_safetensors(path, tensors, meta):
    """tensors: list of (name, tensor); meta: dict of str -> str."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()  # numpy on x86-64 is little-endian
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def meta(case, seed, **extra):
    m = {"command": COMMAND, "torch": torch.__version__, "case": case, "seed": seed}
    m.update(extra)
    return m


# ---- D2L classes (ZH constructors), d2l_spec.md §1 -------------------------------------------

def sequence_mask(X, valid_len, value=0.0):
    maxlen = X.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class AdditiveAttention(nn.Module):
    def __init__(self, key_size, query_size, num_hiddens, dropout):
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


def transpose_qkv(X, num_heads):
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    X = X.permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class MultiHeadAttention(nn.Module):
    def __init__(self, key_size, query_size, value_size, num_hiddens, num_heads, dropout,
                 bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens=None):
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        return self.W_o(transpose_output(output, self.num_heads))


class PositionalEncoding(nn.Module):
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :]
        return self.dropout(X)


class PositionWiseFFN(nn.Module):
    def __init__(self, ffn_num_input, ffn_num_hiddens, ffn_num_outputs):
        super().__init__()
        self.dense1 = nn.Linear(ffn_num_input, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X):
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    def __init__(self, normalized_shape, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


# ---- module cases ------------------------------------------------------------------------------

def module_case(name, seed, build, inputs, forward, weights=None):
    """Builds the module under torch.manual_seed(seed), runs forward on `inputs` (dict of
    name -> tensor; float ones get requires_grad), backpropagates sum(out * grad_out) and writes
    param.*, in.*, out, attention_weights (if given), grad.* to tests/fixtures/<name>.safetensors."""
    torch.manual_seed(seed)
    module = build()
    module.eval()  # dropout is 0 in every case; eval also matches qkv's default for the test
    for v in inputs.values():
        if v.dtype == torch.float32:
            v.requires_grad_(True)
    out = forward(module, inputs)
    grad_out = torch.randn(out.shape)
    (out * grad_out).sum().backward()
    t = [("param." + k, p) for k, p in module.named_parameters()]
    t += [("in." + k, v) for k, v in inputs.items()]
    t += [("in.grad_out", grad_out), ("out", out)]
    if weights is not None:
        t.append(("attention_weights", weights(module)))
    t += [("grad." + k, p.grad) for k, p in module.named_parameters()]
    t += [("grad." + k, v.grad) for k, v in inputs.items() if v.dtype == torch.float32]
    write_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), t, meta(name, seed))


def attention_cases():
    def qkv(B, Tq, Tk, dq, dk, dv):
        return {"queries": torch.randn(B, Tq, dq), "keys": torch.randn(B, Tk, dk),
                "values": torch.randn(B, Tk, dv)}

    def call(m, x):
        return m(x["queries"], x["keys"], x["values"], x.get("valid_lens"))

    torch.manual_seed(100)
    x = qkv(2, 3, 5, 4, 4, 3)
    x["valid_lens"] = torch.tensor([2, 4])
    module_case("dot_attention_vl1d", 100, lambda: DotProductAttention(0.0), x, call,
                lambda m: m.attention_weights)

    torch.manual_seed(101)
    x = qkv(2, 3, 5, 4, 4, 3)
    x["valid_lens"] = torch.tensor([[1, 3, 5], [2, 4, 5]])
    module_case("dot_attention_vl2d", 101, lambda: DotProductAttention(0.0), x, call,
                lambda m: m.attention_weights)

    # query and key sizes differ (5 vs 3); Tq != Tk
    torch.manual_seed(102)
    x = qkv(2, 3, 4, 5, 3, 2)
    x["valid_lens"] = torch.tensor([2, 3])
    module_case("additive_attention_vl1d", 102, lambda: AdditiveAttention(3, 5, 6, 0.0), x, call,
                lambda m: m.attention_weights)

    torch.manual_seed(103)
    x = qkv(2, 3, 4, 5, 3, 2)
    x["valid_lens"] = torch.tensor([[1, 2, 4], [3, 4, 2]])
    module_case("additive_attention_vl2d", 103, lambda: AdditiveAttention(3, 5, 6, 0.0), x, call,
                lambda m: m.attention_weights)

    # MHA: key/query/value sizes differ from num_hiddens, 2 heads of width 4, Tq != Tk
    torch.manual_seed(104)
    x = qkv(2, 3, 5, 6, 7, 5)
    x["valid_lens"] = torch.tensor([3, 5])
    module_case("mha_vl1d", 104, lambda: MultiHeadAttention(7, 6, 5, 8, 2, 0.0), x, call,
                lambda m: m.attention.attention_weights)

    torch.manual_seed(105)
    x = qkv(2, 3, 5, 6, 7, 5)
    x["valid_lens"] = torch.tensor([[1, 2, 3], [5, 4, 2]])
    module_case("mha_vl2d_bias", 105, lambda: MultiHeadAttention(7, 6, 5, 8, 2, 0.0, bias=True),
                x, call, lambda m: m.attention.attention_weights)

    torch.manual_seed(106)
    x = qkv(2, 4, 4, 8, 8, 8)
    module_case("mha_nomask", 106, lambda: MultiHeadAttention(8, 8, 8, 8, 4, 0.0), x, call,
                lambda m: m.attention.attention_weights)

    torch.manual_seed(107)
    x = {"X": torch.randn(2, 6, 8)}
    module_case("positional_encoding", 107, lambda: PositionalEncoding(8, 0.0, max_len=10), x,
                lambda m, x: m(x["X"]))

    torch.manual_seed(108)
    x = {"X": torch.randn(2, 3, 4)}
    module_case("position_wise_ffn", 108, lambda: PositionWiseFFN(4, 8, 6), x,
                lambda m, x: m(x["X"]))

    torch.manual_seed(109)
    x = {"X": torch.randn(2, 3, 4), "Y": torch.randn(2, 3, 4)}
    module_case("add_norm", 109, lambda: AddNorm([4], 0.0), x, lambda m, x: m(x["X"], x["Y"]))

    torch.manual_seed(110)
    x = {"X": torch.randn(2, 3, 4), "Y": torch.randn(2, 3, 4)}
    module_case("add_norm_2d_shape", 110, lambda: AddNorm([3, 4], 0.0), x,
                lambda m, x: m(x["X"], x["Y"]))

    # Layer norm on the D2L LN demo input needs no fixture (exact [[-1, 1], [-1, 1]]); the PE
    # table rows are checked against P itself here (positions 0..9, 8 columns).
    pe = PositionalEncoding(8, 0.0, max_len=10)
    write_safetensors(os.path.join(OUT_DIR, "positional_encoding_table.safetensors"),
                      [("P", pe.P)], meta("positional_encoding_table", "none"))


# ---- Nadaraya-Watson ---------------------------------------------------------------------------

def nw_seed_program():
    """The seed's experiment (000_*.txt) verbatim minus plotting; records the data and per epoch
    (loss before the step, w after it), and the trained model's predictions on x_test."""
    seed = 66666666666666
    torch.manual_seed(seed)
    n_train = 150
    x_train = torch.sort(torch.rand(n_train) * 5)[0]

    def f(x):
        return 2.333 * torch.sin(x) + x ** 0.666

    y_train = f(x_train) + torch.randn(n_train) * 0.5
    x_test = torch.arange(0, 5, 0.1)

    class NWKernelRegression(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor(1.0))

        def forward(self, queries, keys, values):
            dis = queries.unsqueeze(1) - keys
            scores = -0.5 * (self.w * dis) ** 2
            self.attention_weights = torch.softmax(scores, dim=1)
            return torch.sum(self.attention_weights * values, dim=1)

    mask = ~torch.eye(n_train, dtype=torch.bool)
    keys_train = x_train.repeat(n_train, 1)[mask].reshape(n_train, n_train - 1)
    values_train = y_train.repeat(n_train, 1)[mask].reshape(n_train, n_train - 1)
    model = NWKernelRegression()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, ws, lines = [], [], []
    for epoch in range(20):
        y_hat = model(x_train, keys_train, values_train)
        loss = loss_fn(y_hat, y_train)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        ws.append(model.w.item())
        lines.append(f"epoch {epoch + 1:02d}, loss = {loss.item():.4f}, w = {model.w.item():.4f}")
    with torch.no_grad():
        y_hat_test = model(x_test, x_train.repeat(len(x_test), 1), y_train.repeat(len(x_test), 1))
    write_safetensors(os.path.join(OUT_DIR, "nw_seed.safetensors"), [
        ("x_train", x_train), ("y_train", y_train), ("x_test", x_test),
        ("loss", torch.tensor(losses, dtype=torch.float64)),
        ("w", torch.tensor(ws, dtype=torch.float64)), ("y_hat_test", y_hat_test),
    ], meta("nw_seed", seed, printed="\n".join(lines)))
    # CSV copies for the CLI test (tests/cli/test_nw.sh): %.9g round-trips float32 exactly.
    with open(os.path.join(OUT_DIR, "nw_seed_data.csv"), "w") as fh:
        fh.write(f"# {COMMAND}: the seed program's 150 points (torch.manual_seed({seed}))\n")
        fh.write("x,y\n")
        for xv, yv in zip(x_train.tolist(), y_train.tolist()):
            fh.write(f"{xv:.9g},{yv:.9g}\n")
    with open(os.path.join(OUT_DIR, "nw_seed_history.csv"), "w") as fh:
        fh.write(f"# {COMMAND}: PyTorch per-epoch loss (before the step) and w (after it)\n")
        fh.write("epoch,loss,w\n")
        for i, (lv, wv) in enumerate(zip(losses, ws)):
            fh.write(f"{i + 1},{lv:.9g},{wv:.9g}\n")
    print("\n".join(lines))


def nw_zh_program():
    """D2L ZH 10.2 parametric NW (d2l_spec.md §4): n = 50, f = 2 sin x + x^0.8, w ~ U[0, 1),
    MSELoss(reduction='none') summed, SGD lr 0.5, 5 epochs."""
    seed = 0
    torch.manual_seed(seed)
    n_train = 50
    x_train, _ = torch.sort(torch.rand(n_train) * 5)

    def f(x):
        return 2 * torch.sin(x) + x ** 0.8

    y_train = f(x_train) + torch.normal(0.0, 0.5, (n_train,))

    class NWKernelRegression(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand((1,), requires_grad=True))

        def forward(self, queries, keys, values):
            queries = queries.repeat_interleave(keys.shape[1]).reshape((-1, keys.shape[1]))
            self.attention_weights = nn.functional.softmax(
                -((queries - keys) * self.w) ** 2 / 2, dim=1)
            return torch.bmm(self.attention_weights.unsqueeze(1),
                             values.unsqueeze(-1)).reshape(-1)

    X_tile = x_train.repeat((n_train, 1))
    Y_tile = y_train.repeat((n_train, 1))
    keep = (1 - torch.eye(n_train)).type(torch.bool)
    keys = X_tile[keep].reshape((n_train, -1))
    values = Y_tile[keep].reshape((n_train, -1))
    net = NWKernelRegression()
    w0 = net.w.detach().clone()
    loss = nn.MSELoss(reduction="none")
    trainer = torch.optim.SGD(net.parameters(), lr=0.5)
    losses, ws, lines = [], [], []
    for epoch in range(5):
        trainer.zero_grad()
        l = loss(net(x_train, keys, values), y_train)
        l.sum().backward()
        trainer.step()
        losses.append(float(l.sum()))
        ws.append(net.w.item())
        lines.append(f"epoch {epoch + 1}, loss {float(l.sum()):.6f}")
    write_safetensors(os.path.join(OUT_DIR, "nw_zh.safetensors"), [
        ("x_train", x_train), ("y_train", y_train), ("w0", w0.reshape(())),
        ("loss", torch.tensor(losses, dtype=torch.float64)),
        ("w", torch.tensor(ws, dtype=torch.float64)),
    ], meta("nw_zh", seed, printed="\n".join(lines)))
    print("\n".join(lines))


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    attention_cases()
    nw_seed_program()
    nw_zh_program()
