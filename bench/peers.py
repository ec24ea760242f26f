"""``peers`` with 100 / 1,000 / 10,000 registered peers.

The mix, per N: half job records, a quarter foreground peers holding a session file (the
usual pi TUI session: writer lock held by this process), a quarter no-session foreground
peers. Jobs are written as ended job records (state ``done``) before the daemon starts, the
daemon loading them as it does after a restart: starting thousands of real workers would
measure process start-up, not ``peers``. Foreground peers are real connections, opened
from this process on plain blocking sockets and registered with ``peer_register`` (this
process raises its file limit; the daemon inherits it).

The clock runs at the caller, a no-session foreground peer: from just before it writes
``{"op": "peers"}`` to the answer read and decoded (roost's client decoder). Two rows per
N, each with its baseline, the bare anyio broker holding a prebuilt list of as many rows of
the same fields, read by the same loop with the bare codec:

* **table unchanged**: the caller asks again and again. roost answers from the listing it
  keeps, its JSON made once; the bare broker from its rows' JSON made once.
* **after a change**: before each call (off the clock) another peer takes a new name, so
  roost builds the listing again and encodes it; the bare broker encodes its rows per call.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    BareServer,
    RoostDaemon,
    Row,
    fmt_time,
    percentile,
    raise_nofile,
    write_job_records,
)

BATCH = 200


class RawConn:
    """A blocking client connection that reads whole answers (the bench's side of a peer)."""

    def __init__(self, path: str, decoder: Any = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(path)
        self.buffer = b""
        self.ids = 0
        self.decoder = decoder
        #: The arguments of its ``peer_register`` (a foreground peer's), to register again.
        self.registered: dict[str, Any] = {}

    def write(self, op: str, **args: Any) -> None:
        self.ids += 1
        self.sock.sendall(json.dumps({"id": self.ids, "op": op, **args}).encode() + b"\n")

    def read(self) -> Any:
        while True:
            # Skip pushed events; return the next answer.
            if b"\n" not in self.buffer:
                # The chunks of a long answer are joined once: appending each to the
                # buffer and searching it all again would copy and scan a 10,000-peer
                # answer (2 MB) once per chunk, a cost that grows as N² and is the
                # caller's, not the server's.
                parts = [self.buffer]
                while True:
                    chunk = self.sock.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("closed")
                    parts.append(chunk)
                    if b"\n" in chunk:
                        break
                self.buffer = b"".join(parts)
            line, _, self.buffer = self.buffer.partition(b"\n")
            frame = self.decoder(line) if self.decoder else json.loads(line)
            if isinstance(frame, dict) and "event" not in frame:
                return frame

    def call(self, op: str, **args: Any) -> Any:
        self.write(op, **args)
        frame = self.read()
        if not frame.get("ok"):
            raise RuntimeError(f"{op}: {frame.get('error')}")
        return frame["result"]

    def close(self) -> None:
        self.sock.close()


def register_foreground(socket_path: str, count: int, *, with_session: int = 0, folder: Path | None = None,
                        start: int = 0) -> list[RawConn]:
    """``count`` connected foreground peers; the first ``with_session`` hold a session."""
    from roost_core import locks

    conns: list[RawConn] = []
    for first in range(0, count, BATCH):
        batch = []
        for n in range(first, min(count, first + BATCH)):
            conn = RawConn(socket_path)
            index = start + n
            # The peer id is "f" + the first 7 hex digits of the session id: keep them unique.
            session_id = f"{index:07x}{uuid.uuid4().hex}"
            args: dict[str, Any] = {"name": f"fg {index}", "pid": os.getpid(), "sessionId": session_id, "cwd": "/tmp"}
            if n < with_session:
                assert folder is not None
                session = str(folder / f"s{index}.jsonl")
                locks.WriterLock(session).acquire()
                args["session"] = session
            else:
                args["session"] = None
            conn.write("peer_register", **args)
            conn.registered = args
            batch.append(conn)
        for conn in batch:
            frame = conn.read()
            if not frame.get("ok"):
                raise RuntimeError(f"peer_register: {frame.get('error')}")
        conns.extend(batch)
    return conns


def time_calls(conn: RawConn, op: str, reps: int, *, before: Callable[[int], None] | None = None,
               **args: Any) -> list[float]:
    """``reps`` calls of ``op``, each timed from its write to its answer decoded; ``before(i)``
    runs ahead of call ``i``, off the clock."""
    times = []
    for i in range(reps):
        if before is not None:
            before(i)
        t0 = time.perf_counter()
        conn.write(op, **args)
        frame = conn.read()
        times.append(time.perf_counter() - t0)
        assert frame.get("ok"), frame
    return times


def summary(times: list[float]) -> dict[str, float]:
    return {"p50": percentile(times, 50), "p99": percentile(times, 99)}


def roost_peers(n: int, reps: int) -> dict[str, Any]:
    """roost's ``peers`` at ``n`` peers: ``unchanged`` and ``changed`` (each call after a
    rename), with how many the caller lists and how long registering took."""
    try:  # the client's decoder (roost before 2026-12 read answers with decode_line)
        from roost_core.protocol import decode_answer as client_decode
    except ImportError:
        from roost_core.protocol import decode_line as client_decode

    raise_nofile()
    jobs = n // 2
    fg = n - jobs
    with_session = fg // 2
    daemon = RoostDaemon(label="peers")
    conns: list[RawConn] = []
    try:
        write_job_records(daemon.paths, jobs)
        daemon.start()
        folder = daemon.home / "fg"
        folder.mkdir()
        t0 = time.perf_counter()
        conns = register_foreground(daemon.socket, fg, with_session=with_session, folder=folder)
        register_s = time.perf_counter() - t0
        caller = conns[-1]  # a no-session peer
        caller.decoder = client_decode
        listed = len(caller.call("peers")["peers"])
        unchanged = time_calls(caller, "peers", reps)
        renamed = conns[-2]  # another no-session peer

        def rename(i: int) -> None:
            renamed.call("peer_register", **{**renamed.registered, "name": f"renamed {i}"})

        changed = time_calls(caller, "peers", reps, before=rename)
    finally:
        for conn in conns:
            conn.close()
        daemon.close()
    return {"unchanged": summary(unchanged), "changed": summary(changed), "listed": listed, "register_s": register_s}


def bare_peers(n: int, reps: int) -> dict[str, Any]:
    """The bare broker's ``peers`` with ``n - 1`` rows: ``unchanged`` (its rows' JSON made
    once) and ``changed`` (encoded per call)."""
    from bench.bare import loads

    with BareServer(rows=n - 1, label="peers") as server:
        conn = RawConn(server.socket, decoder=loads)
        conn.call("hello", name="caller")
        unchanged = time_calls(conn, "peers", reps)
        changed = time_calls(conn, "peers", reps, fresh=True)
        conn.close()
    return {"unchanged": summary(unchanged), "changed": summary(changed)}


def sizes(quick: bool, smoke: bool) -> list[tuple[int, int]]:
    if smoke:
        return [(8, 3), (24, 3)]
    if quick:
        return [(100, 30), (1000, 20), (10000, 5)]
    # (Calls per size: a 10,000-peer call takes about 25 ms, and the median of 15 moved
    # by a third between runs on a busy 2-core host; of 60, it holds still.)
    return [(100, 200), (1000, 100), (10000, 60)]


#: Each case's name in the rows (which bench.compare keys them by), and what it measures.
CASES = {
    "unchanged": ("table unchanged", "(roost: the listing kept, its JSON made once; bare: its rows' JSON made once)"),
    "changed": ("after a change", "(a peer renamed before each call: roost builds and encodes the listing again; bare: encoded per call)"),
}


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    rows: list[Row] = []
    results = []
    for n, reps in sizes(quick, smoke):
        roost, bare = roost_peers(n, reps), bare_peers(n, reps)
        results.append((n, roost, bare))
        for case, (label, what) in CASES.items():
            mine, theirs = roost[case], bare[case]
            # The spec's (1,000 peers answered within 5 ms) and issue 18's (10,000 peers within
            # 1.5× the bare broker's listing), both set for a call on an unchanged table (all
            # this benchmark measured when they were set). A call after a change has no
            # target yet: its figures are information.
            target, met = "—", None
            if case == "unchanged" and n == 1000:
                target, met = "p50 < 5 ms", mine["p50"] < 0.005
            elif case == "unchanged" and n == 10000:
                target, met = "≤ 1.5x", mine["p50"] <= 1.5 * theirs["p50"]
            rows.append(
                Row(
                    "peers",
                    f"p50 with {n:,} peers, {label} {what} ({roost['listed']:,} listed, {reps} calls); p99 {fmt_time(mine['p99'])}",
                    fmt_time(mine["p50"]),
                    fmt_time(theirs["p50"]),
                    mine["p50"] / theirs["p50"],
                    target,
                    met,
                    raw={"n": n, "case": case, "roost": mine, "bare": theirs, "register_s": roost["register_s"]},
                )
            )
    # Growth: cost ∝ N^k, k fitted over every size (least squares on log-log); linear is
    # k = 1 (≤ 1.1 passes, for noise: issue 18's goal). The steps between consecutive sizes
    # are shown too:
    # the smallest listing fits in the CPU's caches, so its step alone overstates growth
    # (the bare broker's steps show the same).
    def fitted(points: list[tuple[int, float]]) -> float:
        xs = [math.log(n) for n, _ in points]
        ys = [math.log(t) for _, t in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)

    def steps(points: list[tuple[int, float]]) -> str:
        return ", ".join(f"{math.log(t2 / t1) / math.log(n2 / n1):.2f}" for (n1, t1), (n2, t2) in itertools.pairwise(points))

    for case, (label, _) in CASES.items():
        roost_points = [(n, r[case]["p50"]) for n, r, _ in results]
        bare_points = [(n, b[case]["p50"]) for n, _, b in results]
        k, bare_k = fitted(roost_points), fitted(bare_points)
        per_peer = ", ".join(f"{t / n * 1e6:.1f} µs/peer at {n:,}" for n, t in roost_points)
        rows.append(
            Row(
                "peers",
                f"growth exponent k, {label} (time ∝ N^k), fitted over "
                f"{', '.join(f'{n:,}' for n, _, _ in results)} (steps: roost {steps(roost_points)}, bare {steps(bare_points)}); {per_peer}",
                f"k = {k:.2f}",
                f"k = {bare_k:.2f}",
                None,
                "k ≤ 1.1",
                k <= 1.1,
                raw={"case": case, "roost": roost_points, "bare": bare_points},
            )
        )
    return rows
