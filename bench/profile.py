"""Read py-spy raw (collapsed) stacks: ``python -m bench.profile FILE [N] [--messages M]``
prints the functions with the most samples, by self time and by inclusive time; with
``--messages`` (how many messages the sampled process handled while sampled), also in µs
per message, each sample standing for 1/``--rate`` s (400 Hz, as ``BENCH_PROFILE``
samples).

Record with ``BENCH_PROFILE=DIR python -m bench ...``: every daemon a benchmark starts is
sampled by ``py-spy record --nonblocking`` into ``DIR/<label>-<pid>.txt``.

``python -m bench.profile durable [--seconds S] [--clients lean|anyio]`` does both for the
durable-throughput load (16 pairs × 4 in flight, job receivers): it runs it once with the
daemon sampled, then prints the summary per message. py-spy counts a sample whenever a
thread is not idle, which on a loaded machine includes time spent runnable but waiting for
a core: the per-message figures then overstate CPU, evenly; the shares hold better.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from collections import Counter

RATE = 400


def summarise(path: str, top: int = 30, messages: int | None = None, rate: int = RATE) -> str:
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

    def cell(n: int) -> str:
        share = f"{100 * n / total:5.1f}%"
        if messages:
            share += f"  {n / rate / messages * 1e6:7.1f} µs/msg"
        return share

    head = f"{path}: {total} samples"
    if messages:
        head += f", {messages:,} messages: {total / rate / messages * 1e6:.1f} µs of samples per message"
    out = [head, "  self:"]
    out += [f"    {cell(n)}  {name}" for name, n in self_time.most_common(top)]
    out.append("  inclusive:")
    out += [f"    {cell(n)}  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(out)


def profile_durable(seconds: float, clients: str, top: int) -> str:
    from bench.common import raise_nofile
    from bench.throughput import pairs_run

    raise_nofile()
    folder = tempfile.mkdtemp(prefix="rb-prof-")
    os.environ["BENCH_PROFILE"] = folder
    result = pairs_run("roost", receivers="job", durable=True, seconds=seconds, warmup=0.5, window=4, clients=clients)
    (path,) = glob.glob(os.path.join(folder, "*.txt"))
    figures = {k: result[k] for k in ("rate", "cpu_per_msg", "client_cpu_per_msg", "sent_total")}
    return f"{json.dumps(figures)}\n" + summarise(path, top, messages=result["sent_total"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "durable":
        parser = argparse.ArgumentParser(prog="python -m bench.profile durable")
        parser.add_argument("--seconds", type=float, default=8.0)
        parser.add_argument("--clients", choices=("lean", "anyio"), default="lean")
        parser.add_argument("--top", type=int, default=40)
        args = parser.parse_args(argv[1:])
        print(profile_durable(args.seconds, args.clients, args.top))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("file")
    parser.add_argument("top", type=int, nargs="?", default=30)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--rate", type=int, default=RATE)
    args = parser.parse_args(argv)
    print(summarise(args.file, args.top, args.messages, args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
