#!/usr/bin/env python3
"""Probe traces that isolate one kind of step, to check the simulator's step cost against the
engine's (docs/BENCHMARKS.md, "Validation against the H200 runs, with the step terms").

Each trace exercises one step type the cost model prices differently:
  resume   4 agents, 2,000-token prompts, 20 pauses of 50 ms each returning 50 tokens: mixed
           steps (a short prefill chunk over ~2,000 cached tokens beside the others' decodes)
  prefill  8 prompts of 3,000 tokens, one at a time: chunks of 512 over 0-2,560 cached tokens
  decode   4 prompts of 2,000 tokens, then 200 decode steps of 4 rows at growing context

  python3 bench/step_probe.py write DIR
      writes DIR/{resume,prefill,decode}.jsonl and prints the bench command for each
  lone     1 agent, 2,000-token prompt, 20 pauses of 50 ms each returning 30 tokens: a short
           chunk alone in its step (does a lone chunk pay what one of four concurrent ones does?)
  admit    4 agents decoding 400 tokens at ~1,000 context while 300-token prompts arrive every
           100 ms: a new prompt's first chunk (nothing cached) beside decode rows
  tiny     4 agents, 2,000-token prompts, 25 pauses of 20 ms each returning 2 tokens (the mixed
           workload's VE/ALFWorld calls): 3-row chunks, which the CUDA backend splits across
           the context like decode rows but runs in its general attention kernel

  python3 bench/step_probe.py write DIR
      writes DIR/NAME.jsonl for every trace and prints the bench command for each
  python3 bench/step_probe.py compare DIR [--bin build/infercept] [--profile h200-llama2-7b]
      runs `infercept simulate` on each trace with the same flags and prints measured (from
      DIR/NAME-bench.json, bench --json) against simulated steps and forward seconds
  python3 bench/step_probe.py fit DIR --profile BASE.json [--out FILE]
      the prefill-chunk terms of CostModel::step_seconds from the prefill and resume traces:
      p(>= 64 rows) from the prefill trace (its median request: the first one pays the
      process's warm-up), then p(9-63 rows) by bisection until the simulated resume trace
      serves each agent, after its first token, as long as the measured one did. Writes BASE
      with the two samples added (BASE should carry the decode terms of the same binary).

Where the forward seconds part, the step type whose trace parts is the one the model misses.
"""
import argparse
import json
import os
import subprocess
import sys

FLAGS = ["--policy", "preserve", "--duration", "10", "--drain", "30", "--kv-cache-tokens", "32768",
         "--max-batch-tokens", "512", "--max-seqs", "64"]


def seg(generate, tool=None, seconds=0.0, returned=0):
    if tool is None:
        return {"generate_tokens": generate}
    return {"generate_tokens": generate, "tool": tool, "tool_seconds": seconds, "return_tokens": returned}


def traces():
    req = lambda i, arrival, label, prompt, segments: {  # noqa: E731
        "id": i, "arrival_s": arrival, "augmentation": label, "prompt_tokens": prompt, "seed": i,
        "segments": segments}
    return {
        "resume": [req(i, 0.0, "resume", 2000, [seg(4, "tool", 0.05, 50) for _ in range(20)] + [seg(4)])
                   for i in range(4)],
        "prefill": [req(i, 1.0 * i, "prefill", 3000, [seg(1)]) for i in range(8)],
        "decode": [req(i, 0.0, "decode", 2000, [seg(200)]) for i in range(4)],
        "lone": [req(0, 0.0, "lone", 2000, [seg(4, "tool", 0.05, 30) for _ in range(20)] + [seg(4)])],
        "admit": [req(i, 0.0, "decode", 1000, [seg(400)]) for i in range(4)] +
                 [req(4 + i, 0.5 + 0.1 * i, "admit", 300, [seg(1)]) for i in range(20)],
        "tiny": [req(i, 0.0, "tiny", 2000, [seg(4, "tool", 0.02, 2) for _ in range(25)] + [seg(4)])
                 for i in range(4)],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["write", "compare", "fit"])
    ap.add_argument("dir")
    ap.add_argument("--bin", default="build/infercept")
    ap.add_argument("--profile", default="h200-llama2-7b")
    ap.add_argument("--out", default=None, help="fit: the profile with the chunk terms (default: print it)")
    args = ap.parse_args()
    if args.mode == "fit":
        return fit(args)
    if args.mode == "write":
        os.makedirs(args.dir, exist_ok=True)
        for name, reqs in traces().items():
            path = os.path.join(args.dir, name + ".jsonl")
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in reqs)
            print(f"BIN bench --device cuda --model MODEL --kv-dtype bf16 --workload {path} {' '.join(FLAGS)} "
                  f"--json {os.path.join(args.dir, name + '-bench.json')}")
        return
    print("| trace | steps meas / SIM | forward s meas / SIM | mean step ms meas / SIM |")
    print("|---|---|---|---|")
    for name in traces():
        bench = os.path.join(args.dir, name + "-bench.json")
        if not os.path.exists(bench):
            print(f"| {name} | no {bench} | | |")
            continue
        me = json.load(open(bench))["engine"]
        out = os.path.join(args.dir, name + "-sim.json")
        subprocess.run([args.bin, "simulate", "--profile", args.profile, "--model-context", "4096", "--workload",
                        os.path.join(args.dir, name + ".jsonl")] + FLAGS + ["--json", out, "--quiet"], check=True)
        se = json.load(open(out))["engine"]
        print(f"| {name} | {me['steps']} / {se['steps']} | {me['forward_seconds']:.3f} / {se['forward_s']:.3f} | "
              f"{me['forward_seconds'] / me['steps'] * 1e3:.2f} / {se['forward_s'] / se['steps'] * 1e3:.2f} |")


def simulate(args, profile, name):
    out = os.path.join(args.dir, name + "-fit-sim.json")
    subprocess.run([args.bin, "simulate", "--profile", profile, "--model-context", "4096", "--workload",
                    os.path.join(args.dir, name + ".jsonl")] + FLAGS + ["--json", out, "--quiet"], check=True)
    return json.load(open(out))


def served_after_first_token(j, output_tokens):
    s = j["summary"]
    return s["normalized_latency_s_per_token"]["mean"] * output_tokens - s["ttft_s"]["mean"]


def fit(args):
    base = json.load(open(args.profile))
    tfwd = sorted((x, t) for x, t in base["t_fwd_samples"])

    def t_fwd(x):  # CostModel::t_fwd, between the samples
        for (x0, t0), (x1, t1) in zip(tfwd, tfwd[1:]):
            if x <= x1:
                return t0 if x <= x0 else t0 + (t1 - t0) * (x - x0) / (x1 - x0)
        (x0, t0), (x1, t1) = tfwd[-2], tfwd[-1]
        return max(t1, t0 + (t1 - t0) * (x - x0) / (x1 - x0))

    # Prefill: each request is chunks of 512 over 0, 512, ..., 2,048 cached tokens and one of
    # 440 over 2,560, nothing else in its steps. The median request over the sum of T_fwd
    # is what the chunks' context cost; per cached token read it is p(>= 64 rows).
    pre = json.load(open(os.path.join(args.dir, "prefill-bench.json")))
    median_s = pre["summary"]["ttft_s"]["p50"]
    chunks = [(512, c) for c in range(0, 2560, 512)] + [(440, 2560)]
    p_long = (median_s - sum(t_fwd(x) for x, _ in chunks)) / sum(c for _, c in chunks)
    print(f"prefill: median request {median_s * 1e3:.1f} ms, T_fwd of its chunks "
          f"{sum(t_fwd(x) for x, _ in chunks) * 1e3:.1f} ms: p(>= 64 rows) = {p_long * 1e6:.3f} us per cached token")
    # Resume: 4 agents x 20 resumes of 51 rows (50 returned + the last generated token)
    # over ~2,000-2,400 cached tokens; served time after the first token, per agent (the
    # first token waits through the prompts, which the prefill trace already prices).
    res = json.load(open(os.path.join(args.dir, "resume-bench.json")))
    out_tokens = 20 * 50 + 21 * 4
    target = served_after_first_token(res, out_tokens)
    path = args.out or os.path.join(args.dir, "fit-profile.json")

    def with_terms(p_short):
        j = dict(base)
        j["chunk_context_seconds_per_token"] = [[9, p_short], [64, p_long]]
        with open(path, "w") as f:
            json.dump(j, f, indent=2)
        return served_after_first_token(simulate(args, path, "resume"), out_tokens)

    lo, hi = 0.0, 50e-6
    for _ in range(20):
        mid = (lo + hi) / 2
        if with_terms(mid) < target:
            lo = mid
        else:
            hi = mid
    p_short = (lo + hi) / 2
    got = with_terms(p_short)
    print(f"resume: served after the first token {target * 1e3:.0f} ms measured, {got * 1e3:.0f} simulated: "
          f"p(9-63 rows) = {p_short * 1e6:.3f} us per cached token")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
