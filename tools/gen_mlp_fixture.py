#!/usr/bin/env python3
"""PyTorch parity fixture for the foundation: a 2-layer MLP with layer_norm and cross-entropy.

  PYENV_VERSION=system python3 tools/gen_mlp_fixture.py

Writes tests/fixtures/mlp_layernorm_ce.safetensors: input x (8, 6), targets (8), weights (8),
parameters, the loss and the gradient of every parameter and of x. Model (dropout off):
  h = relu(layer_norm(x @ W1^T + b1, [16], g, beta)); logits = h @ W2^T + b2
  loss = cross_entropy(logits, t, per-position weights w, label smoothing 0.1), mean over Σw.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402

torch.manual_seed(0)
x = torch.randn(8, 6, requires_grad=True)
W1 = torch.randn(16, 6, requires_grad=True)
b1 = torch.randn(16, requires_grad=True)
g = (1 + 0.1 * torch.randn(16)).requires_grad_()
beta = (0.1 * torch.randn(16)).requires_grad_()
W2 = torch.randn(5, 16, requires_grad=True)
b2 = torch.randn(5, requires_grad=True)
t = torch.tensor([0, 4, 2, 2, 1, 3, 0, 4])
w = torch.tensor([1.0, 1.0, 0.5, 0.0, 2.0, 1.0, 1.0, 1.0])

h = torch.relu(torch.nn.functional.layer_norm(x @ W1.T + b1, [16], g, beta, 1e-5))
logits = h @ W2.T + b2
per = torch.nn.functional.cross_entropy(logits, t, reduction="none", label_smoothing=0.1)
loss = (per * w).sum() / w.sum()
loss.backward()

out = {"x": x, "t": t, "w": w, "W1": W1, "b1": b1, "g": g, "beta": beta, "W2": W2, "b2": b2,
       "loss": loss.reshape(1)}
for name, p in [("x", x), ("W1", W1), ("b1", b1), ("g", g), ("beta", beta), ("W2", W2), ("b2", b2)]:
    out["grad." + name] = p.grad
here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "..", "tests", "fixtures", "mlp_layernorm_ce.safetensors")
safetensors_min.save(os.path.normpath(path), out,
                     {"made_by": "PYENV_VERSION=system python3 tools/gen_mlp_fixture.py",
                      "torch": torch.__version__})
print("wrote", os.path.normpath(path))
