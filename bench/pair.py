"""Before/after of the durable goal row alone, paired: ``python -m bench.pair OLD_SRC
[--reps N] [--seconds S] [--in-flight W]``.

One repetition runs the 16 pairs × ``W`` in flight durable load (lean clients, job
receivers, as ``bench floor`` runs it) three times: on roost with an old copy of its
``src`` (put first on ``PYTHONPATH``, so the daemon runs the old code), on roost as it
is, and on the floor (the lean broker on uvloop). The order of the two roosts alternates
between repetitions, and each repetition has its own floor run, so a slow minute of a
shared machine weighs on both sides alike. It prints every run, then per side the
median rate, its ratio to the floor's median, the paired ratios (each run over its own
repetition's floor run), the daemon's CPU per message and the clients'.

``bench.compare`` runs every row a few times each; this runs one row many times, for a
change whose effect is smaller than one run's spread. Make the old copy with
``git worktree add /tmp/old <commit>`` (OLD_SRC is then ``/tmp/old/src``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from bench.common import raise_nofile

SIDES = ("before", "after")


def run_once(system: str, seconds: float, window: int) -> dict[str, Any]:
    from bench.throughput import pairs_run

    receivers = "job" if system == "roost" else "bare-job"
    return pairs_run(system, receivers=receivers, durable=True, seconds=seconds, warmup=0.5, window=window, clients="lean")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pair", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_src")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=4, dest="window")
    args = parser.parse_args(argv)
    raise_nofile()
    base_path = os.environ.get("PYTHONPATH", "")
    paths = {"before": os.pathsep.join(p for p in (args.old_src, base_path) if p), "after": base_path}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": [], "floor": []}
    try:
        for rep in range(args.reps):
            order = SIDES if rep % 2 == 0 else SIDES[::-1]
            for side in (*order, "floor"):
                # pairs_run starts the daemon with this process's PYTHONPATH (bench_env).
                os.environ["PYTHONPATH"] = paths.get(side, base_path)
                result = run_once("roost" if side != "floor" else "lean-uvloop", args.seconds, args.window)
                runs[side].append(result)
                print(f"rep {rep + 1}/{args.reps} {side:6} {result['rate']:9,.0f}/s  daemon {result['cpu_per_msg'] * 1e6:5.1f} µs/msg"
                      f"  clients {result['client_cpu_per_msg'] * 1e6:5.1f} µs/msg", flush=True)
    finally:
        os.environ["PYTHONPATH"] = base_path
    floor = statistics.median(r["rate"] for r in runs["floor"])
    print(f"\n16 pairs × {args.window} in flight, durable, lean clients; {args.reps} repetitions of {args.seconds:g} s; medians:")
    print("| side | msgs/s | ratio to the floor | paired ratios | daemon CPU µs/msg | clients µs/msg |\n|---|---|---|---|---|---|")
    for side in (*SIDES, "floor"):
        rows = runs[side]
        rate = statistics.median(r["rate"] for r in rows)
        paired = sorted(r["rate"] / f["rate"] for r, f in zip(rows, runs["floor"], strict=False))
        spread = "—" if side == "floor" else f"{paired[0]:.2f}–{paired[-1]:.2f}"
        print(f"| {side} | {rate:,.0f} | {rate / floor:.3f}x | {spread} | {statistics.median(r['cpu_per_msg'] for r in rows) * 1e6:.1f} |"
              f" {statistics.median(r['client_cpu_per_msg'] for r in rows) * 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
