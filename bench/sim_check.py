#!/usr/bin/env python3
"""The simulator against the engine on one device, with the device's own measured profile.

`infercept profile` measures every step term the simulator prices on this device (or takes
--profile), then every point runs twice with the same workload flags: through the engine
(`infercept bench`) and through the simulator (`infercept simulate --profile`). Nothing is
fitted to the runs. Prints one markdown row per point: requests done, measured and simulated
mean normalized latency with the error, the resumed turns' first token both ways, and whether
the point is below saturation (the engine idled at least 3% of the run, at least 80% of its
requests finished and its mean TTFT is at most 250 ms: the criteria of bench/paper_report.py).

  python3 bench/sim_check.py --out DIR [--bin build/infercept] [--profile FILE]
      [--engine "--device cpu --threads 2"] [--shared "FLAGS"] [--profile-args "FLAGS"]
      WORKLOAD:POLICY:RATE...

--engine: flags of the engine alone (device, model, threads), given to profile and bench;
--shared: the workload and scheduler flags both runs take (seed, scales, pools, durations);
--profile-args: flags of `infercept profile` alone (e.g. --max-tokens-profiled 512).
Results: DIR/profile.json, DIR/{bench,sim}-W-P-R.json, DIR/report.md.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed (rc {r.returncode}): {shlex.join(cmd)}; see {log}")


def nl_ms(d):
    return d["summary"]["normalized_latency_s_per_token"]["mean"] * 1e3


def resumed_ms(d):
    r = d.get("resume_ttft_s") or {}
    return r["p50"] * 1e3 if r.get("count") else None


def idle_share(d):
    e = d.get("engine") or {}
    wall, idle = e.get("step_wall_seconds"), e.get("idle_seconds")
    if wall is None or idle is None or wall + idle <= 0:
        return None
    return idle / (wall + idle)


def below_saturation(d):
    s = d["summary"]
    share = idle_share(d)
    return (s["completed"] >= 0.8 * s["submitted"] and s["ttft_s"]["mean"] <= 0.25
            and share is not None and share >= 0.03)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("points", nargs="+", help="WORKLOAD:POLICY:RATE")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default="build/infercept")
    ap.add_argument("--profile", help="a profile file (else measured into OUT/profile.json)")
    ap.add_argument("--engine", default="", help="engine flags for profile and bench")
    ap.add_argument("--shared", default="", help="workload flags for bench and simulate")
    ap.add_argument("--profile-args", default="", help="flags of profile alone")
    ap.add_argument("--tol", type=float, default=15.0, help="the error allowed below saturation, %%")
    a = ap.parse_args()
    points = []
    for p in a.points:
        parts = p.split(":")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            sys.exit(f"a point is WORKLOAD:POLICY:RATE, not '{p}'")
        try:
            float(parts[2])
        except ValueError:
            sys.exit(f"the rate of '{p}' is not a number")
        points.append(parts)
    os.makedirs(a.out, exist_ok=True)
    engine, shared = shlex.split(a.engine), shlex.split(a.shared)
    profile = a.profile
    if profile is None:
        profile = os.path.join(a.out, "profile.json")
        print(f"profiling: {a.bin} profile {a.engine}", flush=True)
        run([a.bin, "profile", *engine, *shlex.split(a.profile_args), "--out", profile],
            os.path.join(a.out, "profile.log"))
    rows, within, below_n = [], 0, 0
    for wl, pol, rate in points:
        tag = f"{wl}-{pol}-{rate}"
        flags = ["--workload", wl, "--policy", pol, "--rate", rate, *shared]
        print(f"{tag}: engine", flush=True)
        bj = os.path.join(a.out, f"bench-{tag}.json")
        run([a.bin, "bench", *engine, *flags, "--json", bj], os.path.join(a.out, f"bench-{tag}.log"))
        print(f"{tag}: simulator", flush=True)
        sj = os.path.join(a.out, f"sim-{tag}.json")
        run([a.bin, "simulate", "--profile", profile, *flags, "--json", sj],
            os.path.join(a.out, f"sim-{tag}.log"))
        b, s = json.load(open(bj)), json.load(open(sj))
        err = (nl_ms(s) - nl_ms(b)) / nl_ms(b) * 100
        below = below_saturation(b)
        below_n += below
        within += below and abs(err) <= a.tol
        rb, rs = resumed_ms(b), resumed_ms(s)
        share = idle_share(b)
        rows.append(
            f"| {wl} | {pol} | {rate} | {b['summary']['completed']}/{b['summary']['submitted']} | "
            f"{nl_ms(b):.2f} | {nl_ms(s):.2f} | {err:+.1f}% | "
            f"{'-' if rb is None else f'{rb:.1f}'} / {'-' if rs is None else f'{rs:.1f}'} | "
            f"{'-' if share is None else f'{share:.0%}'} | {'yes' if below else 'no'} |")
    lines = [
        f"profile: {profile}; engine: `{a.engine}`; shared: `{a.shared}`",
        "",
        "| workload | policy | rate | done | measured ms/token | simulated | error | "
        "resumed first token p50 ms (measured / simulated) | engine idle | below saturation |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---|",
        *rows,
        "",
        f"{within} of {below_n} points below saturation within {a.tol:.0f}%",
    ]
    report = "\n".join(lines)
    print(report)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(report + "\n")


if __name__ == "__main__":
    main()
