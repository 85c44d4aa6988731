"""What the Python tests here share: the tally (each check prints 'ok:   WHAT' or 'FAIL: WHAT'
and counts; finish() prints 'N passed, N failed' and exits non-zero when any failed, which
ctest reads) and start_server(). Tests run as scripts, so this directory is on sys.path:
`from checks import check, finish`."""
import re
import subprocess
import sys
import threading
import time

_results = {"passed": 0, "failed": 0}


def check(cond, what):
    _results["passed" if cond else "failed"] += 1
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    return bool(cond)


def finish():
    print(f"{_results['passed']} passed, {_results['failed']} failed")
    sys.exit(1 if _results["failed"] else 0)


def start_server(cmd, timeout=120):
    """Starts `infercept serve ... --port 0` (cmd) and returns (process, port, log): the port from
    its start-up line; the rest of its stderr keeps being appended to the log list."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    log, port = [], None
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError("server exited: " + "".join(log))
        log.append(line)
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise RuntimeError("server did not start")
    threading.Thread(target=lambda: [log.append(l) for l in proc.stderr], daemon=True).start()
    return proc, port, log
