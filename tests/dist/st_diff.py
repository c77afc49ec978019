#!/usr/bin/env python3
"""Largest absolute difference between the same-named f32 tensors of two safetensors files
(standard library only). Usage: st_diff.py A.safetensors B.safetensors [--prefix model.]
Prints "max_abs_diff X over N tensors (largest |value| Y)"; exits 2 when names or shapes differ."""
import array
import json
import struct
import sys


def load(path, prefix):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(prefix) or info["dtype"] != "F32":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            arr = array.array("f")
            arr.frombytes(f.read(b - a))
            out[name] = (tuple(info["shape"]), arr)
        return out


def main():
    args = sys.argv[1:]
    prefix = ""
    if "--prefix" in args:
        i = args.index("--prefix")
        prefix = args[i + 1]
        del args[i:i + 2]
    a, b = load(args[0], prefix), load(args[1], prefix)
    if a.keys() != b.keys():
        print(f"tensor names differ: {sorted(set(a) ^ set(b))[:5]}")
        sys.exit(2)
    worst = biggest = 0.0
    for k in a:
        if a[k][0] != b[k][0]:
            print(f"{k}: shapes {a[k][0]} and {b[k][0]}")
            sys.exit(2)
        for x, y in zip(a[k][1], b[k][1]):
            worst = max(worst, abs(x - y))
            biggest = max(biggest, abs(x))
    print(f"max_abs_diff {worst:.9g} over {len(a)} tensors (largest |value| {biggest:.6g})")


if __name__ == "__main__":
    main()
