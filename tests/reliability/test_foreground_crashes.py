"""Foreground peers under crashes: the daemon dying while a delivery is being written, and
the foreground process dying between writing an item and acking it."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import anyio
import pytest
from anyio.abc import SocketAttribute
from conftest import wait_until
from fg import in_thread, run_async, session
from reliability.kit import agent_entries, envelope, transcript

pytestmark = pytest.mark.timeout(120)


def test_a_foreground_peer_survives_the_daemon_dying_before_its_ack(daemon_factory, write_config, tmp_path, record):
    """The receiver has written the item and is about to ack it when the daemon is
    killed: the ack cannot be sent. The session must carry on (reconnect, send) rather than
    fail with the lost connection."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    killed = []

    def kill_daemon(event):
        if not killed:
            killed.append(event["seq"])
            daemon.kill9()

    async def main():
        async with (
            session(daemon, tmp_path, name="receiver", on_deliver=kill_daemon) as receiver,
            session(daemon, tmp_path, name="sender") as sender,
        ):
            me = await receiver.ensure_registered()
            await sender.ensure_registered()


            async def first() -> None:
                # The daemon dies before it answers; the send is asked again with its
                # key of the daemon started again: "delivered" once the receiver has
                # registered with it, "not running" before (a foreground peer has no
                # mailbox: a new daemon cannot know the old one pushed it).
                result = await sender.call("send", to=me, message="the one before the crash")
                assert result["result"] in ("delivered", "not running")

            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await in_thread(wait_until, lambda: killed, what="delivery")
                await in_thread(daemon.restart)
            # Both sessions reconnect and go on working. The send waits until the new
            # daemon has the receiver again: one sent before it re-registers is
            # rightly answered "not running" (no mailbox for a foreground peer).
            await in_thread(wait_until, lambda: any(r["id"] == me and r["live"] for r in daemon.call("agents")["agents"]), what="the receiver registered again")
            with anyio.fail_after(30):
                result = await sender.call("send", to=me, message="after the restart")
            assert result["result"] == "delivered"
            await receiver.wait_for_delivery(2)
            assert (await receiver.call("peers"))["self"]["id"] == me

    try:
        run_async(main)
    except BaseException as exc:  # recorded, then raised
        record("crash point", "foreground: daemon killed before the receiver's ack", runs=1, messages=2, result=f"the session failed: {type(exc).__name__} ({exc.exceptions[0] if hasattr(exc, 'exceptions') else exc})"[:200])
        raise
    texts = [envelope(e)["body"] for e in agent_entries(transcript(tmp_path / "receiver.jsonl"))]
    record("crash point", "foreground: daemon killed before the receiver's ack", runs=1, messages=2, result=f"receiver transcript: {texts}")
    assert texts == ["the one before the crash", "after the restart"]


RECEIVER = textwrap.dedent(
    """
    import os, sys, anyio
    from pathlib import Path
    from roost_core.foreground import ForegroundSession
    from roost_core.paths import resolve_paths

    async def main():
        def die(event):
            # Written into the session file, not yet acked: the process dies here.
            os._exit(9)
        async with ForegroundSession(Path(sys.argv[1]), name="receiver", cwd=sys.argv[2], paths=resolve_paths(), on_deliver=die) as me:
            peer = await me.ensure_registered()
            # Written whole, then renamed: the test reads the id once the name appears,
            # and must never read a file that is made but not written yet.
            Path(sys.argv[3] + ".tmp").write_text(peer)
            os.replace(sys.argv[3] + ".tmp", sys.argv[3])
            await anyio.sleep(60)

    anyio.run(main)
    """
)


def test_a_foreground_process_that_dies_before_its_ack_gets_no_duplicate_when_resumed(daemon_factory, write_config, tmp_path, record):
    """A pi session is killed after writing a delivered item and before acking it; the
    session is resumed by a new process, which registers again: the daemon pushes the
    unacked item again, and the session must not write it a second time. New items after
    a daemon restart (whose seqs start over) must not be taken for resends either."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    session_file = tmp_path / "receiver.jsonl"
    id_file = tmp_path / "receiver.id"
    child = subprocess.Popen([sys.executable, "-c", RECEIVER, str(session_file), str(tmp_path), str(id_file)], env=daemon.env)
    try:
        wait_until(id_file.exists, what="receiver registered")
        receiver_id = id_file.read_text()

        async def main():
            async with session(daemon, tmp_path, name="sender") as sender:
                await sender.ensure_registered()
                result = await sender.call("send", to=receiver_id, message="exactly once")
                assert result["result"] == "delivered"
                await in_thread(child.wait, 20)
                async with session(daemon, tmp_path, name="receiver") as resumed:
                    assert await resumed.ensure_registered() == receiver_id
                    # The daemon pushes again what was in flight right after the register
                    # answer, in the same pass; a request made now is answered after that
                    # push, and the session handles events in order: once this answer is
                    # in, any resend has been handled (written, or dropped as held).
                    await resumed.call("peers")
                    await in_thread(lambda: (daemon.terminate(), daemon.restart()))
                    # A new daemon knows a foreground peer only once it has registered again.
                    await in_thread(
                        wait_until,
                        lambda: any(row["id"] == receiver_id and row["live"] for row in daemon.call("agents")["agents"]),
                        what="the receiver registered with the new daemon",
                    )
                    result = await sender.call("send", to=receiver_id, message="after a daemon restart")
                    assert result["result"] == "delivered"
                    await in_thread(wait_until, lambda: any(e.get("text") == "after a daemon restart" for e in resumed.delivered), what="new item")

        run_async(main)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    texts = [envelope(e)["body"] for e in agent_entries(transcript(session_file))]
    record("crash point", "foreground: process killed after write, before ack", runs=1, messages=2, result=f"receiver transcript: {texts}")
    assert texts == ["exactly once", "after a daemon restart"]


class SlowFirstRead:
    """A stream whose first read waits until the socket holds an item pushed after the
    register answer, so the answer and what follows it on the connection arrive in one
    read (as they do whenever the daemon is quick). It looks (``MSG_PEEK``), it does not
    guess a time."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.first = True

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.first:
            self.first = False
            sock = self.stream.extra(SocketAttribute.raw_socket)
            while True:
                await anyio.wait_readable(sock)
                held = sock.recv(max_bytes, socket.MSG_PEEK)
                if not held or b'"event":"deliver"' in held:
                    break
                await anyio.sleep(0.01)  # more is coming: look again
        return await self.stream.receive(max_bytes)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


def test_an_item_arriving_with_the_register_answer_is_acked(daemon_factory, tmp_path, monkeypatch, record):
    """A report kept while the parent was away is pushed right after it registers again,
    typically in the same read as the register answer. It must be written once and acked
    (else the daemon keeps it in flight, and pushes it again on the next reconnect)."""
    import roost_core.foreground as foreground
    from roost_core.client import AsyncClient

    daemon = daemon_factory().start()
    gate = tmp_path / "gate"

    async def main():
        async with session(daemon, tmp_path, name="lead") as lead:
            kid = (await lead.call("spawn", task="work", name="kid", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]}))["id"]
            lead_id = await lead.ensure_registered()
        # The kid may settle only once the daemon has seen its parent go: a report routed
        # before that is pushed to the closing connection (and kept for the session), not
        # kept on the kid, which is the order this test is about.
        await in_thread(wait_until, lambda: not any(r["live"] for r in daemon.call("agents")["agents"] if r["id"] == lead_id), what="the lead gone")
        gate.write_text("go")
        await in_thread(wait_until, lambda: daemon.job(kid)["undeliveredReport"], what="report kept")
        real_open = AsyncClient.open.__func__

        async def slow_open(cls, path, on_event=None):
            client = await real_open(cls, path, on_event)
            client.stream = SlowFirstRead(client.stream)
            return client

        monkeypatch.setattr(foreground.AsyncClient, "open", classmethod(slow_open))
        async with session(daemon, tmp_path, name="lead") as back:
            peer = await back.ensure_registered()
            await back.wait_for_delivery(1)
            in_flight = lambda: next(r["pending"] for r in daemon.call("agents")["agents"] if r["id"] == peer)  # noqa: E731
            try:
                await in_thread(wait_until, lambda: in_flight() == 0, what="the report acked")
            finally:
                record("crash point", "foreground: item in the same read as the register answer", runs=1, messages=1, result=f"still in flight at the end: {in_flight()}")

    run_async(main)
