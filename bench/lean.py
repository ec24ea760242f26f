"""The strong floor: the leanest newline-JSON broker this machine runs in Python.

What it is: an asyncio ``Protocol`` per connection (``data_received`` gets whatever the
socket had, every line of it handled in turn; no task, no wait per read), orjson, and one
gathered write per connection per pass of the loop (every frame queued for a connection
in one pass leaves in one ``transport.write``, made by one loop callback for all the
connections that have output). With ``--journal``: one shared log with group commit, a
long-lived thread doing one write and sync at a time and answering the loop with one
``call_soon_threadsafe`` per commit; records added while a commit is in flight join the
next. The log keeps zeros written ahead of its records, as roost's journal does
(``roost_core.store.RESERVE_BYTES``): a commit inside them needs only ``fdatasync``, the
cheapest durable write this machine's disk takes. ``--uvloop`` runs it on uvloop
(``pip install -e '.[bench]'``).

What it is not: a messaging system. Ops ``hello`` (take a name), ``send`` (push a
``deliver`` event to the named connection, answer the sender; with a journal, append the
item's record and answer once it is durable), ``ack`` (with a journal, append a record
and answer once durable), ``peers`` (answer a prebuilt list of N rows, encoded per call),
``peer_register``/``worker_hello`` (as ``hello``, so roost's own clients can talk to it),
anything else answered ``{}``. No validation, no policy, no state beyond names and seqs:
the least work a broker between these processes can do for the same traffic.

``python -m bench.lean serve --socket PATH [--journal FILE] [--rows N] [--uvloop]``
prints ``ready`` once it listens and stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import orjson

#: Zeros the log keeps written ahead of its records: roost_core.store.RESERVE_BYTES (not
#: imported: bench.compare runs this broker beside an older roost_core).
RESERVE_BYTES = 1024 * 1024

dumps_line = lambda obj: orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)  # noqa: E731
loads = orjson.loads


def write_at(fd: int, data: bytes, offset: int) -> None:
    """roost_core.store.write_at, for the same reason as RESERVE_BYTES."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class GroupLog:
    """One append-only file written by one long-lived thread: ``add(record, then)``
    buffers a record; a commit (one write + sync) takes everything buffered, and its
    callbacks run on the loop, in order, once it is on disk. One commit in flight at a
    time: what arrives meanwhile joins the next. Records go into zeros written ahead
    (``fdatasync``); a commit past them writes the next ``RESERVE_BYTES`` and fsyncs."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop, *, fsync: bool = True) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.size = self.allocated = 0
        self.fsync = fsync
        self.loop = loop
        self.records: list[bytes] = []
        self.callbacks: list[Callable[[], None]] = []
        self.in_flight = False
        self.commits = 0
        self.committed = 0
        self._jobs: queue.SimpleQueue[tuple[bytes, list[Callable[[], None]]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="group-log", daemon=True)
        self._thread.start()

    def add(self, record: bytes, then: Callable[[], None]) -> None:
        self.records.append(record)
        self.callbacks.append(then)
        if not self.in_flight:
            self._start()

    def _start(self) -> None:
        self.in_flight = True
        self._jobs.put((b"".join(self.records), self.callbacks))
        self.commits += 1
        self.committed += len(self.records)
        self.records, self.callbacks = [], []

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            data, callbacks = job
            end = self.size + len(data)
            grows = end > self.allocated
            write_at(self.fd, data, self.size)
            if self.fsync:
                if grows:
                    write_at(self.fd, bytes(RESERVE_BYTES), end)
                    self.allocated = end + RESERVE_BYTES
                    os.fsync(self.fd)
                else:
                    os.fdatasync(self.fd)
            self.size = end
            self.loop.call_soon_threadsafe(self._done, callbacks)

    def _done(self, callbacks: list[Callable[[], None]]) -> None:
        self.in_flight = False
        for callback in callbacks:
            callback()
        if self.records:
            self._start()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(5)
        os.close(self.fd)


class Broker:
    def __init__(self, loop: asyncio.AbstractEventLoop, journal: str | None, rows: int) -> None:
        self.loop = loop
        self.names: dict[str, LeanConnection] = {}
        self.log = GroupLog(journal, loop) if journal else None
        self.dirty: list[LeanConnection] = []
        self.rows = [
            {"id": f"f{i:07x}", "name": f"peer {i}", "kind": "foreground" if i % 2 else "job", "relation": "external",
             "state": "idle", "status": None, "summary": None, "question": None, "cwd": "/tmp", "live": bool(i % 2), "dialog": False}
            for i in range(rows)
        ]

    def flush(self) -> None:
        """The one loop callback of a pass: each connection with output writes it once."""
        dirty, self.dirty = self.dirty, []
        for conn in dirty:
            conn.scheduled = False
            if conn.out and conn.transport is not None:
                data = b"".join(conn.out)
                conn.out.clear()
                conn.transport.write(data)

    def handle(self, conn: LeanConnection, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        rid = frame.get("id")
        if op == "send":
            target = self.names.get(frame.get("to", ""))
            if target is None:
                conn.send({"id": rid, "ok": False, "error": {"code": "not_found", "message": "no such peer"}})
                return
            target.seq += 1
            message = frame.get("message", "")
            target.send({"event": "deliver", "seq": target.seq, "kind": "message", "content": message, "text": message,
                         "from": conn.name, "fromName": conn.name, "relation": "external", "trace": None, "hops": 1})
            answer = {"id": rid, "ok": True, "result": {"to": target.name, "result": "delivered", "seq": target.seq}}
            if self.log is not None:
                record = dumps_line({"op": "item", "job": target.name, "item": {"seq": target.seq, "content": message}})
                self.log.add(record, lambda: conn.send(answer))
            else:
                conn.send(answer)
        elif op == "ack":
            answer = {"id": rid, "ok": True, "result": {"acked": frame.get("seq")}}
            if self.log is not None:
                self.log.add(dumps_line({"op": "ack", "job": conn.name, "seq": frame.get("seq")}), lambda: conn.send(answer))
            else:
                conn.send(answer)
        elif op in ("hello", "peer_register", "worker_hello"):
            conn.name = frame.get("name") or frame.get("job") or f"c{id(conn):x}"
            self.names[conn.name] = conn
            conn.send({"id": rid, "ok": True, "result": {"id": conn.name, "name": conn.name}})
        elif op == "peers":
            conn.send({"id": rid, "ok": True, "result": {"self": {"id": conn.name}, "peers": self.rows}})
        else:
            conn.send({"id": rid, "ok": True, "result": {}})


class LeanConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.out: list[bytes] = []
        self.scheduled = False
        self.name = ""
        self.seq = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.buffer:
            data = self.buffer + data
        end = data.rfind(b"\n")
        if end < 0:
            self.buffer = data
            return
        self.buffer = data[end + 1:]
        handle = self.broker.handle
        for line in data[:end].split(b"\n"):
            if line:
                handle(self, loads(line))

    def send(self, frame: dict[str, Any]) -> None:
        self.out.append(dumps_line(frame))
        if not self.scheduled:
            self.scheduled = True
            broker = self.broker
            if not broker.dirty:
                broker.loop.call_soon(broker.flush)
            broker.dirty.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.broker.names.get(self.name) is self:
            del self.broker.names[self.name]


async def serve(path: str, journal: str | None, rows: int) -> None:
    loop = asyncio.get_running_loop()
    broker = Broker(loop, journal, rows)
    server = await loop.create_unix_server(lambda: LeanConnection(broker), path, backlog=4096)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()
    if broker.log is not None:
        broker.log.close()


def new_loop(use_uvloop: bool) -> asyncio.AbstractEventLoop:
    if use_uvloop:
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lean")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--socket", required=True)
    s.add_argument("--journal")
    s.add_argument("--rows", type=int, default=0)
    s.add_argument("--uvloop", action="store_true")
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=lambda: new_loop(args.uvloop)) as runner:
        runner.run(serve(args.socket, args.journal, args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
