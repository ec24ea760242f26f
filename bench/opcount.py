"""How many bytecodes the daemon's op logic runs per message, step by step:
``python -m bench.opcount [--iterations N] [--top K] [--step STEP]``.

The steps and the daemon are :mod:`bench.oplogic`'s (a send to a foreground peer, a send
to a job, its ack, the commit with its answers; detached connections, no fsync); only
what runs between that bench's clock reads is counted (``sys.settrace`` with opcode
events), so the count is the op logic's and nothing else's. Unlike a time, the count does
not move with the host's load: it is the figure to compare before and after a change of
the op logic on a noisy machine (run it with ``PYTHONPATH=OLD/src`` for "before").
C code (orjson, msgspec, dict and list methods) counts as the one bytecode that calls it.
It is a diagnostic, with no baseline.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from types import FrameType
from typing import Any

from bench.oplogic import measure

STEPS = ("send to a foreground peer", "send to a job", "the job's ack", "the commit and its answers")


class OpcodeCounter:
    """A clock for :func:`bench.oplogic.measure` that counts the bytecodes run between
    each pair of its reads, per step and per function."""

    def __init__(self) -> None:
        self.per_step: Counter[str] = Counter()
        self.per_function: Counter[str] = Counter()
        self.per_step_function: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()
        self._reads = 0

    def __call__(self) -> float:
        if self._reads % 2 == 0:
            sys.settrace(self._trace)
        else:
            sys.settrace(None)
        self._reads += 1
        return time.thread_time()

    def _step(self) -> str:
        return STEPS[(self._reads - 1) // 2 % len(STEPS)]

    def _trace(self, frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            self.calls[_name(frame)] += 1
        elif event == "opcode":
            step = self._step()
            self.per_step[step] += 1
            self.per_function[_name(frame)] += 1
            self.per_step_function[step, _name(frame)] += 1
        return self._trace


def _name(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opcount", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--top", type=int, default=25, help="functions to list, most bytecodes first")
    parser.add_argument("--step", choices=STEPS, help="list the functions of this step only")
    args = parser.parse_args(argv)
    counter = OpcodeCounter()
    measure(args.iterations, clock=counter)
    n = args.iterations
    print(f"bytecodes per message, by step ({n:,} iterations):")
    for step in STEPS:
        print(f"  {counter.per_step[step] / n:7.0f}  {step}")
    print(f"  {sum(counter.per_step.values()) / n:7.0f}  all four; {sum(counter.calls.values()) / n:.0f} Python calls")
    if args.step:
        print(f"by function, {args.step} only (bytecodes per iteration):")
        ranked = sorted(((count, name) for (step, name), count in counter.per_step_function.items() if step == args.step), reverse=True)
        for count, name in ranked[: args.top]:
            print(f"  {count / n:7.1f}  {name}")
        return 0
    print("by function (bytecodes per iteration, calls per iteration):")
    for name, count in counter.per_function.most_common(args.top):
        print(f"  {count / n:7.1f} {counter.calls[name] / n:5.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
