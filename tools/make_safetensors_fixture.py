#!/usr/bin/env python3
"""Writes tests/fixtures/safetensors/tiny.safetensors by hand (struct + json, no safetensors
package) so the C++ reader is checked against a file it did not write.

Run from the repository root:  PYENV_VERSION=system python3 tools/make_safetensors_fixture.py

Layout (https://github.com/huggingface/safetensors, "Format"): 8-byte little-endian header size N,
N bytes of JSON, then the data. The JSON keys are written in alphabetical order while the data is
in another order, and Python's default separators (", " and ": ") are used, so the reader must not
depend on either.
"""
import json
import os
import struct

OUT = os.path.join("tests", "fixtures", "safetensors", "tiny.safetensors")

# name, dtype, shape, little-endian bytes; data is laid out in this order.
tensors = [
    ("weight", "F32", [2, 3], struct.pack("<6f", 0.0, 1.0, 2.0, 3.0, 4.5, -1.0)),
    ("ids", "I64", [3], struct.pack("<3q", 1, -2, 3)),
    ("scalar", "F64", [], struct.pack("<d", 3.25)),
    ("half", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC020)),  # 1.0, -2.5
    ("mask", "BOOL", [2, 2], bytes([1, 0, 0, 1])),
    ("empty", "F32", [0, 4], b""),
]

header = {"__metadata__": {"format": "pt", "made_by": "tools/make_safetensors_fixture.py"}}
offset = 0
for name, dtype, shape, data in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    offset += len(data)
text = json.dumps(dict(sorted(header.items()))).encode("utf-8")
text += b" " * ((8 - (8 + len(text)) % 8) % 8)

os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for _, _, _, data in tensors:
        f.write(data)
print(OUT, os.path.getsize(OUT), "bytes")
