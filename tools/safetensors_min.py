"""Minimal safetensors writer for fixture scripts (no `safetensors` package on Debian 12).

Format (huggingface/safetensors README, "Format"): 8-byte little-endian header length N, N bytes
of JSON {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the raw
little-endian data.
"""
import json
import os

import torch

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bool: "BOOL"}


def save(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor (written contiguous, CPU)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
