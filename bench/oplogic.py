"""What the daemon's op logic costs per message, with no socket and no fsync:
``python -m bench.oplogic [--messages N] [--repeat R]``.

The daemon is built in this process on a throwaway home (as ``tests/unit/test_daemon_ops``
builds it), its clients are detached connections (``Connection.detached``: what the daemon
sends them stays queued), and the journal writes without fsync. Each figure is this
thread's CPU time (``time.thread_time``) around the daemon's own calls only, per message,
the best of ``--repeat`` runs:

* a send from one foreground peer to another, decoded from its line, with its answer
  (``Dispatcher.decoder`` + ``Dispatcher.accept``; ``accept_frame`` before issue 41);
* a send to a job whose worker is connected (queue item, deliver event, journal record);
* that worker's ack of it;
* the commit that makes them durable, with the answers it sends (the journal's flush).

It is the part of a benchmark row's daemon CPU that is neither the socket nor the loop:
``bench.profile`` shows the rest. There is no baseline: it is a diagnostic, for before
and after a change of the op logic (run it with ``PYTHONPATH=OLD/src`` for "before").
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.common import BENCH_CONFIG, write_job_records

SEND_TEXT = "a message of the usual size, a line or two of what the sender wants to say"


def measure(messages: int, clock: Callable[[], float] = time.thread_time) -> dict[str, float]:
    """µs of CPU per message for each step (see the module docstring); ``clock`` is read
    before and after each step, and nowhere else (``bench.opcount`` counts with it)."""
    import anyio
    import psutil

    from roost_core.daemon import dispatch
    from roost_core.daemon.connection import Connection
    from roost_core.daemon.core import Daemon
    from roost_core.paths import resolve_paths
    from roost_core.plugins import make_plugin_manager
    from roost_core.protocol import FrameDecoder, encode
    from roost_core.testing import make_config

    home = tempfile.mkdtemp(prefix="rb-oplogic-")
    paths = resolve_paths({"ROOST_HOME": home})
    paths.ensure()
    # A job whose worker is this process, as the throughput bench's receivers are.
    (job,) = write_job_records(paths, 1, state="idle", workers=[(os.getpid(), psutil.Process().create_time())])
    job_id, token = job.id, job.token
    config = make_config(BENCH_CONFIG)

    async def main() -> dict[str, float]:
        daemon = Daemon(paths, config, make_plugin_manager(config), durable=False)
        daemon.load()
        try:
            dispatcher = getattr(daemon, "dispatcher", None)
            if dispatcher is not None:  # one dispatcher over the daemon's routes (issue 41)
                accept_frame = lambda _daemon, conn, request: dispatcher.accept(conn, request)  # noqa: E731

                async def handle_frame(_daemon: Any, conn: Any, frame: dict[str, Any]) -> None:
                    await dispatcher.run(conn, dispatcher.request_of(frame))

                decoder = dispatcher.decoder()
            else:  # an older checkout (the "before" of a comparison)
                accept_frame, handle_frame = dispatch.accept_frame, dispatch.handle_frame
                request_decoder = getattr(dispatch, "request_decoder", None)
                decoder = request_decoder() if request_decoder is not None else FrameDecoder()
            conns = [Connection.detached(n, pid=os.getpid(), uid=os.getuid()) for n in range(3)]
            sender, receiver, worker = conns
            await handle_frame(daemon, sender, {"id": 0, "op": "peer_register", "pid": os.getpid(), "name": "sender", "sessionId": "s-1"})
            await handle_frame(daemon, receiver, {"id": 0, "op": "peer_register", "pid": os.getpid(), "name": "peer", "sessionId": "s-2"})
            await handle_frame(daemon, worker, {"id": 0, "op": "worker_hello", "job": job_id, "token": token, "pid": os.getpid()})
            peer_id = receiver.take_sent()[0]["result"]["id"]
            for conn in conns:
                conn.take_sent()
            totals = {"send to a foreground peer": 0.0, "send to a job": 0.0, "the job's ack": 0.0, "the commit and its answers": 0.0}
            for n in range(messages):
                line = encode({"id": n, "op": "send", "to": peer_id, "message": SEND_TEXT})
                start = clock()
                for frame in decoder.feed(line):
                    accept_frame(daemon, sender, frame)
                totals["send to a foreground peer"] += clock() - start
                receiver_frames = receiver.take_sent()
                ack = encode({"id": n, "op": "ack", "seq": receiver_frames[0]["seq"]})
                for frame in decoder.feed(ack):
                    accept_frame(daemon, receiver, frame)  # not counted: keeps its in-flight table small
                line = encode({"id": n, "op": "send", "to": job_id, "message": SEND_TEXT})
                start = clock()
                for frame in decoder.feed(line):
                    accept_frame(daemon, sender, frame)
                totals["send to a job"] += clock() - start
                seq = next(frame["seq"] for frame in worker.take_sent() if frame.get("event") == "deliver")
                ack = encode({"id": n, "op": "ack", "seq": seq})
                start = clock()
                for frame in decoder.feed(ack):
                    accept_frame(daemon, worker, frame)
                totals["the job's ack"] += clock() - start
                start = clock()
                await daemon.journal.flush()
                totals["the commit and its answers"] += clock() - start
                for conn in conns:
                    conn.take_sent()
            return {step: seconds / messages * 1e6 for step, seconds in totals.items()}
        finally:
            await daemon.journal.aclose()

    try:
        return anyio.run(main, backend_options={"use_uvloop": True})
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.oplogic", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [measure(args.messages) for _ in range(args.repeat)]
    best: dict[str, Any] = {step: min(run[step] for run in runs) for step in runs[0]}
    print(f"op logic, µs of CPU per message (best of {args.repeat} × {args.messages:,}; no socket, no fsync):")
    for step, micros in best.items():
        print(f"  {micros:7.1f} µs  {step}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
