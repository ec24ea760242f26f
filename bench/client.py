"""What roost's own clients cost: CPU per request (and per event received) of
:class:`roost_core.client.Client` (the CLI's, blocking) and
:class:`roost_core.client.AsyncClient` (the worker's and the foreground session's),
against a lean client doing the same on the same server.

The server is the lean broker (:mod:`bench.lean`, asyncio, no journal) for every
variant: it answers at once and costs little, so what differs between the variants is the
client. Each variant runs in a process of its own (``python -m bench.client measure
VARIANT ...``) that times its own CPU (``time.process_time``, user + system of the whole
process) over the requests after a warm-up:

* lockstep: one request at a time, each answer awaited (what the CLI and most tool calls
  do): ``Client.call`` against a blocking socket with ``sendall``/``recv`` and orjson;
  ``AsyncClient.call`` from one task against the same lean blocking client;
* pipelined: 16 requests in flight on one connection (a worker's or a session's
  concurrent calls): ``AsyncClient.call`` from 16 tasks against the lean selector client
  of :mod:`bench.leanclient` with 16 in flight;
* events: a receiver reading pushed ``deliver`` events (its handler only counts them),
  sent by a lean sender process: ``AsyncClient`` with an ``on_event`` handler against a
  lean blocking reader that decodes each line.

The roost rows are measured with the client of this checkout (``bench.compare`` runs it
against an old ``src``, so its before/after shows what a client change bought).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from typing import Any

import orjson

from bench.common import PYTHON, REPO, BareServer, Row, bench_env, median

PIPELINE = 16
VARIANTS = ("sync", "lean-sync", "async", "async-pipelined", "lean-pipelined", "async-events", "lean-events")


# -------------------------------------------------------------- the variants (in their own process)


def _lockstep_lean(path: str, count: int, warm: int) -> float:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    buffer = b""
    cpu0 = 0.0
    for n in range(count + warm):
        if n == warm:
            cpu0 = time.process_time()
        sock.sendall(orjson.dumps({"id": n, "op": "ping"}) + b"\n")
        while b"\n" not in buffer:
            buffer += sock.recv(256 * 1024)
        line, _, buffer = buffer.partition(b"\n")
        assert orjson.loads(line)["id"] == n
    return time.process_time() - cpu0


def _lockstep_sync(path: str, count: int, warm: int) -> float:
    from pathlib import Path

    from roost_core.client import Client

    with Client(Path(path)) as client:
        cpu0 = 0.0
        for n in range(count + warm):
            if n == warm:
                cpu0 = time.process_time()
            client.call("ping")
        return time.process_time() - cpu0


def _async(path: str, count: int, warm: int, tasks: int) -> float:
    import anyio

    from roost_core.client import AsyncClient

    async def main() -> float:
        client = await AsyncClient.open(path)
        marks: dict[str, float] = {}
        done = [0]

        async def worker() -> None:
            while done[0] < count + warm:
                done[0] += 1
                if done[0] == warm:
                    marks["cpu0"] = time.process_time()
                await client.call("ping")

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            async with anyio.create_task_group() as workers:
                for _ in range(tasks):
                    workers.start_soon(worker)
            cpu = time.process_time() - marks["cpu0"]
            tg.cancel_scope.cancel()
        await client.aclose()
        return cpu

    return anyio.run(main)


def _pipelined_lean(path: str, count: int, warm: int, window: int) -> float:
    from bench.leanclient import Conn, Loop

    loop = Loop(commands=False)
    conn = Conn(loop, path)
    state = {"issued": 0, "answered": 0, "cpu0": 0.0}

    def answered(frame: dict[str, Any]) -> None:
        state["answered"] += 1
        if state["answered"] == warm:
            state["cpu0"] = time.process_time()
        issue()

    def issue() -> None:
        if state["issued"] < count + warm:
            state["issued"] += 1
            conn.request("ping", {}, answered)

    for _ in range(window):
        issue()
    loop.until(lambda: state["answered"] >= count + warm)
    return time.process_time() - state["cpu0"]


def _events(path: str, count: int, warm: int, lean: bool) -> float:
    """Receive ``count + warm`` deliver events pushed by a lean sender process."""
    name = f"r{id(path):x}"
    total = count + warm
    sender_args = [PYTHON, "-m", "bench.client", "push", "--socket", path, "--to", name, "--count", str(total)]
    if lean:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(orjson.dumps({"id": 0, "op": "hello", "name": name}) + b"\n")
        buffer = b""
        while b"\n" not in buffer:
            buffer += sock.recv(65536)
        buffer = buffer.partition(b"\n")[2]
        sender = subprocess.Popen(sender_args, cwd=str(REPO), env=bench_env())
        seen, cpu0 = 0, 0.0
        while seen < total:
            data = sock.recv(256 * 1024)
            if buffer:
                data = buffer + data
            end = data.rfind(b"\n")
            buffer = data[end + 1:]
            for line in data[:end].split(b"\n"):
                if line and "event" in orjson.loads(line):
                    seen += 1
                    if seen == warm:
                        cpu0 = time.process_time()
        cpu = time.process_time() - cpu0
        sender.wait()
        return cpu

    import anyio

    from roost_core.client import AsyncClient

    async def main() -> float:
        state = {"seen": 0, "cpu0": 0.0}
        all_seen = anyio.Event()

        def on_event(event: dict[str, Any]) -> None:
            state["seen"] += 1
            if state["seen"] == warm:
                state["cpu0"] = time.process_time()
            if state["seen"] == total:
                all_seen.set()

        client = await AsyncClient.open(path, on_event)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            await client.call("hello", name=name)
            sender = subprocess.Popen(sender_args, cwd=str(REPO), env=bench_env())  # noqa: ASYNC220 - started, not waited for: the loop goes on at once
            await all_seen.wait()
            cpu = time.process_time() - state["cpu0"]
            tg.cancel_scope.cancel()
        await client.aclose()
        sender.wait()
        return cpu

    return anyio.run(main)


def _push(path: str, to: str, count: int) -> None:
    """The events' sender: ``count`` sends to ``to``, 64 in flight, lean."""
    from bench.common import message_text
    from bench.leanclient import Conn, Loop

    loop = Loop(commands=False)
    conn = Conn(loop, path)
    body = message_text(200)
    state = {"issued": 0, "answered": 0}

    def answered(frame: dict[str, Any]) -> None:
        state["answered"] += 1
        issue()

    def issue() -> None:
        if state["issued"] < count:
            state["issued"] += 1
            conn.request("send", {"to": to, "message": f"{time.perf_counter():.9f} {body}"}, answered)

    for _ in range(64):
        issue()
    loop.until(lambda: state["answered"] >= count)


def measure(variant: str, path: str, count: int) -> float:
    warm = max(1, count // 10)
    if variant == "sync":
        return _lockstep_sync(path, count, warm)
    if variant == "lean-sync":
        return _lockstep_lean(path, count, warm)
    if variant == "async":
        return _async(path, count, warm, 1)
    if variant == "async-pipelined":
        return _async(path, count, warm, PIPELINE)
    if variant == "lean-pipelined":
        return _pipelined_lean(path, count, warm, PIPELINE)
    if variant == "async-events":
        return _events(path, count, warm, lean=False)
    if variant == "lean-events":
        return _events(path, count, warm, lean=True)
    raise SystemExit(f"unknown variant {variant!r}")


# --------------------------------------------------------------------------- the benchmark


def one(variant: str, socket_path: str, count: int) -> float:
    """CPU seconds per request (or event) of ``variant``, measured in its own process."""
    out = subprocess.run(
        [PYTHON, "-m", "bench.client", "measure", variant, "--socket", socket_path, "--count", str(count)],
        capture_output=True, text=True, cwd=str(REPO), env=bench_env(), check=True, timeout=300,
    )
    return json.loads(out.stdout)["cpu"] / count


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    count = 200 if smoke else 3000 if quick else 20000
    reps = 1 if smoke else 2 if quick else 3
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with BareServer(label="client", module="bench.lean") as server:
        for _ in range(reps):
            # Alternate roost's client and its lean counterpart under the same load.
            for variant in VARIANTS:
                results[variant].append(one(variant, server.socket, count))

    def us(variant: str) -> float:
        return median(results[variant]) * 1e6

    rows = []
    for roost, lean, what in (
        ("sync", "lean-sync", f"CPU per request, lockstep: Client (the CLI's) vs a blocking socket + orjson ({count:,} × {reps})"),
        ("async", "lean-sync", f"CPU per request, lockstep: AsyncClient, one task, vs a blocking socket + orjson ({count:,} × {reps})"),
        ("async-pipelined", "lean-pipelined",
         f"CPU per request, {PIPELINE} in flight: AsyncClient, {PIPELINE} tasks, vs a selectors client ({count:,} × {reps})"),
        ("async-events", "lean-events", f"CPU per event received: AsyncClient on_event vs a blocking reader + orjson ({count:,} × {reps})"),
    ):
        rows.append(Row("client", what, f"{us(roost):.1f} µs", f"{us(lean):.1f} µs", us(roost) / us(lean),
                        raw={"roost": results[roost], "lean": results[lean]}))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client")
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("variant", choices=VARIANTS)
    m.add_argument("--socket", required=True)
    m.add_argument("--count", type=int, required=True)
    p = sub.add_parser("push")
    p.add_argument("--socket", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "push":
        _push(args.socket, args.to, args.count)
        return 0
    print(json.dumps({"cpu": measure(args.variant, args.socket, args.count)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
