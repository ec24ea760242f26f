"""Client processes of the benchmarks (``python -m bench.agents pairs '{}'``).

One process hosts some senders and some receivers, on roost (the real
:class:`roost_core.client.AsyncClient`) or on the bare broker (:class:`bench.bare.BareClient`).
It is driven by JSON lines on stdin and answers on stdout:

1. it says ``{"pid", "create_time"}`` (a job record can name it as its worker);
2. ``{"cmd": "connect", ...}``: it opens one connection per sender and receiver and
   registers each (roost: ``peer_register`` as a no-session foreground peer, or
   ``worker_hello`` for a job receiver; bare: ``hello``), and says the ids;
3. ``{"cmd": "run", ...}``: every sender sends to its target, either ``count`` messages in
   lockstep (latency) or with ``window`` requests in flight until ``t_end`` (throughput),
   and it says what was sent;
4. ``{"cmd": "finish", "expect": N}``: once its receivers have read ``N`` deliveries (0
   without ``expect``; a minute at most), it says what they saw, and exits.

A message's text starts with the sender's ``perf_counter()`` taken just before the request
is written; the receiver subtracts it from its own clock when the ``deliver`` event has
been read and decoded (one monotonic clock for the whole machine).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

import anyio

from bench.common import message_text


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def hear() -> dict[str, Any]:
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    if not line:
        raise SystemExit(0)
    return json.loads(line)


class Receiver:
    """Records one latency per ``deliver`` and acks as the real peer would: a foreground
    session acks each item (without waiting for the answer); a worker sends one
    cumulative ack per wake-up and waits for its answer (as ``Worker.ack_sender``)."""

    def __init__(self, ack: str) -> None:
        self.ack = ack
        self.client: Any = None
        self.latencies: list[float] = []
        self.received = 0
        self.in_window = 0
        self.window = (0.0, 0.0)
        self.watermark = 0
        self.acked = 0
        self.ack_wanted = anyio.Event()

    async def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") != "deliver":
            return
        now = time.perf_counter()
        text = event.get("text") or ""
        try:
            sent = float(text.split(" ", 1)[0])
        except ValueError:
            sent = now
        self.latencies.append(now - sent)
        self.received += 1
        if self.window[0] <= now <= self.window[1]:
            self.in_window += 1
        seq = int(event["seq"])
        if self.ack == "each":
            await self.client.notify("ack", seq=seq)
        else:
            self.watermark = max(self.watermark, seq)
            self.ack_wanted.set()

    async def ack_loop(self) -> None:
        while True:
            await self.ack_wanted.wait()
            self.ack_wanted = anyio.Event()
            if self.watermark > self.acked:
                mark = self.watermark
                await self.client.call("ack", seq=mark)
                self.acked = mark


async def open_client(system: str, socket: str, on_event: Any = None) -> Any:
    if system == "roost":
        from roost_core.client import AsyncClient

        return await AsyncClient.open(socket, on_event)
    from bench.bare import BareClient

    return await BareClient.open(socket, on_event)


async def register(system: str, client: Any, name: str, job: dict[str, Any] | None = None) -> str:
    if system != "roost":
        return (await client.call("hello", name=name))["id"]
    if job is not None:
        await client.call("worker_hello", job=job["job"], token=job["token"], pid=os.getpid())
        return job["job"]
    result = await client.call("peer_register", session=None, name=name, pid=os.getpid(), sessionId=uuid.uuid4().hex)
    return result["id"]


async def pairs(args: dict[str, Any]) -> None:
    import psutil

    say({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    connect = await hear()
    system, socket = connect["system"], connect["socket"]
    tag = connect.get("tag", "a")
    receivers: list[Receiver] = []
    senders: list[Any] = []
    ids: dict[str, list[str]] = {"senders": [], "receivers": []}
    async with anyio.create_task_group() as tg:
        for n, spec in enumerate(connect.get("receivers", [])):
            job = spec if spec.get("kind") == "job" else None
            # A job's worker acks cumulatively and waits for the answer; so does a bare
            # receiver standing in for one ("ack": "cumulative").
            receiver = Receiver(spec.get("ack") or ("cumulative" if job is not None else "each"))
            receiver.client = await open_client(system, socket, receiver.on_event)
            tg.start_soon(receiver.client.run)
            ids["receivers"].append(await register(system, receiver.client, f"r{tag}{n}", job))
            if receiver.ack == "cumulative":
                tg.start_soon(receiver.ack_loop)
            receivers.append(receiver)
        for n in range(connect.get("senders", 0)):
            client = await open_client(system, socket)
            tg.start_soon(client.run)
            ids["senders"].append(await register(system, client, f"s{tag}{n}"))
            senders.append(client)
        say(ids)

        run = await hear()
        for receiver in receivers:
            receiver.window = (run.get("t_start", 0.0), run.get("t_end", float("inf")))
        body = message_text(run.get("size", 200))
        stats = {"sent": 0, "in_window": 0, "errors": {}, "retries": 0}

        async def slot(client: Any, target: str, count: int | None) -> None:
            from roost_core.protocol import ProtocolError

            t_start, t_end = run.get("t_start", 0.0), run.get("t_end", float("inf"))
            while True:
                if count is not None:
                    if stats["sent"] >= count:
                        return
                elif time.perf_counter() > t_end:
                    return
                try:
                    await client.call("send", to=target, message=f"{time.perf_counter():.9f} {body}")
                except ProtocolError as exc:
                    stats["errors"][exc.code] = stats["errors"].get(exc.code, 0) + 1
                    if exc.code == "queue_full":
                        stats["retries"] += 1
                        await anyio.sleep(0.001)
                        continue
                    raise
                stats["sent"] += 1
                if t_start <= time.perf_counter() <= t_end:
                    stats["in_window"] += 1

        if senders:
            delay = run.get("t_begin", 0.0) - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            async with anyio.create_task_group() as senders_tg:
                for client, target in zip(senders, run["targets"], strict=False):
                    for _ in range(run.get("window", 1)):
                        senders_tg.start_soon(slot, client, target, run.get("count"))
        say(stats)

        finish = await hear()
        # ``expect``: how many deliveries the receivers must have read first (each one the
        # sender was answered for is on its way here); a minute at most.
        with anyio.move_on_after(60):
            while sum(receiver.received for receiver in receivers) < finish.get("expect", 0):  # noqa: ASYNC110 - counters polled; an event per delivery would add to what is measured
                await anyio.sleep(0.001)
        say(
            {
                "latencies": [lat for receiver in receivers for lat in receiver.latencies],
                "received": sum(receiver.received for receiver in receivers),
                "in_window": sum(receiver.in_window for receiver in receivers),
            }
        )
        tg.cancel_scope.cancel()


def main() -> int:
    role, raw = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "{}"
    args = json.loads(raw)
    if role == "pairs":
        anyio.run(pairs, args)
        return 0
    if role == "lean":
        # The same commands, served by lean clients (bench/leanclient.py).
        from bench import leanclient

        leanclient.pairs(args)
        return 0
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.exit(main())
