"""The baselines: the least a newline-JSON broker on anyio can do on this machine.

* ``serve``: a bare anyio Unix-socket broker. Each connection has one reader (batched
  reads, every line of a read handled in turn) and one writer task that sends everything
  queued in one write per wake-up. Ops: ``hello`` (take a name), ``send`` (push a
  ``deliver`` event to the named connection, answer the sender), ``ack`` and ``peers``
  (answer a prebuilt list of N rows, its JSON made once; with ``"fresh": true``,
  encoded per call). With ``--journal``, ``send`` and
  ``ack`` append a record to one shared log with group commit (one write+fsync in flight,
  in a thread; appends arriving meanwhile join the next) and are answered once durable,
  from the commit (no task per request: a connection's next requests go on meanwhile,
  and answers keep their order because commits do). No validation, no policy, no state.
* ``commit``: bare append+fsync group commit to one file, N appenders in a closed loop.
* :class:`BareClient`: the same API as :class:`roost_core.client.AsyncClient` with no
  locking beyond what the stream needs.

The codec is orjson when it is installed (the fastest JSON on this machine), else json.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import time
from typing import Any

import anyio

try:
    import orjson

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj) + b"\n"

    loads = orjson.loads
    CODEC = "orjson"
except ImportError:  # pragma: no cover - orjson is a roost dependency
    import json

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    loads = json.loads
    CODEC = "json"


def split_lines(buffer: bytearray, data: bytes) -> list[bytes]:
    buffer += data
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = bytes(buffer[:end]).split(b"\n")
    del buffer[: end + 1]
    return lines


# --------------------------------------------------------------------------- group commit


class GroupLog:
    """One append-only file; ``append`` returns once its record is written (and fsynced);
    ``add`` buffers a record and calls ``then`` once it is."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.fsync = fsync
        self.buffer: list[bytes] = []
        self.callbacks: list[Any] = []
        self.done = anyio.Event()
        self.wake = anyio.Event()
        self.commits = 0
        self.records = 0

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        if self.fsync:
            os.fsync(self.fd)

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = anyio.Event()
            if not self.buffer:
                continue
            lines, done, callbacks = self.buffer, self.done, self.callbacks
            self.buffer, self.done, self.callbacks = [], anyio.Event(), []
            await anyio.to_thread.run_sync(self._write, b"".join(lines))
            self.commits += 1
            self.records += len(lines)
            for callback in callbacks:
                callback()
            done.set()

    def add(self, record: bytes, then: Any = None) -> None:
        self.buffer.append(record)
        if then is not None:
            self.callbacks.append(then)
        self.wake.set()

    async def append(self, record: bytes) -> None:
        done = self.done
        self.add(record)
        await done.wait()


async def commit_bench(path: str, appenders: int, seconds: float, size: int, warmup: float = 0.3) -> dict[str, Any]:
    log = GroupLog(path)
    record = dumps({"op": "item", "job": "0123abcd", "item": {"seq": 1, "kind": "message", "content": "x" * size}})
    counts = [0]
    window = {"start": 0.0, "end": 0.0}

    async def appender() -> None:
        while True:
            await log.append(record)
            now = time.perf_counter()
            if window["start"] <= now <= window["end"]:
                counts[0] += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        for _ in range(appenders):
            tg.start_soon(appender)
        now = time.perf_counter()
        window["start"], window["end"] = now + warmup, now + warmup + seconds
        await anyio.sleep(warmup + seconds + 0.05)
        tg.cancel_scope.cancel()
    os.close(log.fd)
    return {"records_per_s": counts[0] / seconds, "records_per_commit": log.records / max(1, log.commits), "codec": CODEC}


# --------------------------------------------------------------------------- broker


class Conn:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.outbox: list[bytes] = []
        self.wake = anyio.Event()
        self.closed = False
        self.seq = 0
        self.name = ""

    def send(self, frame: dict[str, Any]) -> None:
        self.outbox.append(dumps(frame))
        self.wake.set()

    async def writer(self) -> None:
        while not self.closed:
            await self.wake.wait()
            self.wake = anyio.Event()
            if self.outbox:
                data = b"".join(self.outbox)
                self.outbox.clear()
                await self.stream.send(data)


class Broker:
    def __init__(self, journal: str | None, rows: int) -> None:
        self.names: dict[str, Conn] = {}
        self.log = GroupLog(journal) if journal else None
        self.rows = [
            {"id": f"f{i:07x}", "name": f"peer {i}", "kind": "foreground" if i % 2 else "job", "relation": "external",
             "state": "idle", "status": None, "summary": None, "question": None, "cwd": "/tmp", "live": bool(i % 2), "dialog": False}
            for i in range(rows)
        ]
        self.rows_json = orjson.Fragment(orjson.dumps(self.rows)) if CODEC == "orjson" else self.rows

    async def handle(self, conn: Conn, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        rid = frame.get("id")
        if op == "send":
            target = self.names.get(frame.get("to", ""))
            if target is None:
                conn.send({"id": rid, "ok": False, "error": {"code": "not_found", "message": "no such peer"}})
                return
            target.seq += 1
            message = frame.get("message", "")
            target.send(
                {"event": "deliver", "seq": target.seq, "kind": "message", "content": message, "text": message,
                 "from": conn.name, "fromName": conn.name, "relation": "external", "trace": None, "hops": 1}
            )
            answer = {"id": rid, "ok": True, "result": {"to": target.name, "result": "delivered", "seq": target.seq}}
            if self.log is not None:
                record = dumps({"op": "item", "job": target.name, "item": {"seq": target.seq, "content": message}})
                self.log.add(record, lambda: conn.send(answer))
            else:
                conn.send(answer)
        elif op == "ack":
            answer = {"id": rid, "ok": True, "result": {"acked": frame.get("seq")}}
            if self.log is not None:
                self.log.add(dumps({"op": "ack", "job": conn.name, "seq": frame.get("seq")}), lambda: conn.send(answer))
            else:
                conn.send(answer)
        elif op == "hello":
            conn.name = frame.get("name") or f"c{id(conn):x}"
            self.names[conn.name] = conn
            conn.send({"id": rid, "ok": True, "result": {"id": conn.name}})
        elif op == "peers":
            # The rows as JSON made once (as roost keeps a listing's), or with "fresh"
            # encoded in this call (as roost does after a change).
            rows = self.rows if frame.get("fresh") else self.rows_json
            conn.send({"id": rid, "ok": True, "result": {"self": {"id": conn.name}, "peers": rows}})
        else:
            conn.send({"id": rid, "ok": True, "result": {}})

    async def connection(self, stream: Any) -> None:
        conn = Conn(stream)
        buffer = bytearray()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.writer)
                while True:
                    try:
                        data = await stream.receive(256 * 1024)
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        break
                    for line in split_lines(buffer, data):
                        if line:
                            await self.handle(conn, loads(line))
                conn.closed = True
                tg.cancel_scope.cancel()
        except Exception:  # noqa: BLE001 - one connection's trouble is its own
            pass
        finally:
            if self.names.get(conn.name) is conn:
                del self.names[conn.name]
            await stream.aclose()


async def serve(path: str, journal: str | None, rows: int) -> None:
    broker = Broker(journal, rows)
    listener = await anyio.create_unix_listener(path)
    async with listener, anyio.create_task_group() as tg:
        if broker.log is not None:
            tg.start_soon(broker.log.run)
        print("ready", flush=True)

        async def stop() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop)
        await listener.serve(broker.connection)


# --------------------------------------------------------------------------- client


class BareClient:
    """:class:`roost_core.client.AsyncClient`'s API over the bare codec."""

    def __init__(self, stream: Any, on_event: Any = None) -> None:
        self.stream = stream
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._send_lock = anyio.Lock()
        self.closed = anyio.Event()

    @classmethod
    async def open(cls, path: str, on_event: Any = None) -> BareClient:
        return cls(await anyio.connect_unix(path), on_event)

    async def run(self) -> None:
        buffer = bytearray()
        try:
            while True:
                try:
                    data = await self.stream.receive(256 * 1024)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                for line in split_lines(buffer, data):
                    if not line:
                        continue
                    frame = loads(line)
                    if "event" in frame:
                        if self.on_event is not None:
                            result = self.on_event(frame)
                            if result is not None:
                                await result
                        continue
                    waiter = self._waiting.pop(frame.get("id"), None)
                    if waiter is not None:
                        waiter[1].append(frame)
                        waiter[0].set()
        finally:
            self.closed.set()

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        event, box = anyio.Event(), []
        self._waiting[request_id] = (event, box)
        async with self._send_lock:
            await self.stream.send(dumps({"id": request_id, "op": op, **args}))
        await event.wait()
        frame = box[0]
        if frame.get("ok"):
            return frame.get("result") or {}
        from roost_core.protocol import ProtocolError

        err = frame.get("error") or {}
        raise ProtocolError(err.get("code", "unknown"), err.get("message", ""))

    async def notify(self, op: str, **args: Any) -> None:
        async with self._send_lock:
            await self.stream.send(dumps({"id": next(self._ids), "op": op, **args}))

    async def aclose(self) -> None:
        await self.stream.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--socket", required=True)
    s.add_argument("--journal")
    s.add_argument("--rows", type=int, default=0)
    c = sub.add_parser("commit")
    c.add_argument("--path", required=True)
    c.add_argument("--appenders", type=int, default=64)
    c.add_argument("--seconds", type=float, default=2.0)
    c.add_argument("--size", type=int, default=600)
    c.add_argument("--warmup", type=float, default=0.3)
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        try:
            anyio.run(serve, args.socket, args.journal, args.rows)
        except KeyboardInterrupt:
            pass
        return 0
    import json

    print(json.dumps(anyio.run(commit_bench, args.path, args.appenders, args.seconds, args.size, args.warmup)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
