#!/usr/bin/env python3
"""`infercept logits` on the CPU, a random tiny checkpoint: the last position's logits of each
sequence from one prefill step and from one-token decode steps (--one-token-steps) agree
(the CPU backend computes a row the same whatever the rows beside it and the attention sums in
the same order for a decode row as for a prefill row), and they depend on the whole history:
the same sequence without its first token gives other logits. The .npy files are read with the
standard library.
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

from checks import check, finish


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + hlen].decode()
    shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
    n = shape[0] * shape[1]
    values = struct.unpack(f"<{n}f", data[10 + hlen:10 + hlen + 4 * n])
    return shape, [values[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        subprocess.run([args.binary, "make-model", "--shape", "tiny", "--out", model, "--tokenizer",
                        "byte", "--seed", "3"], check=True, capture_output=True)
        seqs = [[1, 72, 101, 108, 108, 111, 44, 32, 119], [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50,
                                                           51, 52, 53, 54, 55, 56, 57, 58]]
        shorter = [s[1:] for s in seqs]
        tokens, tokens_short = os.path.join(tmp, "t.json"), os.path.join(tmp, "s.json")
        json.dump(seqs, open(tokens, "w"))
        json.dump(shorter, open(tokens_short, "w"))

        def logits(tokens_file, out, *extra):
            subprocess.run([args.binary, "logits", "--model", model, "--tokens-file", tokens_file,
                            "--out", out, "--threads", "2", *extra], check=True, capture_output=True)
            return read_npy(out)

        shape_p, prefill = logits(tokens, os.path.join(tmp, "p.npy"))
        shape_d, decode = logits(tokens, os.path.join(tmp, "d.npy"), "--one-token-steps")
        _, other = logits(tokens_short, os.path.join(tmp, "o.npy"), "--one-token-steps")
        check(shape_p == shape_d and shape_p[0] == len(seqs) and shape_p[1] > 1000,
              f"both modes write [sequences, vocab]: {shape_p}, {shape_d}")
        for i, (p, d, o) in enumerate(zip(prefill, decode, other)):
            scale = max(abs(v) for v in p)
            diff = max(abs(a - b) for a, b in zip(p, d))
            moved = max(abs(a - b) for a, b in zip(d, o))
            check(scale > 0 and diff <= 1e-4 * scale,
                  f"sequence {i}: one-token steps match the prefill step (max diff {diff:.2e}, "
                  f"largest logit {scale:.2f})")
            check(p.index(max(p)) == d.index(max(d)), f"sequence {i}: the same argmax")
            check(moved > 1e-2 * scale,
                  f"sequence {i}: without its first token the logits move ({moved:.2e})")
    finish()


if __name__ == "__main__":
    main()
