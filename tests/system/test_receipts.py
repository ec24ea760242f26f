"""Receipts and dead letters, the watch stream and log --follow, through real processes."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn

from roost_core.client import AsyncClient
from roost_core.protocol import ProtocolError

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def receipts(lead_data) -> list[dict]:
    return lead_data["sent"]


async def receipt_in(lead, preview: str, state: str) -> dict:
    """The caller's receipt of the item ``preview`` once it says ``state`` (its
    ``roost_agents``, asked again until then, as ``wait_until`` does)."""
    deadline = anyio.current_time() + 30
    while True:
        _, _, data = await lead.call_tool("roost_agents", {})
        (receipt,) = [r for r in data["sent"] if r["preview"] == preview]
        if receipt["state"] == state:
            return receipt
        assert anyio.current_time() < deadline, f"{preview!r} is {receipt['state']}, never {state}"
        await anyio.sleep(0.02)


def test_receipts_move_queued_delivered_acknowledged_seen(daemon, tmp_path):
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "through"}]}], **QUIET})
            await in_thread(wait_until, lambda: daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="busy")
            daemon.call("stop", job=kid)
            await in_thread(daemon.wait_reaped, kid)
            await send(lead, kid, "while stopped")
            _, text, data = await lead.call_tool("roost_agents", {})
            (first,) = [r for r in data["sent"] if r["preview"] == "while stopped"]
            assert first["state"] == "queued" and first["to"] == kid
            assert f"message to kid ({kid}): queued" in text
            daemon.call("reply", job=kid, text="resume")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", what="drained")
            # Acknowledged, then seen: the scripted model call after it read it.
            first = await receipt_in(lead, "while stopped", "seen")
            assert first["seen"] >= first["created"] and first["answered"] is None
            # A live receiver: delivered at once, acknowledged once in its transcript,
            # seen once its next model call has it.
            await send(lead, kid, "live one")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0, what="acked")
            live = await receipt_in(lead, "live one", "seen")
            assert live["updated"] >= live["seen"] >= live["created"]

    run_async(story)


def test_dead_letters_for_each_reason(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            removed = await spawn(lead, "x", "removed", scenario=QUIET)
            full = await spawn(lead, "y", "full", scenario=QUIET)
            await in_thread(daemon.wait_job, removed)
            await in_thread(daemon.wait_job, full)
            # 1. target removed while the message waits
            daemon.call("stop", job=removed)
            await send(lead, removed, "never read")
            daemon.call("remove", job=removed)
            # 2. the target's agent queue is full
            daemon.call("stop", job=full)
            for n in range(20):
                await lead.call("send", to=full, message=f"m{n}")
            with pytest.raises(ProtocolError):
                await lead.call("send", to=full, message="one too many")
        letters = daemon.call("dead")["dead"]
        reasons = {(d["toName"], d["reason"], d["preview"]) for d in letters}
        assert ("removed", "target removed", "never read") in reasons
        assert ("full", "queue full", "one too many") in reasons
        out = subprocess.run([sys.executable, "-m", "roost_core.cli", "dead"], env=daemon.env, capture_output=True, text=True, timeout=30)  # noqa: ASYNC221 - the daemon is another process; this loop has nothing else to run
        assert "target removed" in out.stdout and "queue full" in out.stdout

    run_async(story)


def test_dead_letter_when_a_foreground_receiver_is_not_running(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario={"run": [{"steps": [{"wait_for": str(tmp_path / "gate")}, {"send": {"to": "{parent}", "message": "late"}}]}]})
        # The daemon must have seen the parent go before the child sends (else it is
        # delivered to the closing connection).
        await in_thread(wait_until, lambda: not any(a["id"] == lead.peer_id and a["live"] for a in daemon.call("agents")["agents"]), what="the parent gone")
        (tmp_path / "gate").write_text("go")
        await in_thread(daemon.wait_job, kid)
        letters = daemon.call("dead")["dead"]
        assert [(d["sender"], d["reason"], d["preview"]) for d in letters] == [(kid, "receiver not running", "late")]

    run_async(story)


def test_dead_letters_survive_a_restart(daemon, tmp_path):
    test_dead_letter_when_a_foreground_receiver_is_not_running(daemon, tmp_path)
    daemon.kill9()
    daemon.restart()
    assert [d["reason"] for d in daemon.call("dead")["dead"]] == ["receiver not running"]


def test_refused_items_have_a_receipt_with_the_reason(daemon, tmp_path):
    outsider = daemon.start_job("o", scenario=QUIET)

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "x", "kid", scenario=QUIET)
            await send(lead, outsider, "hello?")
            await send(lead, kid, "x" * 9000)
            _, _, data = await lead.call_tool("roost_agents", {})
            states = [(r["to"], r["state"], r["reason"]) for r in data["sent"]]
            assert (outsider, "refused", "unreachable") in states
            assert (kid, "refused", "message_too_long") in states

    run_async(story)


def test_watch_pushes_changes_without_polling(daemon, tmp_path):
    gate = tmp_path / "gate"

    async def story():
        events: list[dict] = []
        arrived = anyio.Event()

        def on_event(event):
            events.append(event)
            arrived.set()

        client = await AsyncClient.open(daemon.paths.socket, on_event)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            snapshot = await client.call("watch")
            assert snapshot["agents"] == []
            job = await in_thread(daemon.start_job, "w", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "done"}]}]})
            with anyio.fail_after(20):
                while not any(any(a["id"] == job and a["state"] == "running" for a in e["agents"]) for e in events):
                    await arrived.wait()
                    arrived = anyio.Event()
                count = len(events)
                gate.write_text("go")
                while not any(any(a["id"] == job and a["state"] == "done" for a in e["agents"]) for e in events[count:]):
                    await arrived.wait()
                    arrived = anyio.Event()
            assert all(e["event"] == "agents" for e in events)
            await client.aclose()
            tg.cancel_scope.cancel()

    run_async(story)


def test_log_follow_streams_the_transcript(daemon, tmp_path):
    gate = tmp_path / "gate"
    job = daemon.start_job("follow me", scenario={"run": [{"steps": [{"say": "first words"}, {"wait_for": str(gate)}, {"say": "last words"}]}]})
    proc = subprocess.Popen([sys.executable, "-u", "-m", "roost_core.cli", "log", job, "--follow"], env=daemon.env, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if "first words" in line:
                break
        gate.write_text("go")
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if "last words" in line:
                break
        assert "› you: follow me" in lines[0]
        assert lines[-1] == "assistant: last words"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_restart_keeps_the_receipt_of_an_item_still_queued(daemon, tmp_path):
    """Its item is in the journal: a daemon that starts gives its sender's receipt back."""

    async def story() -> tuple[str, str]:
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)
            daemon.call("stop", job=kid)
            await in_thread(daemon.wait_reaped, kid)
            ok, text, data = await send(lead, kid, "while stopped")
            assert ok and data["result"] == "stopped", text
            return kid, lead.peer_id

    kid, lead_id = run_async(story)
    daemon.kill9()
    daemon.restart()
    received = daemon.call("log", job=kid)["received"]
    assert [(r["preview"], r["state"], r["sender"], r["seen"]) for r in received] == [("while stopped", "queued", lead_id, None)]


def test_an_answer_by_reply_to_stamps_seen_when_no_host_told_it_first(daemon_factory, write_config, tmp_path):
    """An answer naming the item's id shows its receiver's model had the item: a receipt
    whose host told no ``seen`` first (a foreground session never does; a job's host may
    tell it after the answer) says ``seen`` with the answer's time, never skips it."""
    write_config({"agentExternalMessages": True})  # two foreground peers: no tree joins them
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path, "lead") as lead, session(daemon, tmp_path, "peer") as peer:
            await lead.ensure_registered()
            await peer.ensure_registered()
            ok, text, data = await send(lead, peer.peer_id, "what is 2+2?")
            assert ok and data["result"] == "delivered", text
            await in_thread(wait_until, lambda: any(e["kind"] == "message" for e in peer.delivered), what="the question")
            assert (await receipt_in(lead, "what is 2+2?", "acknowledged"))["seen"] is None
            ok, text, _ = await peer.call_tool("roost_send", {"to": lead.peer_id, "message": "4", "reply_to": data["id"]})
            assert ok, text
            answered = await receipt_in(lead, "what is 2+2?", "answered")
            assert answered["seen"] == answered["answered"] >= answered["created"], answered

    run_async(story)
