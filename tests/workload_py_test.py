#!/usr/bin/env python3
"""The load generator's workload sampler (bench/agent_workload.py), no server needed.

- std::mt19937_64 reimplemented: the standard's check value (10000th output of the default
  seed), llround's halfway cases.
- Table 1: per augmentation, 2000 requests; the means of interception time, interceptions per
  request and final context within 5% of Table 1, the standard deviations within 10%; scales
  and the clamp do what they say; the mixed workload picks the six uniformly.
- With --binary: the trace `infercept bench --trace-out` writes for a spec equals the one drawn
  here (integers equal, doubles to 1e-12 relative), so the in-process bench and the load
  generator replay the same requests.
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import agent_workload as wl  # noqa: E402
from checks import check, finish  # noqa: E402


def close(x, want, tol):
    return abs(x - want) <= tol * abs(want)


def test_rng():
    g = wl.MT19937_64(5489)
    for _ in range(9999):
        g()
    check(g() == 9981545732273789042, "mt19937_64: 10000th output of the default seed")
    check([wl.llround(x) for x in (0.5, 1.5, 2.5, 2.4999999999999996, 3.49, 0.0)] == [1, 2, 3, 2, 3, 0],
          "llround rounds halfway cases away from zero")
    r = wl.Rng(1)
    u = [r.uniform() for _ in range(20000)]
    check(0 <= min(u) and max(u) < 1 and close(statistics.mean(u), 0.5, 0.02), "uniform in [0, 1)")
    ints = [r.uniform_int(3, 5) for _ in range(3000)]
    check(set(ints) == {3, 4, 5}, "uniform_int covers its inclusive range")


def test_table1():
    spec = wl.Spec()
    for p in spec.profiles:
        rs = [wl.generate_request(spec, p, i, 0.0, wl.mix64(2024 ^ wl.mix64(i))) for i in range(2000)]
        pauses = [s["tool_seconds"] for r in rs for s in r["segments"][:-1]]
        counts = [len(r["segments"]) - 1 for r in rs]
        ctx = [wl.final_context(r) for r in rs]
        for name, vals, (mean, std) in (("interception time", pauses, p.interception_s),
                                        ("interceptions", counts, p.interceptions),
                                        ("context", ctx, p.context_tokens)):
            m, s = statistics.mean(vals), statistics.stdev(vals)
            check(close(m, mean, 0.05) and close(s, std, 0.10),
                  f"{p.name} {name}: mean {m:.4g} (Table 1 {mean:g}), std {s:.4g} (Table 1 {std:g})")
        tools = {s.get("tool") for r in rs for s in r["segments"][:-1]}
        gens = [s["generate_tokens"] for r in rs for s in r["segments"]]
        check(tools == {p.tool} and min(gens) >= 1 and max(gens) <= p.generate[1] and
              all(r["prompt_tokens"] >= spec.min_prompt_tokens for r in rs) and
              all(not r["segments"][-1].get("tool") for r in rs),
              f"{p.name}: tool '{p.tool}', segment tokens in range, prompt >= min, last segment ends")


def test_spec():
    a = wl.generate_workload(wl.Spec(name="qa", rate=2.0, duration_s=200, seed=5))
    b = wl.generate_workload(wl.Spec(name="qa", rate=2.0, duration_s=200, seed=5, time_scale=0.1,
                                     context_scale=0.5))
    check(len(a) == len(b) and all(x["arrival_s"] == y["arrival_s"] for x, y in zip(a, b)),
          "scales do not move arrivals")
    ratio = [y["segments"][0]["tool_seconds"] / x["segments"][0]["tool_seconds"] for x, y in zip(a, b)]
    check(all(close(q, 0.1, 1e-9) for q in ratio), "time_scale multiplies every tool duration")
    gaps = [y["arrival_s"] - x["arrival_s"] for x, y in zip(a, a[1:])]
    check(close(len(a) / 200.0, 2.0, 0.15) and close(statistics.mean(gaps), 0.5, 0.15),
          f"Poisson arrivals at the rate ({len(a)} in 200 s at 2/s)")
    c = wl.generate_workload(wl.Spec(name="ve", rate=5.0, duration_s=40, seed=2, max_context=200))
    check(all(wl.final_context(r) <= 200 for r in c), "max_context clamps the final context")
    m = wl.generate_workload(wl.Spec(name="mixed", rate=100.0, duration_s=30, seed=3))
    freq = {aug: sum(r["augmentation"] == aug for r in m) / len(m) for aug in wl.AUGMENTATIONS}
    check(all(abs(f - 1 / 6) < 0.03 for f in freq.values()), f"mixed picks uniformly: {freq}")
    spec = wl.Spec(name="math")
    wl.apply_token_override(spec, "*.generate=2-4")
    check(all(p.generate == [2, 4] for p in spec.profiles), "token override for all augmentations")
    for bad in ("qa.generate=0-4", "zz.returned=1-2", "qa.foo=1-2", "qa.generate"):
        try:
            wl.apply_token_override(wl.Spec(), bad)
            check(False, f"override '{bad}' is refused")
        except ValueError:
            check(True, f"override '{bad}' is refused")


def test_trace_roundtrip():
    reqs = wl.generate_workload(wl.Spec(name="mixed", rate=3.0, duration_s=10, seed=9))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl")
        wl.write_trace(path, reqs)
        check(wl.read_trace(path) == reqs, "a written trace reads back equal")
        with open(path, "a") as f:
            f.write('{"id":0,"arrival_s":99,"augmentation":"qa","prompt_tokens":5,"seed":1,'
                    '"segments":[{"generate_tokens":1}]}\n')
        try:
            wl.read_trace(path)
            check(False, "a duplicate id is refused")
        except ValueError as e:
            check(":" in str(e) and "'id'" in str(e), f"a duplicate id is refused ({e})")


def test_against_binary(binary):
    spec = dict(rate=300.0, duration_s=1.0, seed=7, time_scale=0.1, context_scale=0.25, max_context=900)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "trace.jsonl")
        cmd = [binary, "bench", "--workload", "mixed", "--rate", "300", "--duration", "1", "--drain", "0",
               "--seed", "7", "--time-scale", "0.1", "--context-scale", "0.25", "--max-context", "900",
               "--kv-cache-tokens", "1024", "--trace-out", out, "--quiet"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
        theirs = wl.read_trace(out)
    ours = wl.generate_workload(wl.Spec(name="mixed", **spec))

    def same(x, y):
        if isinstance(x, float) or isinstance(y, float):
            return abs(x - y) <= 1e-12 * max(abs(x), abs(y), 1e-300)
        if isinstance(x, list):
            return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        return x == y
    diff = [i for i, (x, y) in enumerate(zip(ours, theirs)) if not same(x, y)]
    check(len(ours) == len(theirs) > 100 and not diff,
          f"`infercept bench --trace-out` and agent_workload.py draw the same {len(ours)} requests"
          + (f" (differ at {diff[:5]})" if diff else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="", help="infercept binary: compare with its trace")
    a = ap.parse_args()
    test_rng()
    test_table1()
    test_spec()
    test_trace_roundtrip()
    if a.binary:
        test_against_binary(a.binary)
    finish()


if __name__ == "__main__":
    main()
