#!/usr/bin/env python3
"""The prefix cache against no cache and against llama.cpp's server, one load, back to back.

Agents that share a system prompt and tool definitions (bench/loadgen.py --shared-prefix) on
the paper's mixed workload, standard client mode (every turn after a tool call a new chat
completion with the whole history), against these configurations, one at a time, each on a
fresh server that is stopped before the next starts (the machine sees one at a time):

  minwaste-cache     infercept serve --policy minwaste --prefix-cache on
  minwaste-nocache   infercept serve --policy minwaste --prefix-cache off
  discard-nocache    infercept serve --policy discard --prefix-cache off
  llama-server       llama.cpp's llama-server with its prompt cache (--cache-prompt and the
                     host-memory cache --cache-ram, both on by default) and --cache-reuse 256,
                     --peer-args slots and context (default: 16 slots, -c = --kv-tokens)

Same model file and threads for both servers; infercept's KV pool (--kv-cache-tokens) is
llama-server's total context (-c), --kv-tokens. llama-server gets Qwen2.5's chat template
from llama.cpp's sources and loadgen's --no-logprobs and --call-prefill, as in
bench/sweep_server.py. Writes <config>.json (loadgen's result) and <config>-server.log per
configuration and run.json (the commands, times, load averages, binaries) into --out-dir, and
prints one Markdown table.

  python3 bench/prefix_cache_cpu.py --bin build/infercept --llama-server auto \\
      --out-dir build/prefix-cache --rate 0.5 --duration 60 --shared-prefix 2048 \\
      -- --workload mixed --time-scale 0.1 --context-scale 0.25

`--render DIR` prints the table of a finished run again. Arguments after `--` go to every
loadgen run (--base-url, --rate, --duration, --seed,
--shared-prefix, --mode, --json and --label are set here).
"""
import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from sweep_server import (DEFAULT_MODEL, PEER_LOADGEN_ARGS, LlamaServer, Server,  # noqa: E402
                          find_llama_server, peer_template)

CONFIGS = ["minwaste-cache", "minwaste-nocache", "discard-nocache", "llama-server"]
LABELS = {"minwaste-cache": "infercept minwaste, prefix cache on",
          "minwaste-nocache": "infercept minwaste, prefix cache off",
          "discard-nocache": "infercept discard, prefix cache off",
          "llama-server": "llama.cpp server, prompt cache + --cache-reuse 256"}
PEER_ARGS = "-np 16 --cont-batching --jinja --metrics --no-webui --cache-reuse 256"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_head():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def ms(x):
    return f"{x * 1e3:,.0f}"


def render(rows):
    """One Markdown table: hit rates (cached / prompt tokens the server reported, summed over
    the turns it answered), the prompt tokens it computed (its /metrics), TTFT of first and
    continuation turns, normalized latency, completed requests."""
    lines = ["| configuration | done/submitted | completed/s | hit rate: all turns (first / continuations) "
             "| prompt tok sent / cached / computed (server) | TTFT first turn mean / p90 (ms) "
             "| TTFT continuation mean / p90 (ms) | norm. latency mean / p90 (ms/token) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        s, px = r["summary"], r["prefix"]
        nl, tt, tc = s["normalized_latency_s_per_token"], s["ttft_s"], s["ttft_continuation_s"]
        computed = (r.get("server") or {}).get("prompt_tokens_computed")
        lines.append(
            f"| {name} | {s['completed']}/{s['submitted']} | {s['throughput_rps']:.3f} | "
            f"{100 * px['all']['hit_rate']:.1f}% ({100 * px['first_turns']['hit_rate']:.1f}% / "
            f"{100 * px['continuations']['hit_rate']:.1f}%) | {px['all']['prompt_tokens']:,} / "
            f"{px['all']['cached_tokens']:,} / {'n/a' if computed is None else f'{computed:,}'} | "
            f"{ms(tt['mean'])} / {ms(tt['p90'])} | {ms(tc['mean'])} / {ms(tc['p90'])} | "
            f"{nl['mean'] * 1e3:.1f} / {nl['p90'] * 1e3:.1f} |")
    return "\n".join(lines)


def main():
    argv = sys.argv[1:]
    loadgen_args = []
    if "--" in argv:
        k = argv.index("--")
        argv, loadgen_args = argv[:k], argv[k + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "infercept"), help="infercept binary")
    ap.add_argument("--llama-server", default="auto", metavar="BIN|auto",
                    help="llama-server binary (auto: bench/peer_llama_cpp.sh builds it)")
    ap.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="model file for both servers")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both servers")
    ap.add_argument("--kv-tokens", type=int, default=65536,
                    help="infercept's --kv-cache-tokens and llama-server's -c")
    ap.add_argument("--serve-args", default="--quiet", help="more `infercept serve` flags")
    ap.add_argument("--peer-args", default=PEER_ARGS, help="llama-server flags besides -m -t -tb -c "
                    "(default: %(default)s)")
    ap.add_argument("--rate", type=float, default=0.5)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shared-prefix", type=int, default=2048, metavar="TOKENS")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "prefix-cache"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for loadgen.py")
    ap.add_argument("--render", default="", metavar="DIR",
                    help="run nothing: print the table of the results in DIR")
    args = ap.parse_args(argv)
    if args.render:
        rows = []
        for name in args.configs:
            path = os.path.join(args.render, f"{name}.json")
            if os.path.exists(path):
                with open(path) as f:
                    rows.append((LABELS[name], json.load(f)))
        print(render(rows))
        return
    os.makedirs(args.out_dir, exist_ok=True)
    peer_bin = find_llama_server(args.llama_server) if "llama-server" in args.configs else None
    meta = {"argv": sys.argv, "git_head": git_head(), "cpu": cpu_model(), "nproc": os.cpu_count(),
            "infercept_bin": os.path.abspath(args.bin), "infercept_sha256": sha256(args.bin),
            "llama_server_bin": peer_bin, "model": args.model, "runs": []}
    rows = []
    for name in args.configs:
        log = os.path.join(args.out_dir, f"{name}-server.log")
        extra_lg = []
        if name == "llama-server":
            peer_args = ["-c", str(args.kv_tokens)] + shlex.split(args.peer_args)
            tmpl = peer_template("auto", peer_bin)
            if tmpl:
                peer_args += ["--chat-template-file", tmpl]
            server = LlamaServer(peer_bin, args.model, args.threads, peer_args, log_path=log)
            cmd = server.cmd
            extra_lg = list(PEER_LOADGEN_ARGS)
        else:
            policy, cache = name.split("-")
            serve = ["--policy", policy, "--prefix-cache", "on" if cache == "cache" else "off",
                     "--model", args.model, "--threads", str(args.threads),
                     "--kv-cache-tokens", str(args.kv_tokens)] + shlex.split(args.serve_args)
            server = Server(args.bin, serve, log_path=log)
            cmd = server.cmd
        out = os.path.join(args.out_dir, f"{name}.json")
        lg = [args.python, os.path.join(HERE, "loadgen.py"), "--base-url", server.base_url,
              "--rate", str(args.rate), "--duration", str(args.duration), "--seed", str(args.seed),
              "--shared-prefix", str(args.shared_prefix), "--mode", "standard", "--json", out,
              "--label", LABELS[name]] + loadgen_args + extra_lg
        run = {"config": name, "server_cmd": cmd, "loadgen_cmd": lg, "start": time.strftime("%Y-%m-%d %H:%M:%S %z"),
               "loadavg_before": os.getloadavg()}
        print("+", " ".join(shlex.quote(x) for x in cmd), file=sys.stderr, flush=True)
        print("+", " ".join(shlex.quote(x) for x in lg), file=sys.stderr, flush=True)
        try:
            t = time.time()
            rc = subprocess.run(lg).returncode
            run["wall_s"] = time.time() - t
        finally:
            run["loadavg_after"] = os.getloadavg()
            run["server_rc"] = server.stop()
        run["end"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
        run["loadgen_rc"] = rc
        meta["runs"].append(run)
        with open(os.path.join(args.out_dir, "run.json"), "w") as f:
            json.dump(meta, f, indent=1)
        if rc != 0:
            sys.exit(f"prefix_cache_cpu.py: loadgen failed on {name} (exit {rc})")
        with open(out) as f:
            rows.append((LABELS[name], json.load(f)))
    print(render(rows))


if __name__ == "__main__":
    main()
