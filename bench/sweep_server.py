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

A peer in the same run (issue 6, item 4): --llama-server BIN (or `auto`: bench/peer_llama_cpp.sh
builds it from the llama-cpp-python sdist and prints its path) also runs every rate against
llama.cpp's OpenAI-compatible server on the same model file (--model) and thread count
(--threads, given to both servers), with --peer-args (default: 16 slots, 4096 tokens of
context each, continuous batching, Jinja chat templates for the tools, Prometheus /metrics)
and Qwen2.5's chat template from llama.cpp's sources (ChatML with Hermes-style tool calls,
the format infercept renders for SmolLM2; the model's own template has no tools). Its
loadgen runs add --peer-loadgen-args: no logprobs (refused with tools when streaming) and
the call opening that infercept forces itself (--call-prefill).
The lines are then labelled `infercept <policy>` and `llama.cpp server` (files
`infercept-<policy>-rate<R>.json`, `llama-server-rate<R>.json`); --order rate runs every
server at a rate before the next rate (the servers stay up side by side, idle but for the one
being measured), so that a drift in the machine's load hits both alike.

  python3 bench/sweep_server.py --llama-server auto --policies minwaste --rates 0.1 0.2 \\
      --duration 60 --order rate --out-dir build/peer -- --quiet \\
      -- --workload mixed --time-scale 0.05 --context-scale 0.2 --mode standard
"""
import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLICIES = ["discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"]
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# llama-server: 16 slots of 4096 tokens each (-c is the total; one KV stream per slot),
# continuous batching, Jinja templates (needed for `tools`), /metrics, no web UI.
PEER_ARGS = "-np 16 -c 65536 --cont-batching --jinja --metrics --no-webui"
# SmolLM2's GGUF template knows no tools (llama-server would then ignore them); Qwen2.5's,
# vendored with llama.cpp, is the ChatML + Hermes <tool_call> format infercept renders.
PEER_TEMPLATE = os.path.join("vendor", "llama.cpp", "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
# loadgen against llama-server: no logprobs (it refuses them with tools in a stream), and the
# call opening infercept forces for tool_choice required (llama-server's grammar waits for
# the model to open a call, which SmolLM2 does not do on its own).
PEER_LOADGEN_ARGS = ["--no-logprobs", "--call-prefill", '<tool_call>\\n{"name": "']
PEER_LABEL = "llama.cpp server"


def stop_process(proc, timeout):
    """SIGTERM (a graceful stop), then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
        stop_process(self.proc, timeout)
        if self.log_file:
            self.log_file.close()
        return self.proc.returncode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama.cpp's `llama-server` on a free port; ready when GET /health answers 200."""

    def __init__(self, binary, model, threads, args, log_path=None, start_timeout=300):
        self.port = free_port()
        self.cmd = [binary, "-m", model, "-t", str(threads), "-tb", str(threads),
                    "--host", "127.0.0.1", "--port", str(self.port)] + list(args)
        self.log_file = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, stdout=self.log_file, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.time() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); see {log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"llama-server did not start in time; see {log_path}")
            time.sleep(0.5)

    def stop(self, timeout=60):
        stop_process(self.proc, timeout)
        if self.log_file is not subprocess.DEVNULL:
            self.log_file.close()
        return self.proc.returncode


def peer_template(spec, binary):
    """--chat-template-file for llama-server: `auto` is Qwen2.5's template next to the sources
    the binary was built from (bench/peer_llama_cpp.sh's layout), `none` leaves the model's."""
    if spec == "none":
        return None
    if spec != "auto":
        return spec
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(binary))))
    path = os.path.join(src, PEER_TEMPLATE)
    if not os.path.exists(path):
        sys.exit(f"sweep_server.py: no {path}; give --peer-chat-template FILE (or none)")
    return path


def find_llama_server(spec):
    """The llama-server binary: a path, or `auto` (bench/peer_llama_cpp.sh builds it once)."""
    if spec != "auto":
        return spec
    p = subprocess.run(["bash", os.path.join(HERE, "peer_llama_cpp.sh")], stdout=subprocess.PIPE,
                       text=True, check=True)
    return p.stdout.strip().splitlines()[-1]


def has_flag(args, name):
    return any(x == name or x.startswith(name + "=") for x in args)


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
    g = ap.add_argument_group("peer server")
    g.add_argument("--llama-server", default="", metavar="BIN|auto",
                   help="also run every rate against llama.cpp's llama-server (auto: build it with "
                        "bench/peer_llama_cpp.sh)")
    g.add_argument("--no-infercept", action="store_true", help="only the peer (with --llama-server)")
    g.add_argument("--peer-args", default=PEER_ARGS, help="llama-server flags (default: %(default)s)")
    g.add_argument("--peer-chat-template", default="auto", metavar="FILE|auto|none",
                   help="llama-server's --chat-template-file (auto: Qwen2.5's, from llama.cpp's sources)")
    g.add_argument("--peer-loadgen-args", default=None,
                   help="more loadgen flags for the peer's points (default: " +
                        " ".join(shlex.quote(x) for x in PEER_LOADGEN_ARGS) + ")")
    g.add_argument("--model", default=None,
                   help=f"model file for both servers (default with a peer: {DEFAULT_MODEL})")
    g.add_argument("--peer-model", default=None,
                   help="the peer's own model file when it cannot read --model's (a GGUF of a "
                        "make-model checkpoint: bench/convert_to_gguf.py)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads for both servers (default with a peer: 2)")
    g.add_argument("--order", choices=["target", "rate"], default="target",
                   help="target: every rate on one server, then the next server; rate: every "
                        "server at one rate, then the next rate (servers stay up side by side)")
    args = ap.parse_args(mine)
    # A `timeout` around this script sends SIGTERM: exit through the finally below, so that
    # no server outlives it holding the GPU's memory (a second sweep then fails to start).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.makedirs(args.out_dir, exist_ok=True)
    peer = bool(args.llama_server)
    if args.no_infercept and not peer:
        ap.error("--no-infercept needs --llama-server")
    if peer:
        args.model = args.model or DEFAULT_MODEL
        args.threads = args.threads or 2
        args.llama_server = find_llama_server(args.llama_server)
    common = []  # model and threads for infercept too, unless given after `--`
    if args.model and not has_flag(serve_args, "--model"):
        common += ["--model", args.model]
    if args.threads and not has_flag(serve_args, "--threads"):
        common += ["--threads", str(args.threads)]

    # Targets: (label, file stem, start function).
    targets = []
    if not args.no_infercept:
        for policy in args.policies:
            for est in args.estimators:
                label = policy + (f"/{est}" if est else "")
                if peer:
                    label = "infercept " + label
                stem = label.replace("/", "-").replace(" ", "-")
                extra = ["--policy", policy] + (["--estimator", est] if est else []) + common + serve_args

                def start(extra=extra, stem=stem):
                    print("+", args.bin, "serve --port 0", " ".join(extra), file=sys.stderr, flush=True)
                    return Server(args.bin, extra, log_path=os.path.join(args.out_dir, f"{stem}-server.log"))
                targets.append((label, stem, start, []))
    if peer:
        peer_args = shlex.split(args.peer_args)
        tmpl = peer_template(args.peer_chat_template, args.llama_server)
        if tmpl and not has_flag(peer_args, "--chat-template-file"):
            peer_args += ["--chat-template-file", tmpl]
        peer_loadgen = (PEER_LOADGEN_ARGS if args.peer_loadgen_args is None
                        else shlex.split(args.peer_loadgen_args))

        def start_peer():
            s = LlamaServer(args.llama_server, args.peer_model or args.model, args.threads, peer_args,
                            log_path=os.path.join(args.out_dir, "llama-server-server.log"))
            print("+", " ".join(s.cmd), file=sys.stderr, flush=True)
            return s
        targets.append((PEER_LABEL, "llama-server", start_peer, peer_loadgen))

    if args.order == "target":
        plan = [(t, rate) for t in targets for rate in args.rates]
    else:
        plan = [(t, rate) for rate in args.rates for t in targets]
    results = []
    servers = {}
    try:
        for k, ((label, stem, start, extra_lg), rate) in enumerate(plan):
            if stem not in servers:
                servers[stem] = start()
            out = os.path.join(args.out_dir, f"{stem}-rate{rate:g}.json")
            results.append(run_point(args.python, servers[stem], rate, args, loadgen_args + extra_lg, out, label))
            if args.fresh_server or all(t[1] != stem for t, _ in plan[k + 1:]):
                servers.pop(stem).stop()
    finally:
        for s in servers.values():
            s.stop()
    print(render(results))


def rate_text(r):
    """The requested rate, and the drawn one when a short run strays from it."""
    want, got = r.get("rate_requested"), r.get("rate")
    if want and got is not None and abs(got - want) > 0.05 * want:
        return f"{want:g} (drawn {got:.2f})"
    return f"{want or got or 0:g}"


def render(results):
    lines = ["| label | mode | rate (req/s) | done/submitted | completed/s | norm. latency mean / p50 / p90 / p99 "
             "(ms/token) | TTFT mean / p99 (ms) | prompt tok computed / cached | recomputed tok | swapped out tok "
             "| waste GB*s recompute / preserve / swap stall |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        nl, tt = s["normalized_latency_s_per_token"], s["ttft_s"]
        w = r.get("waste_byte_seconds") or {}

        def gb(k):
            return "n/a" if w.get(k) is None else f"{w[k] / 1e9:.3f}"
        srv = r.get("server") or {}

        def tok(k):
            return "n/a" if srv.get(k) is None else str(srv[k])
        lines.append(
            f"| {r.get('label') or r.get('policy')} | {r.get('mode', 'bench')} | "
            f"{rate_text(r)} | {s['completed']}/{s['submitted']} | "
            f"{s['throughput_rps']:.3f} | {nl['mean'] * 1e3:.1f} / {nl['p50'] * 1e3:.1f} / {nl['p90'] * 1e3:.1f} / "
            f"{nl['p99'] * 1e3:.1f} | {tt['mean'] * 1e3:.0f} / {tt['p99'] * 1e3:.0f} | "
            f"{tok('prompt_tokens_computed')} / {tok('cached_prompt_tokens')} | "
            f"{r.get('recomputed_tokens', 'n/a')} | {r.get('swapped_out_tokens', 'n/a')} | "
            f"{gb('recompute')} / {gb('preserve')} / {gb('swap_stall')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
