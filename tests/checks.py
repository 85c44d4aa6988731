"""The tally the Python tests here share: each check prints 'ok:   WHAT' or 'FAIL: WHAT' and
counts; finish() prints 'N passed, N failed' and exits non-zero when any failed (ctest reads
the exit status). Tests run as scripts, so this directory is on sys.path: `from checks import
check, finish`."""
import sys

_results = {"passed": 0, "failed": 0}


def check(cond, what):
    _results["passed" if cond else "failed"] += 1
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    return bool(cond)


def finish():
    print(f"{_results['passed']} passed, {_results['failed']} failed")
    sys.exit(1 if _results["failed"] else 0)
