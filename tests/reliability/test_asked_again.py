"""A request whose answer was lost is asked again with its key, and done once.

The daemon dies between a send and its answer (at a named crash point, or by a random
``kill -9``); the sender's side (the foreground API, its agent tool, the CLI) reconnects to
the daemon started again and asks again with the same key. Every send is then answered,
none is left unknown, and every message is in the receiver's transcript exactly once.
Before request keys, such a send failed with ``daemon connection lost``: a resend could
duplicate it, no resend could lose it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import anyio
import anyio.lowlevel
import pytest
from conftest import wait_until
from fg import in_thread, run_async, session, taken
from reliability.kit import (
    received_messages,
    reports_in,
    tool_pairs,
    tool_text_accepted,
    transcript,
    user_texts,
)
from reliability.test_crash_points import Story

pytestmark = pytest.mark.timeout(180)


def tool_send(story: Story):
    """A sender that sends as an agent does, through ``roost_send``."""

    async def send(me, body: str) -> str | None:
        ok, text, data = await me.call_tool("roost_send", {"to": story.kid, "message": body})
        result = data.get("result") if ok else text
        story.ledger.told(me.peer_id, story.kid, body, result)
        return result

    return send


@pytest.mark.parametrize("point", ["daemon.after_accept_before_persist", "daemon.after_persist_before_answer"])
@pytest.mark.parametrize("how", ["op", "tool"])
def test_a_send_whose_answer_was_lost_is_answered_and_arrives_once(daemon_factory, write_config, tmp_path, record, point, how):
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.5})
    daemon = daemon_factory().start()
    story = Story(daemon, tmp_path)
    send = story.send if how == "op" else tool_send(story)
    outcome: dict = {}

    async def main():
        async with session(daemon, tmp_path, name="talker") as talker:
            await talker.ensure_registered()
            await in_thread(wait_until, lambda: len(reports_in(daemon.entries(story.lead))) == 1, what="task report")
            await in_thread(story.arm, point)
            async with anyio.create_task_group() as tg:
                # The daemon dies at the point during one of these sends; it is started
                # again meanwhile, and the send waiting for its answer asks again.
                tg.start_soon(in_thread, story.restart_after_fault, point)
                for n in range(4):
                    await send(talker, f"during-{n}")
            for n in range(3):
                await send(talker, f"after-{n}")
            outcome.update(await in_thread(story.verdicts, 1))

    run_async(main)
    verdict = outcome["verdict"]
    record("asked again", f"{point} ({how})", runs=1, messages=verdict.promised, result=verdict.summary())
    assert story.fired(point)
    assert story.ledger.unknown_count == 0, f"sends left unknown: {dict(story.ledger.unknown)}"
    assert verdict.promised == 7, verdict.summary()
    story.assert_invariants(["Done: child task"], outcome)


def test_sends_across_random_daemon_kills_are_each_answered_and_arrive_once(daemon_factory, write_config, tmp_path, record):
    """The issue's experiment: sends in a row while the daemon is killed (SIGKILL) at
    random moments and started again; each send is answered, and arrives once."""
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.5})
    daemon = daemon_factory().start()
    story = Story(daemon, tmp_path)
    story.gate.write_text("open")
    rng = random.Random(39)
    total = 30
    outcome: dict = {}

    async def main():
        async with session(daemon, tmp_path, name="talker") as talker:
            await talker.ensure_registered()
            sent = 0

            async def killer() -> None:
                # Kills after a random number of answered sends (progress, not time),
                # then starts the daemon again, three times.
                for _ in range(3):
                    target = min(total - 1, sent + rng.randint(1, 8))
                    while sent < target:
                        await anyio.lowlevel.checkpoint()  # let the sends go on
                        await talker_progress.wait()
                    await in_thread(os.kill, daemon.process.pid, signal.SIGKILL)
                    await in_thread(daemon.process.wait, 20)
                    await in_thread(daemon.restart)

            talker_progress = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(killer)
                for n in range(total):
                    await story.send(talker, f"m-{n}")
                    sent += 1
                    talker_progress.set()
                    talker_progress = anyio.Event()
                tg.cancel_scope.cancel()
            outcome.update(await in_thread(story.verdicts, 1))

    run_async(main)
    verdict = outcome["verdict"]
    record("asked again", "random daemon kills", runs=1, messages=total, result=verdict.summary())
    assert story.ledger.unknown_count == 0, f"sends left unknown: {dict(story.ledger.unknown)}"
    assert verdict.promised == total, verdict.summary()
    story.assert_invariants(["Done: child task"], outcome)


def test_a_cli_reply_whose_answer_was_lost_is_asked_again_and_taken_once(daemon_factory, tmp_path):
    """``roost reply`` while the daemon dies after the reply is durable, before its answer:
    the CLI starts a daemon again, asks again with its key, and is answered; the job takes
    the reply once."""
    daemon = daemon_factory().start()
    job = daemon.start_job("first", name="j", scenario={"default": {"steps": [{"say": "did {input}"}]}})
    daemon.wait_job(job, "done")
    daemon.terminate()
    daemon.env["ROOST_FAULTS"] = "daemon.after_persist_before_answer"
    daemon.restart()
    env = {**os.environ, "ROOST_HOME": str(daemon.paths.home)}
    env.pop("ROOST_FAULTS", None)
    try:
        replied_once(daemon, job, env)
    finally:
        # The daemon the CLI started (the fixture's own died at the point) goes too.
        subprocess.run([sys.executable, "-m", "roost_core.cli", "daemon", "stop"], env=env, capture_output=True, timeout=60)


def replied_once(daemon, job: str, env: dict) -> None:
    done = subprocess.run([sys.executable, "-m", "roost_core.cli", "reply", "j", "second"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "j" in done.stdout or job in done.stdout, done.stdout
    assert (daemon.paths.home / "faults" / "daemon.after_persist_before_answer").exists()
    daemon.process.wait(20)
    # The CLI started the daemon that answered; this handle talks to it as well.
    wait_until(lambda: daemon.job(job)["state"] == "done" and "did second" in str(daemon.entries(job)), what="the reply's run")
    assert user_texts(daemon.entries(job)).count("second") == 1
    assert received_messages(daemon.entries(job)) == []


# ------------------------------------------------------------------ reports to a parent that leaves


def child_scenario(gate) -> dict:
    """A child that reports once ``gate`` exists (after its spawn is answered)."""
    return {"default": {"steps": [{"wait_for": str(gate)}, {"say": "Done: {input}"}]}}


def kept_report(daemon, child: str) -> dict | None:
    """The report the child keeps for its parent, as its record on disk says."""
    import json

    return json.loads((daemon.paths.state_dir / "jobs" / f"{child}.json").read_text()).get("undelivered_report")


@pytest.mark.parametrize("parent_kind", ["session", "no-session"])
def test_a_report_pushed_as_its_parent_leaves_survives_a_daemon_restart_and_arrives_once(daemon_factory, tmp_path, parent_kind):
    """The report reaches the foreground parent, which leaves before acking it. The report
    goes back to the child, kept in its record; the daemon is killed and started again;
    the parent comes back and has the report once: a parent with a session file skips the
    second copy by its id (its file holds it); a no-session parent that lost everything
    (a new process with the same peer id) gets it."""
    daemon = daemon_factory().start()
    session_file = tmp_path / "lead.jsonl" if parent_kind == "session" else None
    ephemeral = "lead-" + parent_kind
    left = anyio.Event()

    async def leave(event) -> None:
        if event.get("kind") == "report":
            # Gone before the ack (and not coming back on this connection): it ends with
            # the report in flight.
            await lead.link.aclose()
            left.set()

    async def main():
        nonlocal lead
        from roost_core.foreground import ForegroundSession

        lead = ForegroundSession(session_file, name="lead", paths=daemon.paths, cwd=str(tmp_path), on_deliver=leave)
        lead.ephemeral_id = ephemeral
        async with lead:
            await lead.ensure_registered()
            child = (await lead.call("spawn", task="the work", name="kid", scenario=child_scenario(tmp_path / "gate")))["id"]
            (tmp_path / "gate").write_text("open")
            await left.wait()
            first_copy = [e for e in lead.delivered if e.get("kind") == "report"]
            await in_thread(wait_until, lambda: kept_report(daemon, child) is not None, what="the report kept on the child")
        daemon.kill9()
        daemon.restart()
        again = ForegroundSession(session_file, name="lead", paths=daemon.paths, cwd=str(tmp_path))
        again.ephemeral_id = ephemeral
        async with again:
            await again.ensure_registered()
            await in_thread(wait_until, lambda: kept_report(daemon, child) is None and taken(daemon, again), what="the kept report routed again")
            reports = [e for e in again.delivered if e.get("kind") == "report"]
        return child, first_copy, reports

    lead = None
    _child, first_copy, reports = run_async(main)
    assert len(first_copy) == 1 and "Done: the work" in first_copy[0]["content"]
    if parent_kind == "session":
        # The file held it: the second copy was acked, not written again.
        assert reports == []
        written = [e for e in transcript(session_file) if e.get("type") == "custom_message" and e.get("details", {}).get("kind") == "report"]
        assert len(written) == 1, written
    else:
        assert len(reports) == 1 and reports[0]["id"] == first_copy[0]["id"]


def test_a_no_session_parent_back_from_away_holds_the_report_made_meanwhile_once(daemon_factory, tmp_path):
    """A ``--no-session`` parent leaves; its child reports meanwhile (kept on the child);
    the parent comes back with its peer id, gets the report, then one more message: it
    holds one copy of the report, not two."""
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"
    scenario = {"run": [{"match": "^the work", "steps": [{"wait_for": str(gate)}, {"say": "Done: the work"}]}], "default": {"steps": [{"say": "ok"}]}}

    async def main():
        from roost_core.foreground import ForegroundSession

        lead = ForegroundSession(None, name="lead", paths=daemon.paths, cwd=str(tmp_path))
        async with lead:
            await lead.ensure_registered()
            child = (await lead.call("spawn", task="the work", name="kid", scenario=scenario))["id"]
        # Away: the child settles and reports; the report is kept on the child.
        gate.write_text("open")
        await in_thread(wait_until, lambda: kept_report(daemon, child) is not None, what="the report kept while the parent is away")
        back = ForegroundSession(None, name="lead", paths=daemon.paths, cwd=str(tmp_path))
        back.ephemeral_id = lead.ephemeral_id
        async with back:
            await back.ensure_registered()
            await back.wait_for_delivery(1)
            daemon.call("reply", job=child, text="one more")
            await in_thread(wait_until, lambda: daemon.job(child)["state"] == "done" and taken(daemon, back), what="the next run")
            ok, text, _data = await back.call_tool("roost_send", {"to": child, "message": "thanks"})
            assert ok, text
            await in_thread(wait_until, lambda: taken(daemon, back) and daemon.job(child)["state"] in ("idle", "done"), what="quiet")
            return [e for e in back.delivered if e.get("kind") == "report"]

    reports = run_async(main)
    firsts = [r for r in reports if "Done: the work" in r["content"]]
    assert len(firsts) == 1, [r["content"][:80] for r in reports]
    assert len({r["id"] for r in reports}) == len(reports), "a report reached the parent twice"


def test_a_send_to_a_foreground_peer_on_record_before_its_push_reaches_it_after_a_crash(daemon_factory, write_config, tmp_path):
    """The daemon dies once the answer ``delivered`` is on record, before the message was
    pushed. The sender asks again and is answered ``delivered`` from the record; the
    receiver, registered again, gets the message pushed by the new daemon: once."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    point = "daemon.after_persist_before_answer"

    async def main():
        async with session(daemon, tmp_path, name="receiver") as receiver, session(daemon, tmp_path, name="sender") as sender:
            me = await receiver.ensure_registered()
            await sender.ensure_registered()
            await in_thread(lambda: (daemon.terminate(), daemon.env.__setitem__("ROOST_FAULTS", point), daemon.restart()))
            await receiver.ensure_registered()
            await sender.ensure_registered()
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_thread, lambda: (wait_until(lambda: (daemon.paths.home / "faults" / point).exists(), what="fired"), daemon.process.wait(20), daemon.restart()))
                result = await sender.call("send", to=me, message="on record, then the crash")
            assert result["result"] == "delivered", result
            await receiver.wait_for_delivery(1)
            with anyio.fail_after(30):
                await sender.call("send", to=me, message="after")
            await receiver.wait_for_delivery(2)
            await in_thread(wait_until, lambda: taken(daemon, receiver), what="acked")
            return [event["content"] for event in receiver.delivered]

    contents = run_async(main)
    assert len(contents) == 2 and "on record, then the crash" in contents[0] and "after" in contents[1], contents
    written = [e for e in transcript(tmp_path / "receiver.jsonl") if e.get("type") == "custom_message"]
    assert len(written) == 2, written


def test_a_send_asked_again_after_its_receiver_took_it_is_not_refused_queue_full(daemon_factory, write_config, tmp_path):
    """The load test's rare ``unexpected`` message (a body in a job's transcript whose
    sender was told it was refused), made on purpose.

    Job ``sender`` sends ``hello`` to job ``receiver`` (``roost_send``); the daemon dies
    once the item is durable, before the answer is on record. While the sender's worker
    is slow to come back (stopped), the new daemon pushes the item, the receiver writes it
    into its transcript and acks it, and other messages fill the receiver's queue. Then
    the sender asks again with its key: no answer on record, no item held. It was refused
    ``queue_full``, and the model was told ``hello`` was not sent, though the receiver has
    it. A send asked again is taken past the cap (its first ask had room; the receiver
    drops a second copy by its message id): the sender is told it was queued, and the
    receiver holds ``hello`` once."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    gates = {name: tmp_path / name for name in ("send", "take", "finish")}
    receiver = daemon.start_job(
        "receive",
        name="receiver",
        scenario={
            # Waits (no boundary) until "take": then takes what was steered in meanwhile
            # (hello) and waits again, so what comes next fills its queue.
            "run": [{"match": "^receive", "steps": [{"wait_for": str(gates["take"])}, {"wait_for": str(gates["finish"])}, {"say": "done"}]}],
            "default": {"steps": [{"say": "ok"}]},
        },
    )
    sender = daemon.start_job(
        "send",
        name="sender",
        scenario={"run": [{"match": "^send", "steps": [{"wait_for": str(gates["send"])}, {"send": {"to": receiver, "message": "hello"}}, {"say": "sent"}]}]},
    )
    point = "daemon.after_persist_before_answer"
    wait_until(lambda: all(daemon.job(job)["state"] == "running" and daemon.record(job).get("worker_pid") for job in (sender, receiver)), what="both runs")
    daemon.terminate()
    daemon.env["ROOST_FAULTS"] = point
    daemon.restart()
    gates["send"].write_text("open")
    wait_until(lambda: (daemon.paths.home / "faults" / point).exists(), what=f"{point} fired")
    daemon.process.wait(20)
    # A slow worker: it asks again only once the receiver took hello and its queue is full.
    slow = daemon.record(sender)["worker_pid"]
    os.kill(slow, signal.SIGSTOP)
    try:
        daemon.restart()
        gates["take"].write_text("open")
        wait_until(lambda: ("sender", "hello") in named(received_messages(daemon.entries(receiver)), sender) and daemon.job(receiver)["pending"] == 0, what="hello taken")

        async def fill() -> None:
            async with session(daemon, tmp_path, name="filler") as filler:
                await filler.ensure_registered()
                for n in range(20):
                    result = await filler.call("send", to=receiver, message=f"filler-{n}")
                    assert result["result"] in ("delivered", "queued"), result

        run_async(fill)
    finally:
        os.kill(slow, signal.SIGCONT)
    daemon.wait_job(sender, "done", "idle")
    [(_args, told)] = tool_pairs(daemon.entries(sender))
    gates["finish"].write_text("open")
    daemon.wait_job(receiver, "done", "idle")
    got = [body for who, body in received_messages(daemon.entries(receiver)) if who == sender]
    assert got == ["hello"], got
    assert told is not None and tool_text_accepted(told), f"the sender was told {told!r}, yet the receiver holds hello"


def named(messages: list[tuple[str, str]], sender: str) -> list[tuple[str, str]]:
    """``messages`` with ``sender``'s id shown as ``"sender"``."""
    return [("sender" if who == sender else who, body) for who, body in messages]
