"""Worker cold start: ``spawn`` op → the child's first model call.

Roost: a no-session foreground peer (raw :class:`~roost_core.client.AsyncClient`) sends
``spawn`` with a scripted scenario whose first step is ``touch`` of a fresh file: that
tool call is the first model call. The clock runs from just before the request is written
to the file existing (polled every 0.5 ms). The daemon has its warm fork server fork the
worker (:mod:`roost_core.worker.forkserver`: the worker's modules are imported there
once), which connects, says hello, opens its transcript and runs. Each child is removed
(its worker killed) before the next spawn; the first spawn, which may wait for the fork
server to finish its imports, is not counted.

Baseline: from just before ``subprocess.Popen`` to the same file existing, for
``python -c 'import anyio; connect a Unix socket; touch the file'`` (the same interpreter,
the socket a listener of this process). The table also shows when the ``spawn`` answer
came (it is answered once the task item is durable and the worker process started).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time

import anyio

from bench.common import PYTHON, RoostDaemon, Row, bench_env, fmt_time, median, percentile

POLL = 0.0005
BARE_CODE = (
    "import anyio, socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.connect(sys.argv[1])\n"
    "open(sys.argv[2], 'w').close()\n"
)


def wait_file(path: str, timeout: float = 30.0) -> float:
    deadline = time.perf_counter() + timeout
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(POLL)
    return time.perf_counter()


def bare_starts(count: int) -> list[float]:
    folder = tempfile.mkdtemp(prefix="rb-cold-")
    path = os.path.join(folder, "listen.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    env = bench_env()
    times = []
    try:
        for n in range(count):
            marker = os.path.join(folder, f"m{n}")
            t0 = time.perf_counter()
            process = subprocess.Popen([PYTHON, "-c", BARE_CODE, path, marker], env=env)
            times.append(wait_file(marker) - t0)
            process.wait()
            conn, _ = listener.accept()
            conn.close()
    finally:
        listener.close()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    return times


async def _roost_starts(daemon: RoostDaemon, count: int) -> dict[str, list[float]]:
    from roost_core.client import AsyncClient

    marks = daemon.home / "marks"
    marks.mkdir()
    client = await AsyncClient.open(daemon.socket)
    first, answered = [], []
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        await client.call("peer_register", session=None, name="parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(daemon.home))
        for n in range(count):
            marker = str(marks / f"m{n}")
            scenario = {"default": {"steps": [{"touch": marker}, {"say": "done"}]}}
            t0 = time.perf_counter()
            result = await client.call("spawn", task="go", name=f"cold {n}", host="scripted", scenario=scenario, cwd=str(daemon.home))
            answered.append(time.perf_counter() - t0)
            deadline = t0 + 30
            while not os.path.exists(marker):
                if time.perf_counter() > deadline:
                    raise TimeoutError("worker never made its first model call")
                await anyio.sleep(POLL)
            first.append(time.perf_counter() - t0)
            await client.call("remove", job=result["id"])
            await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    return {"first": first, "answered": answered}


def roost_starts(count: int) -> dict[str, list[float]]:
    with RoostDaemon(label="cold") as daemon:
        daemon.start()
        return anyio.run(_roost_starts, daemon, count)


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    count = 1 if smoke else 8 if quick else 25
    bare = bare_starts(count + 1)[1:]
    roost = roost_starts(count + 1)
    first, answered = roost["first"][1:], roost["answered"][1:]
    p50, base = median(first), median(bare)
    return [
        Row(
            "cold start",
            f"spawn → first model call, p50 of {count} (p90 {fmt_time(percentile(first, 90))}; spawn answered after {fmt_time(median(answered))})",
            fmt_time(p50),
            fmt_time(base),
            p50 / base,
            "≤ 2x",
            p50 / base <= 2,
            raw={"roost": roost, "bare": bare},
        )
    ]
