#!/usr/bin/env python3
"""The load generator's workload sampler (bench/agent_workload.py), no server needed.

- std::mt19937_64 reimplemented: the standard's check value (10000th output of the default
  seed), llround's halfway cases.
- Table 1: per augmentation, 2000 requests; the means of interception time, interceptions per
  request and final context within 5% of Table 1, the standard deviations within 10%; scales
  and the clamp do what they say; the mixed workload picks the six uniformly.
- Long agent sessions: over 2000 sessions the turns, the task, the generated tokens, each
  tool's share, pause and output within 5-10% of the profile; the clamp (shared prefix
  included) holds; the --session overrides parse as the bench's.
- With --binary: the trace `infercept bench --trace-out` writes for a spec equals the one drawn
  here (integers equal, doubles to 1e-12 relative), so the in-process bench and the load
  generator replay the same requests: the Table 1 mix, and sessions with their defaults and
  with overrides, scales and a clamp (`--trace-only`, no model).
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


def test_sessions():
    spec = wl.Spec(name="sessions")
    p = spec.sessions
    rs = [wl.generate_session(spec, i, 0.0, wl.mix64(2024 ^ wl.mix64(i))) for i in range(2000)]
    turns = [len(r["segments"]) - 1 for r in rs]
    check(close(statistics.mean(turns), p.turns[0], 0.05) and close(statistics.stdev(turns), p.turns[1], 0.10),
          f"sessions turns: mean {statistics.mean(turns):.3g} std {statistics.stdev(turns):.3g} (profile {p.turns})")
    task = [r["prompt_tokens"] for r in rs]
    gens = [s["generate_tokens"] for r in rs for s in r["segments"]]
    check(close(statistics.mean(task), p.task_tokens[0], 0.05) and close(statistics.mean(gens), p.generate_tokens[0], 0.05),
          f"sessions task {statistics.mean(task):.4g} and generated {statistics.mean(gens):.4g} tokens (profile "
          f"{p.task_tokens[0]:g}, {p.generate_tokens[0]:g})")
    calls = [s for r in rs for s in r["segments"][:-1]]
    total_w = sum(t.weight for t in p.tools)
    for t in p.tools:
        mine = [s for s in calls if s["tool"] == t.name]
        share = len(mine) / len(calls)
        pm = statistics.mean(s["tool_seconds"] for s in mine)
        om = statistics.mean(s["return_tokens"] for s in mine)
        check(abs(share - t.weight / total_w) < 0.015 and close(pm, t.seconds[0], 0.10) and close(om, t.output_tokens[0], 0.10),
              f"sessions tool {t.name}: share {share:.3f}, pause {pm:.4g} s, output {om:.4g} tokens "
              f"(profile {t.weight / total_w:.3f}, {t.seconds[0]:g}, {t.output_tokens[0]:g})")
    sys_tokens = wl.session_shared_prefix_tokens(spec)
    check(all(all(s["generate_tokens"] >= 1 for s in r["segments"]) and not r["segments"][-1].get("tool")
              for r in rs), "every turn generates, the last segment is the answer")
    c = wl.Spec(name="sessions", max_context=32768)
    cs = [wl.generate_session(c, i, 0.0, wl.mix64(2024 ^ wl.mix64(i))) for i in range(500)]
    check(all(sys_tokens + wl.final_context(r) <= 32768 for r in cs) and
          any(len(x["segments"]) < len(y["segments"]) for x, y in zip(cs, rs)),
          "max_context clamps the whole context, shared prefix included, by dropping turns")
    o = wl.Spec(name="sessions")
    for e in ("turns=4,2", "system=300", "*.output=100,50", "human.weight=0", "generate=20"):
        wl.apply_session_override(o, e)
    check(o.sessions.turns == (4.0, 2.0) and o.sessions.system_tokens == 300 and
          all(t.output_tokens == (100.0, 50.0) for t in o.sessions.tools) and
          o.sessions.generate_tokens == (20.0, 0.0), "session overrides")
    for bad in ("turns=0,1", "system=-1", "zz.output=1,1", "grep.size=1", "grep.weight=-1", "turns"):
        try:
            wl.apply_session_override(wl.Spec(name="sessions"), bad)
            check(False, f"session override '{bad}' is refused")
        except ValueError:
            check(True, f"session override '{bad}' is refused")


def same_trace(x, y):
    if isinstance(x, float) or isinstance(y, float):
        return abs(x - y) <= 1e-12 * max(abs(x), abs(y), 1e-300)
    if isinstance(x, list):
        return len(x) == len(y) and all(same_trace(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(same_trace(x[k], y[k]) for k in x)
    return x == y


def test_sessions_against_binary(binary):
    cases = [
        ("defaults", [], {}, []),
        ("overrides, scales, clamp",
         ["--time-scale", "0.1", "--context-scale", "0.5", "--max-context", "32767"],
         dict(time_scale=0.1, context_scale=0.5, max_context=32767),
         ["turns=12,8", "*.output=800,700", "human.weight=0.1", "task=300,100", "system=4000"]),
    ]
    for name, flags, spec_kw, overrides in cases:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "trace.jsonl")
            cmd = [binary, "bench", "--workload", "sessions", "--rate", "100", "--duration", "2",
                   "--seed", "11", "--trace-out", out, "--trace-only"] + flags
            for o in overrides:
                cmd += ["--session", o]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=120)
            theirs = wl.read_trace(out)
        spec = wl.Spec(name="sessions", rate=100.0, duration_s=2.0, seed=11, **spec_kw)
        for o in overrides:
            wl.apply_session_override(spec, o)
        ours = wl.generate_workload(spec)
        diff = [i for i, (x, y) in enumerate(zip(ours, theirs)) if not same_trace(x, y)]
        check(len(ours) == len(theirs) > 100 and not diff,
              f"sessions ({name}): `infercept bench --trace-out` and agent_workload.py draw the same "
              f"{len(ours)} sessions" + (f" (differ at {diff[:5]})" if diff else ""))


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

    diff = [i for i, (x, y) in enumerate(zip(ours, theirs)) if not same_trace(x, y)]
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
    test_sessions()
    if a.binary:
        test_against_binary(a.binary)
        test_sessions_against_binary(a.binary)
    finish()


if __name__ == "__main__":
    main()
