"""``python -m bench [--quick] [NAME...]``: run the benchmarks, print roost's figure, the
same-run baseline and the ratio for each, then one results table (Markdown)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from bench.common import Row, machine_description, markdown_table, raise_nofile

#: name -> module; run in this order.
BENCHMARKS = {
    "latency": "bench.latency",
    "floor": "bench.floor",
    "throughput": "bench.throughput",
    "peers": "bench.peers",
    "coldstart": "bench.coldstart",
    "memory": "bench.memory",
    "pi": "bench.pi",
    "codex": "bench.host_codex",
    "opencode": "bench.host_opencode",
    "client": "bench.client",
    "tools": "bench.tools",
    "qwen": "bench.host_qwen",
    "gemini": "bench.host_gemini",
    "web": "bench.web",
    "commands": "bench.commands",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="smaller runs, one repetition: under a minute, same ratios")
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # the harness self-test
    parser.add_argument("--json", metavar="FILE", help="also write every figure, raw samples included, as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="also write the machine and the table as Markdown")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    names = args.names or list(BENCHMARKS)
    raise_nofile()
    machine = machine_description()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    print(f"machine: {machine}\nmode: {mode}\n", flush=True)
    rows: list[Row] = []
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        module = importlib.import_module(BENCHMARKS[name])
        new = module.run(quick=args.quick, smoke=args.smoke)
        for row in new:
            ratio = "" if row.ratio is None else f"  ratio {row.ratio:.2f}x"
            verdict = "" if row.met is None else ("  target met" if row.met else "  TARGET MISSED")
            print(f"{row.bench}: {row.metric}: roost {row.roost}, baseline {row.baseline}{ratio}  [{row.target}]{verdict}", flush=True)
        print(f"  ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
        rows.extend(new)
    table = markdown_table(rows)
    print(f"\n{table}\n\n{len(rows)} rows in {time.perf_counter() - started:.0f} s", flush=True)
    if args.markdown:
        Path(args.markdown).write_text(f"Machine: {machine}\nMode: {mode}\n\n{table}\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "mode": mode, "rows": [
            {"bench": r.bench, "metric": r.metric, "roost": r.roost, "baseline": r.baseline, "ratio": r.ratio,
             "target": r.target, "met": r.met, "raw": r.raw} for r in rows]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
