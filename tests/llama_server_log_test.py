#!/usr/bin/env python3
"""bench/llama_server_log.py: a made-up llama-server log (its print_timing format) summarized
by window, plain and gzipped; a log without timing lines is an error, not an empty table."""
import gzip
import os
import subprocess
import sys
import tempfile

from checks import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "bench", "llama_server_log.py")


def timing(stamp, task, prompt_ms, prompt_n, eval_ms, eval_n):
    p = f"{stamp} I slot print_timing: id  3 | task {task} | "
    return (p + f"prompt eval time =    {prompt_ms:.2f} ms /   {prompt_n} tokens (    1.00 ms per token)\n" +
            p + f"       eval time =    {eval_ms:.2f} ms /    {eval_n} tokens (    5.00 ms per token)\n" +
            p + f"      total time =    {prompt_ms + eval_ms:.2f} ms /   {prompt_n + eval_n} tokens\n")


def run(path, *extra):
    return subprocess.run([sys.executable, TOOL, path, *extra], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def main():
    tmp = tempfile.mkdtemp(prefix="llama-server-log-test-")
    log = ("0.00.242.387 I srv  llama_server: initializing ...\n" +
           timing("0.03.339.955", 0, 84.0, 96, 50.0, 10) +      # 3.3 s
           timing("0.08.100.000", 2, 20.0, 300, 150.0, 10) +    # 8.1 s: same window
           timing("0.12.000.000", 5, 10.0, 40, 4000.0, 10) +    # 12 s: next window
           timing("1.05.000.000", 9, 1.0, 1, 30.0, 6))          # 65 s (minutes roll over)
    plain = os.path.join(tmp, "server.log")
    with open(plain, "w") as f:
        f.write(log)
    zipped = plain + ".gz"
    with gzip.open(zipped, "wt") as f:
        f.write(log)

    out = run(plain)
    check(out.returncode == 0, "a log with timing lines: exit 0")
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    check(len(rows) == 3, f"three windows of 10 s hold requests ({len(rows)})")
    check(rows and rows[0] == "| 0-10 | 2 | 396 | 20 | 10.0 |",
          "first window: 2 requests, 96 + 300 prompt tokens, 20 generated, (50 + 150) / 20 ms a token")
    check(len(rows) > 1 and rows[1] == "| 10-20 | 1 | 40 | 10 | 400.0 |", "second window: 400 ms a token")
    check(len(rows) > 2 and rows[2].startswith("| 60-70 | 1 |"), "the minutes field counts: 1.05 is 65 s")
    check(run(zipped).stdout == out.stdout, "the gzipped log gives the same table")
    wide = run(plain, "--window", "60")
    check("| 0-60 | 3 | 436 | 30 |" in wide.stdout, "--window 60 puts the first three in one row")

    empty = os.path.join(tmp, "empty.log")
    with open(empty, "w") as f:
        f.write("0.00.250.428 E llama_model_load: error loading model\n")
    res = run(empty)
    check(res.returncode == 1 and "no print_timing lines" in res.stdout, "no timing lines: exit 1, said")
    res = run(os.path.join(tmp, "missing.log"))
    check(res.returncode == 2 and "missing.log" in res.stdout, "a missing file: exit 2, named")
    finish()


if __name__ == "__main__":
    main()
