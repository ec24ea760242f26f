"""Before/after: ``python -m bench.compare OLD_SRC [--reps N] [--full] [NAME...]``.

Runs ``python -m bench --quick NAME...`` alternately against an old copy of roost's
``src`` (put first on ``PYTHONPATH``, so the daemon, workers and clients all run the old
code) and against this checkout, ``--reps`` times each, and prints per row the median of
roost's figure and of the ratio to the same-run baseline for both. Alternating keeps the
two sides under the same background load on a shared machine, and which side goes first
alternates too (with ``--reps`` even, each goes first as often).

Make the old copy with e.g. ``git worktree add /tmp/old <commit>`` (then OLD_SRC is
``/tmp/old/src``) or by copying ``src/`` before a change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench.common import PYTHON, REPO

SIDES = ("before", "after")


def figure(text: str) -> float | None:
    """The number in a cell such as '1.24 ms', '2,130/s', '17.5 KiB', 'k = 1.42'."""
    match = re.search(r"(-?[0-9][0-9,]*\.?[0-9]*)\s*(µs|ms|s|/s|B|KiB|MiB)?", text.replace("k = ", ""))
    if not match:
        return None
    value = float(match.group(1).replace(",", ""))
    scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "KiB": 1024, "MiB": 1024 * 1024}.get(match.group(2) or "", 1.0)
    return value * scale


def one(old_src: str | None, names: list[str], full: bool) -> list[dict]:
    env = dict(os.environ)
    if old_src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (old_src, env.get("PYTHONPATH", "")) if p)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [PYTHON, "-m", "bench", "--json", out.name, *names]
        if not full:
            args.insert(3, "--quick")
        subprocess.run(args, cwd=str(REPO), env=env, check=True, stdout=subprocess.DEVNULL)
        return json.load(open(out.name))["rows"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("old_src")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--full", action="store_true", help="full runs instead of --quick")
    # Intermixed: `OLD_SRC --reps 2 NAME...` (the README's order) as well as
    # `OLD_SRC NAME... --reps 2`.
    args = parser.parse_intermixed_args(argv)
    runs: dict[str, list[list[dict]]] = {"before": [], "after": []}
    sources = {"before": args.old_src, "after": None}
    for rep in range(args.reps):
        # The order alternates: whichever side runs second in a pair runs on a machine the
        # first has just warmed (page cache, CPU frequency), which alone moved a latency
        # row by a third with the same code on both sides.
        for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
            src = sources[side]
            print(f"rep {rep + 1}/{args.reps}: {side}", file=sys.stderr, flush=True)
            runs[side].append(one(src, args.names, args.full))
    print("| benchmark | metric | before | after | before ratio | after ratio |\n|---|---|---|---|---|---|")
    for index, row in enumerate(runs["after"][0]):
        cells = {}
        for side in ("before", "after"):
            rows = [r[index] for r in runs[side] if index < len(r)]
            values = [v for v in (figure(r["roost"]) for r in rows) if v is not None]
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            cells[side] = (
                statistics.median(values) if values else None,
                statistics.median(ratios) if ratios else None,
                rows[0]["roost"] if rows else "",
            )
        def show(value: float | None, like: str) -> str:
            if value is None:
                return "—"
            unit = re.search(r"(µs|ms|/s|KiB|MiB| s| B)", like)
            unit_text = unit.group(1).strip() if unit else ""
            scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "KiB": 1024, "MiB": 1024 * 1024}.get(unit_text, 1.0)
            if like.startswith("k = "):
                return f"k = {value:.2f}"
            return f"{value / scale:,.2f} {unit_text}".strip() if unit_text != "/s" else f"{value:,.0f}/s"
        b, a = cells["before"], cells["after"]
        ratio = lambda r: "—" if r is None else f"{r:.2f}x"  # noqa: E731
        metric = re.sub(r"\s*\(.*", "", row["metric"])
        print(f"| {row['bench']} | {metric} | {show(b[0], b[2])} | {show(a[0], a[2])} | {ratio(b[1])} | {ratio(a[1])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
