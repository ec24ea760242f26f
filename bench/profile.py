"""Read py-spy raw (collapsed) stacks: ``python -m bench.profile FILE [N]`` prints the
functions with the most samples, by self time and by inclusive time.

Record with ``BENCH_PROFILE=DIR python -m bench ...``: every daemon a benchmark starts is
sampled by ``py-spy record --nonblocking`` into ``DIR/<label>-<pid>.txt``.
"""

from __future__ import annotations

import sys
from collections import Counter


def summarise(path: str, top: int = 30) -> str:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f.split(" (")[0] + " " + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] if " (" in f else f for f in stack.split(";")]
        # Idle: the loop waiting in select/epoll.
        total += n
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    out = [f"{path}: {total} samples"]
    out.append("  self:")
    out += [f"    {100 * n / total:5.1f}%  {name}" for name, n in self_time.most_common(top)]
    out.append("  inclusive:")
    out += [f"    {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarise(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
