"""What bounds the durable row: ``python -m bench.windows [--in-flight 2,4,8,16] [--reps N]
[--seconds S]``.

Runs the durable load of ``bench floor`` (16 pairs, lean clients, job receivers) at each
in-flight depth, on roost and on the floor (the lean broker on uvloop), alternating, and
prints per run the rate, the server's CPU per message, the clients', and how busy the
server's loop thread was (the share of the window it ran, and waited for a core).

A server bound by its round trips (the disk's commit, the clients' wakeups) goes faster
as more messages are in flight, and its loop thread idles; one bound by its own CPU stays
where it is, its loop thread near a whole core. Which of the two roost is tells where the
durable row's ratio can move from. Past 20 in flight per pair, roost's job queue cap (the
spec's 20 agent items) refuses sends ``queue_full``; the retries are printed.
"""

from __future__ import annotations

import argparse
import sys

from bench.common import median, raise_nofile
from bench.pair import run_once


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.windows", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", default="2,4,8,16", dest="windows", help="in-flight depths per pair, comma-separated")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    raise_nofile()
    windows = [int(w) for w in args.windows.split(",")]
    rates: dict[tuple[int, str], list[float]] = {}
    for rep in range(args.reps):
        for window in windows:
            for system in ("lean-uvloop", "roost"):
                r = run_once(system, args.seconds, window)
                rates.setdefault((window, system), []).append(r["rate"])
                loop = f"loop thread ran {r['loop'][0]:4.0%} + waited {r['loop'][1]:4.0%}" if r.get("loop") else ""
                print(f"rep {rep + 1} × {window:2d} {'floor' if system != 'roost' else 'roost':5} {r['rate']:8,.0f}/s  "
                      f"server {r['cpu_per_msg'] * 1e6:5.1f} µs/msg  clients {r['client_cpu_per_msg'] * 1e6:5.1f} µs/msg  "
                      f"{loop}  retries {r['retries']:,}", flush=True)
    print("\n| in flight per pair | roost msgs/s | floor msgs/s | ratio |\n|---|---|---|---|")
    for window in windows:
        roost, floor = median(rates[(window, "roost")]), median(rates[(window, "lean-uvloop")])
        print(f"| {window} | {roost:,.0f} | {floor:,.0f} | {roost / floor:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
