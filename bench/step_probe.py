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
  python3 bench/step_probe.py compare DIR [--bin build/infercept] [--profile h200-llama2-7b]
      runs `infercept simulate` on each trace with the same flags and prints measured (from
      DIR/NAME-bench.json, bench --json) against simulated steps and forward seconds

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
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["write", "compare"])
    ap.add_argument("dir")
    ap.add_argument("--bin", default="build/infercept")
    ap.add_argument("--profile", default="h200-llama2-7b")
    args = ap.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
