#!/usr/bin/env python3
"""CPU throughput, infercept vs llama.cpp, same model file and thread count.

Run through bench/cpu_bench.sh (`make bench`), which provides a Python with
llama-cpp-python. Measures, for each engine, in separate processes so each has its own
peak RSS (from wait4):
  - prompt tokens/s: one 512-token prompt (exactly 512 ids for llama.cpp; the same text,
    written to a file, for infercept)
  - decode tokens/s at batch 1, 8 and 32: each sequence prefilled with P prompt tokens,
    then N greedy decode steps; tokens/s = batch * N / decode time
and prints them side by side; the numbers also go to a JSON file.

infercept commands (the CLI contract):
  $BIN generate --json --prompt-file F --max-tokens N  [--model M --threads T]
      -> JSON with prompt_tokens_per_s, decode_tokens_per_s
  $BIN bench-decode --batch B --prompt-tokens P --decode-tokens N --json  [--model M --threads T]
      -> JSON with prompt_tokens_per_s, decode_tokens_per_s, batch
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Varied English for the 512-token prompt; repeated and cut at exactly 512 tokens.
PROMPT_SEED_TEXT = (
    "The history of computing is a story of abstractions stacked on abstractions. Early "
    "machines were programmed by rewiring panels; then came stored programs, assemblers, "
    "compilers, operating systems, and networks that connected millions of devices. Each "
    "layer hid the details of the one below it, so that engineers could reason about larger "
    "problems. Today a language model server receives a request over HTTP, splits the text "
    "into tokens, runs a transformer over them in batches, and streams the answer back one "
    "token at a time. Its throughput depends on memory bandwidth, on how well the batches "
    "are packed, and on how the key-value cache is managed when requests pause to call "
    "tools. In 1969, engineers sent the first message across ARPANET: it crashed after two "
    "letters. Fifty years later, data centers serve billions of queries a day, yet the same "
    "questions remain: what to keep in fast memory, what to move, and what to recompute. "
)


def run_with_rss(cmd, timeout):
    """Runs cmd in a child and returns (rc, stdout, stderr, peak_rss_mib) using os.wait4."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        try:
            proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True)
        except OSError as e:
            return 127, "", str(e), None
        timer = threading.Timer(timeout, lambda: os.kill(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        rss_mib = rusage.ru_maxrss / 1024.0  # Linux: KiB
        return proc.returncode, fo.read(), fe.read(), rss_mib


def last_json(text):
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def make_prompt(model, workdir, n_tokens):
    """Writes prompt_<n>.txt and prompt_<n>_ids.json (exactly n llama.cpp token ids)."""
    import llama_cpp

    ids_path = os.path.join(workdir, f"prompt_{n_tokens}_ids.json")
    txt_path = os.path.join(workdir, f"prompt_{n_tokens}.txt")
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    text = PROMPT_SEED_TEXT
    while len(llm.tokenize(text.encode(), add_bos=True)) < n_tokens + 8:
        text += PROMPT_SEED_TEXT
    ids = llm.tokenize(text.encode(), add_bos=True)[:n_tokens]
    prompt_text = llm.detokenize(ids).decode("utf-8", errors="ignore")
    with open(ids_path, "w") as f:
        json.dump(ids, f)
    with open(txt_path, "w") as f:
        f.write(prompt_text)
    return ids_path, txt_path


def measure(label, cmd, timeout, key):
    print(f"  {label}: {' '.join(shlex.quote(c) for c in cmd)}", file=sys.stderr, flush=True)
    load_before = os.getloadavg()[0]
    rc, out, err, rss = run_with_rss(cmd, timeout)
    load = {"loadavg_1m_before": round(load_before, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2)}
    res = last_json(out) if rc == 0 else None
    if res is None or key not in res:
        why = f"rc={rc}" if rc != 0 else f"no '{key}' in output"
        tail = (err or out).strip().splitlines()[-3:]
        print(f"    failed ({why}): {' | '.join(tail)}", file=sys.stderr, flush=True)
        return {"error": why, "stderr_tail": tail, "peak_rss_mib": rss, "cmd": cmd, **load}
    res.update(load)
    res["peak_rss_mib"] = round(rss, 1) if rss is not None else None
    res["cmd"] = cmd
    print(f"    {key} = {res[key]:.1f}, peak RSS {res['peak_rss_mib']} MiB, load "
          f"{load['loadavg_1m_before']} -> {load['loadavg_1m_after']}", file=sys.stderr, flush=True)
    return res


def fmt(res, key):
    if res is None:
        return "skipped"
    if "error" in res:
        return "n/a"
    v = res.get(key)
    return "n/a" if v is None else f"{v:.1f}"


def cpu_model():
    """The host CPU as /proc/cpuinfo names it, with its family and model numbers: the shared
    development machine has been an Intel Xeon and an AMD EPYC on different days, and the
    figures (batch 1 above all) differ between them (docs/PERF.md, "CPU: decode and prefill against llama.cpp")."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = (x.strip() for x in line.split(":", 1))
                    fields.setdefault(k, v)
                elif fields:
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "infercept"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512, help="prompt benchmark length")
    ap.add_argument("--decode-prompt-tokens", type=int, default=128,
                    help="P: prompt tokens per sequence before the decode benchmark")
    ap.add_argument("--decode-tokens", type=int, default=64, help="N: decode steps timed")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp flash attention (its default is auto)")
    ap.add_argument("--workdir", default=os.environ.get("INFERCEPT_BENCH_DIR",
                                                         "/tmp/infercept-bench"))
    ap.add_argument("--infercept-args", default=None,
                    help="extra args for every infercept command "
                         "(default: --model MODEL --threads THREADS)")
    ap.add_argument("--skip", choices=["llama", "infercept"], default=None)
    ap.add_argument("--timeout", type=int, default=900, help="per command, seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "cpu_bench.json"))
    args = ap.parse_args()

    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.abspath(args.model)
    batches = [int(b) for b in args.batches.split(",") if b]
    ids_path, txt_path = make_prompt(model, args.workdir, args.prompt_tokens)
    P, N = args.decode_prompt_tokens, args.decode_tokens
    extra = (shlex.split(args.infercept_args) if args.infercept_args is not None
             else ["--model", model, "--threads", str(args.threads)])

    results = {"llama.cpp": {}, "infercept": {}}
    if args.skip != "llama":
        print("llama.cpp (llama-cpp-python, low-level C API):", file=sys.stderr)
        ref = [sys.executable, os.path.join(HERE, "llama_cpp_ref.py")]
        common = ["--model", model, "--prompt-ids", ids_path, "--threads", str(args.threads),
                  "--flash-attn", args.flash_attn]
        results["llama.cpp"]["prompt"] = measure(
            f"prompt {args.prompt_tokens}", ref + ["prompt"] + common, args.timeout,
            "prompt_tokens_per_s")
        for b in batches:
            results["llama.cpp"][f"decode_b{b}"] = measure(
                f"decode batch {b}",
                ref + ["decode"] + common + ["--batch", str(b), "--prompt-tokens", str(P),
                                             "--decode-tokens", str(N)],
                args.timeout, "decode_tokens_per_s")
    if args.skip != "infercept":
        print(f"infercept ({args.bin}):", file=sys.stderr)
        if not os.path.exists(args.bin):
            print(f"  {args.bin} not found: run `make build` first", file=sys.stderr)
        results["infercept"]["prompt"] = measure(
            f"prompt {args.prompt_tokens}",
            [args.bin, "generate", "--json", "--prompt-file", txt_path, "--max-tokens",
             "16"] + extra, args.timeout, "prompt_tokens_per_s")
        for b in batches:
            results["infercept"][f"decode_b{b}"] = measure(
                f"decode batch {b}",
                [args.bin, "bench-decode", "--batch", str(b), "--prompt-tokens", str(P),
                 "--decode-tokens", str(N), "--json"] + extra,
                args.timeout, "decode_tokens_per_s")

    lc, ic = results["llama.cpp"], results["infercept"]
    rows = [(f"prompt tokens/s ({args.prompt_tokens}-token prompt)", "prompt",
             "prompt_tokens_per_s")]
    rows += [(f"decode tokens/s, batch {b} (P={P}, N={N})", f"decode_b{b}",
              "decode_tokens_per_s") for b in batches]
    rows += [(f"peak RSS MiB, {name}", key, "peak_rss_mib")
             for name, key in [("prompt run", "prompt")] +
             [(f"batch {b} run", f"decode_b{b}") for b in batches]]
    w = max(len(r[0]) for r in rows) + 2
    print()
    print(f"model {os.path.relpath(model, ROOT)}, {args.threads} threads, "
          f"{os.cpu_count()} CPUs, {cpu_model()}")
    print(f"{'':{w}}{'llama.cpp':>12}{'infercept':>12}{'ratio':>8}")
    for label, key, field in rows:
        a, b = fmt(lc.get(key), field), fmt(ic.get(key), field)
        ratio = ""
        try:
            ratio = f"{float(b) / float(a):.2f}"
        except ValueError:
            pass
        print(f"{label:{w}}{a:>12}{b:>12}{ratio:>8}")
    print("ratio = infercept / llama.cpp (for RSS, lower is better)")
    one, many = ic.get("decode_b1"), ic.get(f"decode_b{max(batches)}")
    if one and many and len(batches) > 1:
        try:
            print(f"infercept decode, batch {max(batches)} over batch 1: "
                  f"{float(fmt(many, 'decode_tokens_per_s')) / float(fmt(one, 'decode_tokens_per_s')):.2f}x")
        except ValueError:
            pass
    loads = [r.get("loadavg_1m_before", 0) for e in results.values() for r in e.values()]
    if loads and max(loads) > args.threads:
        print(f"WARNING: 1-minute load average reached {max(loads):.1f} on {os.cpu_count()} "
              "CPUs during the runs: other processes shared the cores, the numbers are low "
              "and noisy (see loadavg_* in the details).")

    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": os.path.relpath(model, ROOT), "threads": args.threads,
        "cpus": os.cpu_count(), "cpu_model": cpu_model(), "prompt_tokens": args.prompt_tokens,
        "decode_prompt_tokens": P, "decode_tokens": N, "flash_attn": args.flash_attn,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"(details: {args.out})")


if __name__ == "__main__":
    main()
