#!/usr/bin/env python3
"""Policy-vs-rate sweep against `infercept serve`, in one command.

For each policy (and estimator), starts `infercept serve --policy P --port 0` (a free port),
waits until it serves, runs bench/loadgen.py at each rate one after the other against it,
writes one JSON per point into --out-dir (`<label>-rate<R>.json`), stops the server (SIGTERM),
and at the end prints one Markdown table of all points. bench/report.py turns the folder
into plots.

  python3 bench/sweep_server.py --policies discard minwaste --rates 0.2 0.4 --duration 60 \\
      --out-dir build/sweep -- --kv-cache-tokens 4096 --max-batch-tokens 256 \\
      -- --workload mixed --time-scale 0.05 --context-scale 0.2 --mode standard

Arguments after the first `--` go to every `infercept serve`; after a second `--`, to every
loadgen run (--rate, --duration, --seed, --json and --label are set here). The server's
counters are read before and after each point, so points on one server stay separate; with
--fresh-server each point gets its own server (the learned estimator then starts cold).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLICIES = ["discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"]


class Server:
    """`infercept serve` on a free port; the port is read from its start-up line."""

    def __init__(self, binary, args, log_path=None, start_timeout=180):
        cmd = [binary, "serve", "--port", "0"] + list(args)
        self.cmd = cmd
        self.log = []
        self.log_file = open(log_path, "w") if log_path else None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited: " + "".join(self.log[-20:]))
            self._keep(line)
            m = re.search(r"on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start in time: " + "".join(self.log[-20:]))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self._drain, daemon=True).start()

    def _keep(self, line):
        self.log.append(line)
        if len(self.log) > 2000:
            del self.log[:1000]
        if self.log_file:
            self.log_file.write(line)

    def _drain(self):
        for line in self.proc.stderr:
            self._keep(line)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log_file:
            self.log_file.close()
        return self.proc.returncode


def split_args(argv):
    """main args, serve args, loadgen args (separated by `--`)."""
    parts = [[]]
    for x in argv:
        if x == "--" and len(parts) < 3:
            parts.append([])
        else:
            parts[-1].append(x)
    while len(parts) < 3:
        parts.append([])
    return parts


def run_point(python, server, rate, args, loadgen_args, out, label):
    cmd = [python, os.path.join(HERE, "loadgen.py"), "--base-url", server.base_url, "--rate", str(rate),
           "--duration", str(args.duration), "--seed", str(args.seed), "--json", out, "--label", label,
           ] + loadgen_args
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return json.load(f)


def main(argv=None):
    mine, serve_args, loadgen_args = split_args(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "infercept"), help="infercept binary")
    ap.add_argument("--policies", nargs="+", default=["discard", "minwaste"], choices=POLICIES)
    ap.add_argument("--estimators", nargs="+", default=[None],
                    help="oracle, elapsed, learned (default: the server's default)")
    ap.add_argument("--rates", type=float, nargs="+", default=[0.2, 0.4])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per point")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "sweep"))
    ap.add_argument("--fresh-server", action="store_true", help="a new server for every point")
    ap.add_argument("--python", default=sys.executable, help="interpreter for loadgen.py")
    args = ap.parse_args(mine)
    os.makedirs(args.out_dir, exist_ok=True)

    results = []
    for policy in args.policies:
        for est in args.estimators:
            label = policy + (f"/{est}" if est else "")
            extra = ["--policy", policy] + (["--estimator", est] if est else []) + serve_args
            server = None
            try:
                for rate in args.rates:
                    if server is None:
                        log = os.path.join(args.out_dir, f"{label.replace('/', '-')}-server.log")
                        print("+", args.bin, "serve --port 0", " ".join(extra), file=sys.stderr, flush=True)
                        server = Server(args.bin, extra, log_path=log)
                    out = os.path.join(args.out_dir, f"{label.replace('/', '-')}-rate{rate:g}.json")
                    r = run_point(args.python, server, rate, args, loadgen_args, out, label)
                    results.append(r)
                    if args.fresh_server:
                        server.stop()
                        server = None
            finally:
                if server is not None:
                    server.stop()
    print(render(results))


def rate_text(r):
    """The requested rate, and the drawn one when a short run strays from it."""
    want, got = r.get("rate_requested"), r.get("rate")
    if want and got is not None and abs(got - want) > 0.05 * want:
        return f"{want:g} (drawn {got:.2f})"
    return f"{want or got or 0:g}"


def render(results):
    lines = ["| label | mode | rate (req/s) | done/submitted | completed/s | norm. latency mean / p50 / p90 / p99 "
             "(ms/token) | TTFT mean / p99 (ms) | recomputed tok | swapped out tok | waste GB*s recompute / "
             "preserve / swap stall |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        nl, tt = s["normalized_latency_s_per_token"], s["ttft_s"]
        w = r.get("waste_byte_seconds") or {}

        def gb(k):
            return "n/a" if w.get(k) is None else f"{w[k] / 1e9:.3f}"
        lines.append(
            f"| {r.get('label') or r.get('policy')} | {r.get('mode', 'bench')} | "
            f"{rate_text(r)} | {s['completed']}/{s['submitted']} | "
            f"{s['throughput_rps']:.3f} | {nl['mean'] * 1e3:.1f} / {nl['p50'] * 1e3:.1f} / {nl['p90'] * 1e3:.1f} / "
            f"{nl['p99'] * 1e3:.1f} | {tt['mean'] * 1e3:.0f} / {tt['p99'] * 1e3:.0f} | "
            f"{r.get('recomputed_tokens', 'n/a')} | {r.get('swapped_out_tokens', 'n/a')} | "
            f"{gb('recompute')} / {gb('preserve')} / {gb('swap_stall')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
