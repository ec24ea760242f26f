"""``roost_core.client.AsyncClient`` against a real Unix socket whose other end the test
drives (reads the requests, writes the frames it wants, in the order and the reads it
wants): what the daemon never does on purpose (answers out of order, a frame larger than
a read, a full socket, a lost connection) is played here, frame by frame."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from roost_core.client import MAX_UNDISPATCHED, READ_SIZE, AsyncClient, DaemonUnavailable, NotSent
from roost_core.protocol import MAX_FRAME, ProtocolError


class DaemonEnd:
    """The daemon's end of the connection, blocking, driven from a worker thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def requests(self, count: int) -> list[dict[str, Any]]:
        frames = []
        while len(frames) < count:
            while b"\n" not in self.buffer:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("the client closed")
                self.buffer += data
            line, _, self.buffer = self.buffer.partition(b"\n")
            frames.append(json.loads(line))
        return frames

    def write(self, *frames: dict[str, Any]) -> None:
        """Every frame in one write (so the client reads them together)."""
        self.sock.sendall(b"".join(json.dumps(frame).encode() + b"\n" for frame in frames))

    async def areq(self, count: int) -> list[dict[str, Any]]:
        return await anyio.to_thread.run_sync(self.requests, count)

    async def awrite(self, *frames: dict[str, Any]) -> None:
        await anyio.to_thread.run_sync(lambda: self.write(*frames))


@pytest.fixture
def listener(tmp_path: Path):
    path = tmp_path / "d.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    yield path, sock
    sock.close()


async def connect(listener: tuple[Path, socket.socket], on_event: Any = None) -> tuple[AsyncClient, DaemonEnd]:
    path, sock = listener
    client = await AsyncClient.open(path, on_event)
    conn, _ = sock.accept()  # the connect above is done: this returns at once
    return client, DaemonEnd(conn)


def ok(request: dict[str, Any], **result: Any) -> dict[str, Any]:
    return {"id": request["id"], "ok": True, "result": result}


def test_concurrent_calls_get_their_own_answers_in_whatever_order_they_come(listener):
    async def main() -> None:
        client, end = await connect(listener)
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            try:
                results[name] = await client.call("echo", name=name)
            except ProtocolError as exc:
                results[name] = exc.code

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            async with anyio.create_task_group() as calls:
                for name in ("a", "b", "c"):
                    calls.start_soon(call, name)
                requests = await end.areq(3)
                by_name = {r["name"]: r for r in requests}
                assert {r["op"] for r in requests} == {"echo"}
                assert len({r["id"] for r in requests}) == 3
                # Answered backwards, in one write; b's answer is an error.
                await end.awrite(ok(by_name["c"], got="c"),
                                 {"id": by_name["b"]["id"], "ok": False, "error": {"code": "not_found", "message": "no"}},
                                 ok(by_name["a"], got="a"))
            tg.cancel_scope.cancel()
        assert results == {"a": {"got": "a"}, "b": "not_found", "c": {"got": "c"}}
        await client.aclose()

    anyio.run(main)


def test_an_answer_behind_an_event_waits_until_the_event_is_handled(listener):
    """Frames are handled in the order they came: an answer read with an event, behind
    it, reaches its caller only once the event's handler is done."""
    log: list[str] = []
    gate = anyio.Event()
    started = anyio.Event()

    async def on_event(event: dict[str, Any]) -> None:
        log.append(f"event {event['n']} begins")
        started.set()
        await gate.wait()
        log.append(f"event {event['n']} ends")

    async def main() -> None:
        client, end = await connect(listener, on_event)

        async def call() -> None:
            await client.call("ping")
            log.append("answer")

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            tg.start_soon(call)
            (request,) = await end.areq(1)
            await end.awrite({"event": "deliver", "n": 1}, ok(request))
            await started.wait()
            await wait_all_tasks_blocked()
            assert log == ["event 1 begins"]
            gate.set()
            with anyio.fail_after(30):
                while "answer" not in log:
                    await wait_all_tasks_blocked()
                    await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
        assert log == ["event 1 begins", "event 1 ends", "answer"]
        await client.aclose()

    anyio.run(main)


def test_a_frame_larger_than_a_read_arrives_whole(listener):
    big = "x" * (2 * READ_SIZE + 12345)

    async def main() -> None:
        client, end = await connect(listener)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)

            async def answer() -> None:
                (request,) = await end.areq(1)
                await end.awrite(ok(request, text=big))

            tg.start_soon(answer)
            assert (await client.call("log"))["text"] == big
            tg.cancel_scope.cancel()
        await client.aclose()

    anyio.run(main)


def test_requests_wait_for_room_when_the_socket_is_full_and_leave_whole_and_in_order(listener):
    """The daemon reads nothing for a while: what does not fit in the socket waits, and
    every request arrives whole, in the order it was made."""
    body = "y" * 300_000  # a few of these fill the socket's buffers

    async def main() -> None:
        client, end = await connect(listener)
        answers: dict[int, Any] = {}

        async def call(n: int) -> None:
            answers[n] = await client.call("send", to="peer", message=f"{n} {body}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            async with anyio.create_task_group() as calls:
                for n in range(12):
                    calls.start_soon(call, n)
                    await wait_all_tasks_blocked()  # call n is written (or waits) before n+1 starts
                calls.start_soon(lambda: client.notify("ack", seq=7))
                await wait_all_tasks_blocked()
                requests = await end.areq(13)
                assert [r["message"].split(" ")[0] for r in requests[:12]] == [str(n) for n in range(12)]
                assert all(r["message"] == f"{n} {body}" for n, r in enumerate(requests[:12]))
                assert requests[12] == {"id": requests[12]["id"], "op": "ack", "seq": 7}
                await end.awrite(*(ok(r, n=int(r["message"].split(" ")[0])) for r in requests[:12]))
            tg.cancel_scope.cancel()
        assert answers == {n: {"n": n} for n in range(12)}
        await client.aclose()

    anyio.run(main)


def test_a_lost_connection_fails_the_waiting_calls_and_later_ones_are_not_sent(listener):
    async def main() -> None:
        client, end = await connect(listener)
        outcome: list[Any] = []

        async def call() -> None:
            try:
                await client.call("ping")
            except Exception as exc:  # noqa: BLE001 - the test looks at which
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            tg.start_soon(call)
            await end.areq(1)
            end.sock.close()
            with anyio.fail_after(30):
                await client.closed.wait()
        (error,) = outcome
        # It was sent: its fate is unknown, so it is not NotSent (which means "safe to retry").
        assert isinstance(error, DaemonUnavailable) and not isinstance(error, NotSent)
        with pytest.raises(NotSent):
            await client.call("ping")
        await client.aclose()

    anyio.run(main)


def test_aclose_ends_run(listener):
    async def main() -> None:
        client, end = await connect(listener)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.run)
                await wait_all_tasks_blocked()
                await client.aclose()
        assert client.closed.is_set()
        end.sock.close()

    anyio.run(main)


def test_run_after_aclose_returns_at_once(listener):
    async def main() -> None:
        client, end = await connect(listener)
        await client.aclose()
        with anyio.fail_after(30):
            await client.run()
        assert client.closed.is_set()
        with pytest.raises(NotSent):
            await client.call("ping")
        end.sock.close()

    anyio.run(main)


def test_a_slow_event_handler_loses_nothing(listener):
    """More frames than the client keeps undispatched arrive while a handler waits: the
    client stops reading meanwhile, then takes up again; every event comes, in order, and
    the answer behind them too."""
    count = 2 * MAX_UNDISPATCHED + 50
    seen: list[int] = []
    gate = anyio.Event()

    async def on_event(event: dict[str, Any]) -> None:
        if not seen:
            await gate.wait()
        seen.append(event["n"])

    async def main() -> None:
        client, end = await connect(listener, on_event)
        answered: list[Any] = []

        async def call() -> None:
            answered.append(await client.call("ping"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            tg.start_soon(call)
            (request,) = await end.areq(1)
            writing = anyio.Event()

            async def write() -> None:
                await end.awrite(*({"event": "deliver", "n": n} for n in range(count)), ok(request, done=True))
                writing.set()

            tg.start_soon(write)
            # Until the client holds more than it keeps undispatched (then it has
            # stopped reading): the handler is still at its gate.
            with anyio.fail_after(30):
                while len(client._inbox) <= MAX_UNDISPATCHED:
                    await anyio.lowlevel.checkpoint()
            gate.set()
            with anyio.fail_after(30):
                await writing.wait()
                while not answered:
                    await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
        assert seen == list(range(count))
        assert answered == [{"done": True}]
        await client.aclose()

    anyio.run(main)


def test_a_cancelled_call_leaves_the_connection_usable(listener):
    """A caller gives up on its answer: the answer, when it comes, is dropped, and the
    next call gets its own."""

    async def main() -> None:
        client, end = await connect(listener)
        asked: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            with anyio.CancelScope() as scope:

                async def cancel_once_asked() -> None:
                    asked.extend(await end.areq(1))
                    scope.cancel()

                tg.start_soon(cancel_once_asked)
                await client.call("slow")
            assert scope.cancelled_caught and asked[0]["op"] == "slow"

            async def answer() -> None:
                (second,) = await end.areq(1)
                await end.awrite(ok(asked[0], which="late"), ok(second, which="second"))

            tg.start_soon(answer)
            assert await client.call("next") == {"which": "second"}
            tg.cancel_scope.cancel()
        await client.aclose()

    anyio.run(main)


class Wrapped:
    """A stream with no socket to show (as a test's wrapper): the client goes through
    ``receive`` and ``send``."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.stream.receive(max_bytes)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


def test_a_stream_that_shows_no_socket_still_works(listener):
    events: list[dict[str, Any]] = []

    async def main() -> None:
        client, end = await connect(listener, events.append)
        client.stream = Wrapped(client.stream)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)

            async def answer() -> None:
                (request,) = await end.areq(1)
                await end.awrite({"event": "deliver", "seq": 1}, ok(request, fine=True))

            tg.start_soon(answer)
            assert await client.call("ping") == {"fine": True}
            await client.notify("ack", seq=1)
            assert (await end.areq(1))[0]["op"] == "ack"
            end.sock.close()
            with anyio.fail_after(30):
                await client.closed.wait()
        assert events == [{"event": "deliver", "seq": 1}]
        with pytest.raises(NotSent):
            await client.call("ping")
        await client.aclose()

    anyio.run(main)


def test_a_frame_longer_than_the_limit_from_the_daemon_is_logged_as_an_error(listener, caplog):
    """The daemon never pushes an event longer than a frame (an item that long is refused
    before it is queued); a client that nonetheless reads one says so loudly, and goes on
    with the next frame."""
    events: list[dict[str, Any]] = []
    got = anyio.Event()

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        got.set()

    async def main() -> None:
        client, end = await connect(listener, on_event)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            await end.awrite({"event": "deliver", "seq": 1, "content": "x" * MAX_FRAME}, {"event": "deliver", "seq": 2, "content": "next"})
            with anyio.fail_after(30):
                await got.wait()
            tg.cancel_scope.cancel()
        await client.aclose()

    with caplog.at_level("ERROR", logger="roost.client"):
        anyio.run(main)
    assert [event["seq"] for event in events] == [2]
    (record,) = [r for r in caplog.records if r.name == "roost.client"]
    assert record.levelname == "ERROR" and "frame_too_large" in record.getMessage() and "lost" in record.getMessage()


def test_a_request_longer_than_a_frame_is_refused_at_once_and_never_sent(listener):
    """The daemon would discard it and answer with no id, which no caller waits for: the
    client refuses it before it writes, naming the limit."""

    async def main() -> None:
        client, end = await connect(listener)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            with pytest.raises(ProtocolError) as refused, anyio.fail_after(30):
                await client.call("reply", job="j", text="é" * MAX_FRAME)
            assert refused.value.code == "frame_too_large" and str(MAX_FRAME) in refused.value.message
            assert refused.value.data["limit"] == MAX_FRAME and refused.value.data["size"] > MAX_FRAME

            async def answer() -> None:
                (request,) = await end.areq(1)  # the first request the daemon's end reads
                await end.awrite(ok(request, op=request["op"]))

            tg.start_soon(answer)
            assert await client.call("ping") == {"op": "ping"}
            tg.cancel_scope.cancel()
        await client.aclose()

    anyio.run(main)
