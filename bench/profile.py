"""Read py-spy raw (collapsed) stacks: ``python -m bench.profile FILE [N] [--messages M]``
prints the functions with the most samples, by self time and by inclusive time; with
``--messages`` (how many messages the sampled process handled while sampled), also in µs
per message, each sample standing for 1/``--rate`` s (400 Hz, as ``BENCH_PROFILE``
samples).

Record with ``BENCH_PROFILE=DIR python -m bench ...``: every daemon a benchmark starts is
sampled by ``py-spy record --nonblocking`` into ``DIR/<label>-<pid>.txt``.

``python -m bench.profile durable [--seconds S] [--clients lean|anyio]`` does both for the
durable-throughput load (16 pairs × 4 in flight, job receivers): it runs it once with the
daemon sampled, then prints the summary per message; ``non-durable`` does the same for
that load with no fsync (``ROOST_DURABLE=0``, the non-durable rows' load). py-spy counts
a sample whenever a thread is not idle, which on a loaded machine includes time spent
runnable but waiting for a core: the per-message figures then overstate CPU, evenly; the
shares hold better.

``python -m bench.profile syscalls [--seconds S] [--reps N]`` runs that load on roost and
on the lean broker (uvloop), alternating, and prints each server's read- and write-type
syscalls per message: where the two differ, it is not in the syscalls.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

RATE = 400


def summarise(path: str, top: int = 30, messages: int | None = None, rate: int = RATE) -> str:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text(encoding="utf-8", errors="replace").split("\n"):
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


#: The daemon's main-thread costs in the shape of issue 18's table: the first bucket whose
#: names a stack holds takes its samples (function names as py-spy writes them).
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("teardown: the bench's receivers exit, their jobs' workers are gone (not per message)", ("worker_gone",)),
    ("the monitor (every 0.1 s; before: each adopted worker's liveness by psutil, now a pidfd each; per second, not per message)", ("DaemonBase.monitor",)),
    ("accept_send: reach (sender_info, resolve_target, reach)", ("DaemonBase.reach", "PeerTables.reach", "resolve_target", "sender_info", "MessagingOps.route", "PeerTables.route")),
    ("accept_send: limits check and note (plugin hooks)", ("check_send", "note_sent", "_checking", "LimitsPlugin.")),
    ("accept_send: framing (envelope hook)", ("frame_item", "_framer")),
    ("accept_send: delivery (queue item, push deliver, receipts, journal add)", ("accept_delivery", "SendDesk.deliver")),
    ("accept_send: Pending record and closures", ("Pending", "DaemonBase.__init__.<locals>.<lambda>")),
    ("accept_send: the rest", ("accept_send", "SendDesk.send", "SendDesk.broadcast")),
    ("answer once durable (commit callback: finish, encode, queue)", ("_answer_when_durable", "_answer_batch")),
    ("ack (op_ack / accept_ack: queue, receipts, journal add)", ("op_ack", "accept_ack")),
    ("request envelope (split, decode, parse, validate)", ("FrameDecoder.feed", "FastDecoder", "decode_line", "validate_args", "request_envelope", "compile_args", "_checked")),
    ("dispatch (accept_frame / handle_frame, data_received's loop over frames; before: the read callback's)", ("accept_frame", "ClientProtocol.data_received", "_serve.<locals>.on_data", "handle_frame")),
    ("socket send (Flusher / Connection.flush: transport.write; before: Connection._flush / writer)", ("Flusher._flush", "Connection.flush", "Connection._flush", "Connection.writer", "_write_loop")),
    ("socket receive (before: Connection.receive, per-wait add/remove reader; now uvloop's C code)", ("Connection.receive", "_readable", "Connection._read_ready")),
    ("the event loop itself (epoll, callbacks; uvloop's C code shows as Runner.run)", ("=EpollSelector.select", "=Runner.run", "=BaseEventLoop._run_once", "=Handle._run")),
    ("journal hand-off on the loop (hand-over to the writer thread and its answers; before: Journal.run/_commit, to_thread)", ("Journal.run", "Journal._commit", "Journal._hand", "Journal._submit", "Journal._written", "run_sync", "WriterThread.run", "WriterThread.submit")),
    ("registration (peer_register, worker_hello)", ("op_peer_register", "op_worker_hello", "after_register", "after_hello")),
    ("handle_frame itself and the rest of the loop", ("",)),
]


def table(path: str, messages: int, cpu_per_msg: float) -> str:
    """The main thread's samples in :data:`BUCKETS`, as shares and as µs per message of
    the daemon's measured CPU (the shares of its non-idle samples times its user+system
    CPU per message: load inflates samples, not CPU time); the journal thread apart."""
    main: Counter[str] = Counter()
    thread: Counter[str] = Counter()
    for line in Path(path).read_text(encoding="utf-8", errors="replace").split("\n"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        names = [frame.split(" (")[0] for frame in stack.split(";")]
        n = int(count)
        if "WorkerThread.run" in names or "Thread._bootstrap" in names or "WriterThread._main" in names:
            thread["write + fsync" if "Journal._write" in names else "waiting for work"] += n
            continue
        for label, keys in BUCKETS:
            # A key "=name" is the stack's innermost frame (time in the loop's own code).
            if any(names[-1] == key[1:] if key.startswith("=") else any(key in name for name in names) for key in keys):
                main[label] += n
                break
    total = sum(main.values())
    rows = ["| cost | share of the main thread | µs per message |", "|---|---|---|"]
    for label, _ in BUCKETS:
        share = main[label] / total if total else 0.0
        rows.append(f"| {label} | {100 * share:.1f}% | {share * cpu_per_msg * 1e6:.1f} |")
    rows.append(f"| **main thread, all** ({total} samples over {messages:,} messages) | 100% | {cpu_per_msg * 1e6:.1f} |")
    rows.append(f"| journal thread: write + fsync / waiting (samples, not CPU) | {thread['write + fsync']} / "
                f"{thread['waiting for work']} samples | — |")
    return "\n".join(rows)


def profile_load(seconds: float, clients: str, top: int, durable: bool = True) -> str:
    """The 16 pairs × 4 in flight load on roost (job receivers; with fsync or, with
    ``durable`` False, without), its daemon sampled: the summary and the table per message."""
    from bench.common import raise_nofile
    from bench.throughput import pairs_run

    raise_nofile()
    folder = tempfile.mkdtemp(prefix="rb-prof-")
    os.environ["BENCH_PROFILE"] = folder
    result = pairs_run("roost", receivers="job", durable=durable, seconds=seconds, warmup=0.5, window=4, clients=clients)
    (path,) = glob.glob(os.path.join(folder, "*.txt"))
    figures = {k: result[k] for k in ("rate", "cpu_per_msg", "client_cpu_per_msg", "sent_total")}
    return (f"{json.dumps(figures)}\n{summarise(path, top, messages=result['sent_total'])}\n\n"
            f"{table(path, result['sent_total'], result['cpu_per_msg'])}")


def syscalls(seconds: float, reps: int) -> str:
    """The durable load (16 pairs × 4 in flight, lean clients) on roost and on the lean
    broker on uvloop, alternating: each server's read- and write-type syscalls per
    message (``/proc/<pid>/io``), its CPU per message and its rate."""
    from bench.common import raise_nofile
    from bench.throughput import pairs_run

    raise_nofile()
    rows = ["| server | msgs/s | CPU µs/msg | reads/msg | writes/msg |", "|---|---|---|---|---|"]
    for _ in range(reps):
        for system, receivers in (("roost", "job"), ("lean-uvloop", "bare-job")):
            r = pairs_run(system, receivers=receivers, durable=True, seconds=seconds, warmup=0.5, window=4, clients="lean")
            rows.append(f"| {system} | {r['rate']:,.0f} | {r['cpu_per_msg'] * 1e6:.1f} | {r['reads_per_msg']:.2f} | {r['writes_per_msg']:.2f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "syscalls":
        parser = argparse.ArgumentParser(prog="python -m bench.profile syscalls")
        parser.add_argument("--seconds", type=float, default=4.0)
        parser.add_argument("--reps", type=int, default=2)
        args = parser.parse_args(argv[1:])
        print(syscalls(args.seconds, args.reps))
        return 0
    if argv and argv[0] in ("durable", "non-durable"):
        parser = argparse.ArgumentParser(prog=f"python -m bench.profile {argv[0]}")
        parser.add_argument("--seconds", type=float, default=8.0)
        parser.add_argument("--clients", choices=("lean", "anyio"), default="lean")
        parser.add_argument("--top", type=int, default=40)
        args = parser.parse_args(argv[1:])
        print(profile_load(args.seconds, args.clients, args.top, durable=argv[0] == "durable"))
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
