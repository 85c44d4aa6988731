#!/usr/bin/env python3
"""What llama.cpp's server did, window by window, from its own log (the peer of issue 6).

llama-server logs one `print_timing` block per finished request: prompt tokens evaluated (those
its slot's cache did not hold) and generated tokens with their time. When a comparison is cut
off before the load generator writes its JSON, this log is what is left:

    python3 bench/llama_server_log.py LOG[.gz] [--window 10]

prints per window of the server's clock (the `M.SS.mmm.uuu` stamp at the start of each line):
requests finished, prompt tokens evaluated, tokens generated, and the mean time per generated
token of the requests that finished in it (each request's eval time over its tokens, i.e. the
per-token latency its client saw while it decoded beside the others).
"""
import argparse
import gzip
import re
import sys

STAMP = r"(\d+)\.(\d+)\.(\d+)\.\d+"
LINE = re.compile(STAMP + r" I slot print_timing: id\s+\d+ \| task \d+ \|\s+(prompt eval|eval) time =\s+"
                  r"([\d.]+) ms /\s+(\d+) tokens")


def parse(lines):
    """(seconds, kind, ms, tokens) for every timing line."""
    for ln in lines:
        m = LINE.match(ln)
        if m:
            t = int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1000.0
            yield t, m.group(4), float(m.group(5)), int(m.group(6))


def windows(records, width):
    out = {}
    for t, kind, ms, n in records:
        w = out.setdefault(int(t // width), {"requests": 0, "prompt": 0, "generated": 0, "eval_ms": 0.0})
        if kind == "eval":
            w["requests"] += 1
            w["generated"] += n
            w["eval_ms"] += ms
        else:
            w["prompt"] += n
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--window", type=float, default=10.0, help="seconds a row")
    a = ap.parse_args()
    opener = gzip.open if a.log.endswith(".gz") else open
    try:
        with opener(a.log, "rt", errors="replace") as f:
            w = windows(parse(f), a.window)
    except OSError as e:
        print(f"llama_server_log: {a.log}: {e}", file=sys.stderr)
        return 2
    if not w:
        print(f"llama_server_log: {a.log}: no print_timing lines", file=sys.stderr)
        return 1
    print("| server s | requests done | prompt tokens evaluated | tokens generated | ms per generated token |")
    print("|---|---:|---:|---:|---:|")
    for k in sorted(w):
        r = w[k]
        per = r["eval_ms"] / r["generated"] if r["generated"] else float("nan")
        print(f"| {k * a.window:.0f}-{(k + 1) * a.window:.0f} | {r['requests']} | {r['prompt']} | "
              f"{r['generated']} | {per:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
