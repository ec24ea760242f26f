"""Lean client processes: the benchmarks' senders and receivers with nearly no client cost.

One process, one thread, one ``selectors`` loop (epoll): every socket stays registered for
reading; a wake-up reads what each ready socket has (``recv`` of up to 256 KiB, every line
decoded with orjson), handles it, and then every connection with output writes it in one
``send``. No tasks, no locks, no per-request events: an answer runs its request's callback.
It speaks to roost (``peer_register``/``worker_hello``), to the lean broker
(:mod:`bench.lean`) and to the bare anyio broker (:mod:`bench.bare`) alike, so the same
clients measure each of them.

Driven like :mod:`bench.agents` (``python -m bench.agents lean '{}'``), by JSON lines on
stdin, answered on stdout: it says ``{"pid", "create_time"}``; ``connect`` opens and
registers its senders and receivers and says their ids; ``run`` sends (``count`` messages
in lockstep, or ``window`` requests in flight per sender until ``t_end``) and says what was
sent; ``finish`` says what the receivers saw. Receivers ack as the real peers do: a
foreground peer each item without waiting for the answer, a job's worker (and a bare
receiver standing in for one, ``"ack": "cumulative"``) one cumulative ``ack`` per wake-up,
waiting for its answer before the next. A ``queue_full`` answer is retried after 1 ms.
"""

from __future__ import annotations

import heapq
import json
import os
import selectors
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from bench.common import message_text

READ_SIZE = 256 * 1024
_dumps = orjson.dumps
_loads = orjson.loads


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Loop:
    """The selector, the connections with output, and timers."""

    def __init__(self, *, commands: bool = True) -> None:
        self.selector = selectors.DefaultSelector()
        self.dirty: list[Conn] = []
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = 0
        self.stdin_lines: list[dict[str, Any]] = []
        self._stdin_buffer = b""
        if commands:  # the driver's commands come on stdin
            self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, self._read_stdin)

    def _read_stdin(self) -> None:
        data = os.read(sys.stdin.fileno(), 65536)
        if not data:
            raise SystemExit(0)
        self._stdin_buffer += data
        *lines, self._stdin_buffer = self._stdin_buffer.split(b"\n")
        self.stdin_lines += [json.loads(line) for line in lines if line.strip()]

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        self._timer_ids += 1
        heapq.heappush(self.timers, (time.perf_counter() + delay, self._timer_ids, callback))

    def once(self) -> None:
        """One pass: what the last pass queued leaves (one write per connection), then a
        wait for sockets and timers, and their handlers."""
        dirty, self.dirty = self.dirty, []
        for conn in dirty:
            conn.flush()
        timeout = None
        if self.timers:
            timeout = max(0.0, self.timers[0][0] - time.perf_counter())
        for key, _ in self.selector.select(timeout):
            key.data()
        now = time.perf_counter()
        while self.timers and self.timers[0][0] <= now:
            heapq.heappop(self.timers)[2]()

    def until(self, done: Callable[[], bool]) -> None:
        while not done():
            self.once()

    def command(self) -> dict[str, Any]:
        """The next line from the driver (the connections keep being served meanwhile)."""
        self.until(lambda: bool(self.stdin_lines))
        return self.stdin_lines.pop(0)


class Conn:
    def __init__(self, loop: Loop, path: str, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.loop = loop
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.on_event = on_event
        self.on_batch: Callable[[], None] | None = None
        self.buffer = b""
        self.out: list[bytes] = []
        self.backlog = b""
        self.ids = 0
        self.waiting: dict[int, Callable[[dict[str, Any]], None] | None] = {}
        loop.selector.register(self.sock, selectors.EVENT_READ, self._readable)

    def request(self, op: str, args: dict[str, Any], then: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.ids += 1
        self.waiting[self.ids] = then
        args["id"] = self.ids
        args["op"] = op
        self.out.append(_dumps(args) + b"\n")
        if len(self.out) == 1 and not self.backlog:
            self.loop.dirty.append(self)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """A blocking call (set-up only)."""
        box: list[dict[str, Any]] = []
        self.request(op, args, box.append)
        self.loop.until(lambda: bool(box))
        frame = box[0]
        if not frame.get("ok"):
            raise RuntimeError(f"{op}: {frame.get('error')}")
        return frame.get("result") or {}

    def flush(self) -> None:
        if not self.out or self.backlog:
            return
        data = b"".join(self.out)
        self.out.clear()
        self._send(data)

    def _send(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self.backlog = data[sent:]
            self.loop.selector.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, self._ready_both)

    def _ready_both(self) -> None:
        # Level-triggered: both directions are tried; each returns at once if not ready.
        data, self.backlog = self.backlog + b"".join(self.out), b""
        self.out.clear()
        self.loop.selector.modify(self.sock, selectors.EVENT_READ, self._readable)
        self._send(data)
        self._readable()

    def _readable(self) -> None:
        try:
            data = self.sock.recv(READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionError("the server closed the connection")
        if self.buffer:
            data = self.buffer + data
        end = data.rfind(b"\n")
        if end < 0:
            self.buffer = data
            return
        self.buffer = data[end + 1:]
        for line in data[:end].split(b"\n"):
            if not line:
                continue
            frame = _loads(line)
            if "event" in frame:
                if self.on_event is not None:
                    self.on_event(frame)
                continue
            then = self.waiting.pop(frame.get("id"), None)
            if then is not None:
                then(frame)
        if self.on_batch is not None:
            self.on_batch()


class Receiver:
    """Records one latency per ``deliver``; acks each (foreground) or cumulatively once per
    wake-up, waiting for the answer (a job's worker)."""

    def __init__(self, loop: Loop, path: str, ack: str) -> None:
        self.ack = ack
        self.conn = Conn(loop, path, self.on_event)
        self.conn.on_batch = self.on_batch if ack == "cumulative" else None
        self.latencies: list[float] = []
        self.received = 0
        self.in_window = 0
        self.window = (0.0, 0.0)
        self.watermark = 0
        self.acked = 0
        self.ack_in_flight = False

    def on_event(self, event: dict[str, Any]) -> None:
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
            self.conn.request("ack", {"seq": seq})
        elif seq > self.watermark:
            self.watermark = seq

    def on_batch(self) -> None:
        if self.watermark > self.acked and not self.ack_in_flight:
            mark = self.watermark
            self.ack_in_flight = True

            def answered(frame: dict[str, Any]) -> None:
                self.ack_in_flight = False
                self.acked = mark
                self.on_batch()

            self.conn.request("ack", {"seq": mark}, answered)


class Sender:
    """Keeps ``window`` sends in flight to ``target`` until ``count`` are sent or ``t_end``."""

    def __init__(self, conn: Conn, target: str, body: str, stats: dict[str, Any], run: dict[str, Any]) -> None:
        self.conn = conn
        self.target = target
        self.body = body
        self.stats = stats
        self.count = run.get("count")
        self.t_start = run.get("t_start", 0.0)
        self.t_end = run.get("t_end", float("inf"))
        self.in_flight = 0

    def next(self) -> None:
        if self.count is not None:
            if self.stats["issued"] >= self.count:
                return
            self.stats["issued"] += 1
        elif time.perf_counter() > self.t_end:
            return
        self.in_flight += 1
        self.conn.request("send", {"to": self.target, "message": f"{time.perf_counter():.9f} {self.body}"}, self.answered)

    def answered(self, frame: dict[str, Any]) -> None:
        self.in_flight -= 1
        stats = self.stats
        if not frame.get("ok"):
            code = (frame.get("error") or {}).get("code", "unknown")
            stats["errors"][code] = stats["errors"].get(code, 0) + 1
            if code != "queue_full":
                raise RuntimeError(f"send: {frame.get('error')}")
            stats["retries"] += 1
            if self.count is not None:
                stats["issued"] -= 1
            self.in_flight += 1  # the retry holds its slot while it waits
            self.conn.loop.later(0.001, self._retry)
            return
        stats["sent"] += 1
        if self.t_start <= time.perf_counter() <= self.t_end:
            stats["in_window"] += 1
        self.next()

    def _retry(self) -> None:
        self.in_flight -= 1
        self.next()


def register(system: str, conn: Conn, name: str, job: dict[str, Any] | None = None) -> str:
    if system != "roost":
        return conn.call("hello", name=name)["id"]
    if job is not None:
        conn.call("worker_hello", job=job["job"], token=job["token"], pid=os.getpid())
        return job["job"]
    return conn.call("peer_register", session=None, name=name, pid=os.getpid(), sessionId=uuid.uuid4().hex)["id"]


def pairs(args: dict[str, Any]) -> None:
    import psutil

    say({"pid": os.getpid(), "create_time": psutil.Process().create_time()})
    loop = Loop()
    connect = loop.command()
    system, path = connect["system"], connect["socket"]
    tag = connect.get("tag", "a")
    receivers: list[Receiver] = []
    senders: list[Conn] = []
    ids: dict[str, list[str]] = {"senders": [], "receivers": []}
    for n, spec in enumerate(connect.get("receivers", [])):
        job = spec if spec.get("kind") == "job" else None
        receiver = Receiver(loop, path, spec.get("ack") or ("cumulative" if job is not None else "each"))
        ids["receivers"].append(register(system, receiver.conn, f"r{tag}{n}", job))
        receivers.append(receiver)
    for n in range(connect.get("senders", 0)):
        conn = Conn(loop, path)
        ids["senders"].append(register(system, conn, f"s{tag}{n}"))
        senders.append(conn)
    say(ids)

    run = loop.command()
    for receiver in receivers:
        receiver.window = (run.get("t_start", 0.0), run.get("t_end", float("inf")))
    body = message_text(run.get("size", 200))
    stats: dict[str, Any] = {"sent": 0, "in_window": 0, "errors": {}, "retries": 0, "issued": 0}
    if senders:
        delay = run.get("t_begin", 0.0) - time.perf_counter()
        if delay > 0:
            started = []
            loop.later(delay, lambda: started.append(True))
            loop.until(lambda: bool(started))
        workers = [Sender(conn, target, body, stats, run) for conn, target in zip(senders, run["targets"], strict=False)]
        for sender in workers:
            for _ in range(run.get("window", 1)):
                sender.next()
        loop.until(lambda: all(sender.in_flight == 0 for sender in workers))
    stats.pop("issued")
    say(stats)

    finish = loop.command()
    # As bench.agents: the receivers first read the ``expect`` deliveries on their way.
    deadline = time.perf_counter() + 60
    loop.later(60, lambda: None)  # so the wait ends at the deadline even if nothing comes
    loop.until(lambda: sum(receiver.received for receiver in receivers) >= finish.get("expect", 0) or time.perf_counter() > deadline)
    say({
        "latencies": [lat for receiver in receivers for lat in receiver.latencies],
        "received": sum(receiver.received for receiver in receivers),
        "in_window": sum(receiver.in_window for receiver in receivers),
    })
