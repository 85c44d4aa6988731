#!/usr/bin/env python3
"""Probe traces that isolate one kind of step, to check the simulator's step cost against the
engine's (docs/BENCHMARKS.md, "The simulator against the engine").

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
           workload's VE/ALFWorld calls): 3-row chunks (now the tensor-core kernel's, split across
           the context)
  beside   4 agents decoding 500 tokens at ~1,000 context while 3,000-token prompts arrive
           every 350 ms: 512-row chunks over 0-2,560 cached tokens beside decode rows, so every
           step samples and is timed on its own (for bench/step_fit.py)
  contexts one agent at a time (prompts of 500, 1,200, 2,400, 3,800 tokens, 1.5 s apart)
           decoding 150 tokens: one-row decode steps over contexts from 500 to 3,950
  midchunks 12 agents in groups of three that pause together, 600-900-token prompts, 7
           pauses of 100-160 ms each returning 64-200 tokens: 1-3 chunks of 64-255 rows over
           cached context beside 4-10 decode rows

  python3 bench/step_probe.py write DIR
      writes DIR/NAME.jsonl for every trace and prints the bench command for each
  python3 bench/step_probe.py compare DIR [--bin build/infercept] [--profile h200-llama2-7b]
      runs `infercept simulate` on each trace with the same flags and prints measured (from
      DIR/NAME-bench.json, bench --json) against simulated steps and forward seconds
  python3 bench/step_probe.py fit DIR --profile BASE.json [--out FILE]
      the prefill-chunk terms of CostModel::step_seconds from the prefill and resume traces:
      p(>= 64 rows) from the prefill trace (its median request: the first one pays the
      process's warm-up), then p(9-63 rows) by bisection until the simulated resume trace
      serves each agent, after its first token, as long as the measured one did; with
      DIR/tiny-bench.json also p(2-8 rows) the same way from the tiny trace. Writes BASE with
      the samples added (BASE should carry the decode terms of the same binary), then prints
      the traces no price came from (lone, admit, decode) measured against simulated.

Where the forward seconds part, the step type whose trace parts is the one the model misses.

Every probe also writes its step trace (NAME.trace.csv), and
`python3 bench/step_fit.py DIR/*.trace.csv* --profile BASE.json --out FIT.json` fits T_fwd's
and a(n)'s scale and the chunk prices by least squares over the traces' sync groups (the
whole-request fit above cannot tell a long chunk's price from an error in T_fwd(512)).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

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
        # 3,000-token prompts beside 4 decoding agents: every 512-row chunk over 0-2,560
        # cached tokens rides with decode rows, so every step samples and its time is its own
        # (bench/step_fit.py: the price of a long chunk apart from T_fwd(512)).
        "beside": [req(i, 0.0, "decode", 1000, [seg(500)]) for i in range(4)] +
                  [req(4 + i, 0.3 + 0.35 * i, "beside", 3000, [seg(1)]) for i in range(8)],
        # 12 agents in four groups of three that start together and pause together (same
        # lengths and tool times), over 600-900-token prompts: each decodes 40 tokens, pauses
        # 100-160 ms and gets 64-200 tokens back, 7 times. So chunks of 64-255 rows over
        # 600-2,500 cached tokens, often three a step, ride beside 4-10 decode rows: the mixed
        # workload's knee is made of such steps and the other probes have none (an earlier fit
        # priced them 7-15% under the engine).
        "midchunks": [req(i, 0.1 * (i // 3), "midchunks", 600 + 100 * (i // 3),
                          [seg(40, "tool", 0.1 + 0.03 * (i // 3 % 3), 64 + 17 * ((i // 3 + k) % 9))
                           for k in range(7)] + [seg(10)]) for i in range(12)],
        # One agent at a time decoding over 500-3,950 cached tokens: a decode row's context
        # price a(1) apart from the step's own D(1) (bench/step_fit.py).
        "contexts": [req(i, 1.5 * i, "contexts", p, [seg(150)])
                     for i, p in enumerate((500, 1200, 2400, 3800))],
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
                  f"--json {os.path.join(args.dir, name + '-bench.json')} "
                  f"--step-trace {os.path.join(args.dir, name + '.trace.csv')}")
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
    out = os.path.join(tempfile.gettempdir(), f"step-probe-{os.getpid()}-{name}.json")
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

    def write(samples):
        j = dict(base)
        j["chunk_context_seconds_per_token"] = samples
        with open(path, "w") as f:
            json.dump(j, f, indent=2)

    def bisect(served, lo=0.0, hi=50e-6):
        # The served time grows with the price, though not smoothly (agents fall into step).
        for _ in range(20):
            mid = (lo + hi) / 2
            if served(mid) < 0:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def resume_gap(p_short):
        write([[9, p_short], [64, p_long]])
        return served_after_first_token(simulate(args, path, "resume"), out_tokens) - target

    p_short = bisect(resume_gap)
    got = resume_gap(p_short) + target
    print(f"resume: served after the first token {target * 1e3:.0f} ms measured, {got * 1e3:.0f} simulated: "
          f"p(9-63 rows) = {p_short * 1e6:.3f} us per cached token")
    samples = [[9, p_short], [64, p_long]]
    # Tiny (when measured): 3-row chunks (2 returned tokens + the last generated one), which
    # a(n) prices as decode rows; a sample at 2 rows covers chunks of 2-8 rows.
    tiny_path = os.path.join(args.dir, "tiny-bench.json")
    if os.path.exists(tiny_path):
        tiny_tokens = 25 * 2 + 26 * 4
        tiny_target = served_after_first_token(json.load(open(tiny_path)), tiny_tokens)

        def tiny_gap(p_tiny):
            write([[2, p_tiny]] + samples)
            return served_after_first_token(simulate(args, path, "tiny"), tiny_tokens) - tiny_target

        p_tiny = bisect(tiny_gap)
        got = tiny_gap(p_tiny) + tiny_target
        samples = [[2, p_tiny]] + samples
        print(f"tiny: served after the first token {tiny_target * 1e3:.0f} ms measured, {got * 1e3:.0f} "
              f"simulated: p(2-8 rows) = {p_tiny * 1e6:.3f} us per cached token")
    write(samples)
    print(f"wrote {path}")
    # The traces no price was fitted on, against the fitted model.
    for name in ("lone", "admit", "decode"):
        bench = os.path.join(args.dir, name + "-bench.json")
        if not os.path.exists(bench):
            continue
        m, sim = json.load(open(bench)), simulate(args, path, name)
        nl = lambda j: j["summary"]["normalized_latency_s_per_token"]["mean"] * 1e3  # noqa: E731
        tt = lambda j: j["summary"]["ttft_s"]["mean"] * 1e3  # noqa: E731
        print(f"check {name}: normalized latency {nl(m):.2f} / {nl(sim):.2f} ms/token (measured / simulated, "
              f"{(nl(sim) / nl(m) - 1) * 100:+.0f}%), TTFT {tt(m):.0f} / {tt(sim):.0f} ms, steps "
              f"{m['engine']['steps']} / {sim['engine']['steps']}")


if __name__ == "__main__":
    sys.exit(main())
