"""Issue 42.4 on the pinned real pi with the fake model: a message's receipt says when the
receiving model first had it in a model request (``seen``) and when a message naming it
in ``reply_to`` came back (``answered``); ``roost log``, ``roost log --json`` and the
sender's ``roost_agents`` show it, and a daemon restart keeps it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anyio
from conftest import wait_until
from fg import in_thread, run_async, session, spawn

from roost_core.transcript import receipt_note


def log_json(daemon, job: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "roost_core.cli", "log", "--json", job], env=daemon.env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def received(daemon, job: str, text: str) -> dict | None:
    """The receipt of the item holding ``text`` that ``job`` received (``roost log --json``)."""
    return next((r for r in log_json(daemon, job)["received"] if r["preview"] == text), None)


def holding(fake, text: str) -> list[dict]:
    """The fake model's requests whose messages hold ``text``."""
    return [r for r in fake.requests() if any(text in json.dumps(m.get("content"), ensure_ascii=False) for m in r["messages"])]


def test_pi_receipt_goes_delivered_seen_answered_and_survives_a_restart(pi_kit, tmp_path):
    slow, think = tmp_path / "slow", tmp_path / "think"
    question = "what is 2+2?"
    scenario = {
        "run": [
            {"match": "wait please", "steps": [{"wait_for": str(slow)}, {"say": "waited"}]},
            # The question's run: pi's first request holds it; the answer waits for a gate.
            {"match": r"2\+2", "steps": [{"wait_for": str(think)}, {"send": {"to": "{from}", "message": "4", "reply_to": "{msg}"}}, {"say": "answered"}]},
        ],
        "default": {"steps": [{"say": "ok"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()

    async def agents_line(lead, kid: str) -> str:
        ok, text, _data = await lead.call_tool("roost_agents", {})
        assert ok, text
        return next(line for line in text.splitlines() if line.startswith(kid))

    async def story() -> tuple[str, str, dict]:
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "wait please", "kid", host="pi")
            await in_thread(wait_until, lambda: holding(fake, "wait please"), 90, what="the kid's first model call")
            # The kid is in its slow tool: a follow-up waits for the run's end, on its worker.
            ok, text, data = await lead.call_tool("roost_send", {"to": kid, "message": question, "urgent": False})
            assert ok and data["result"] == "delivered", text
            receipt = received(daemon, kid, question)
            assert receipt["state"] == "delivered" and receipt["seen"] is None and receipt["id"] == data["id"]
            assert not holding(fake, question)
            assert "; you sent 1: 1 unseen" in await agents_line(lead, kid)
            slow.write_text("go")
            # The run ends, the follow-up starts the next: pi's request holds it.
            seen = await in_thread(wait_until, lambda: (r := received(daemon, kid, question)) and r["state"] == "seen" and r, 90, what="seen")
            assert holding(fake, question) and seen["answered"] is None
            assert "; you sent 1: 1 seen" in await agents_line(lead, kid)
            think.write_text("go")
            answered = await in_thread(wait_until, lambda: (r := received(daemon, kid, question)) and r["state"] == "answered" and r, 90, what="answered")
            assert answered["seen"] == seen["seen"] and answered["answered"] >= answered["seen"] >= answered["created"]
            assert "; you sent 1: 1 answered" in await agents_line(lead, kid)
            (mine,) = [r for r in (await lead.call_tool("roost_agents", {}))[2]["sent"] if r["to"] == kid]
            assert mine["state"] == "answered" and mine["seen"] == seen["seen"]
            await in_thread(daemon.wait_job, kid, timeout=90)
            return kid, lead.peer_id, answered

    kid, lead_id, answered = run_async(story)
    log = subprocess.run([sys.executable, "-m", "roost_core.cli", "log", kid], env=daemon.env, capture_output=True, text=True, timeout=60, check=True)
    assert receipt_note(answered) in log.stdout, log.stdout
    assert "↳ answered · seen " in log.stdout

    # A restart keeps them: the kid's log, and the lead's roost_agents when it is back.
    assert daemon.terminate() == 0
    daemon.start()
    kept = received(daemon, kid, question)
    assert kept is not None and {k: kept[k] for k in ("state", "seen", "answered", "sender")} == {
        "state": "answered", "seen": answered["seen"], "answered": answered["answered"], "sender": lead_id,
    }

    async def after() -> None:
        async with session(daemon, tmp_path) as lead:
            ok, text, _data = await lead.call_tool("roost_agents", {})
            assert lead.peer_id == lead_id
            assert ok and any(line.startswith(kid) and "; you sent 1: 1 answered" in line for line in text.splitlines()), text

    run_async(after)


async def until(check, timeout: float, what: str):
    """``await check()`` until it is truthy (as conftest's ``wait_until``, for an async check)."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await anyio.sleep(0.02)
    return value


async def seen_one(mine):
    receipt = await mine()
    return receipt if receipt is not None and receipt["seen"] is not None else None


def test_a_foreground_pi_tells_seen_on_its_own_connection(pi_kit, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    scenario = {
        "run": [{"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed them"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    pi = pi_kit.rpc_pi(tmp_path / "fg" / "mine.jsonl", tmp_path / "work")
    pi.prompt("who is around?")  # its first roost call makes it a peer
    wait_until(lambda: daemon.call("daemon_status")["foreground"] == 1, what="the pi peer")
    text = "hello from outside"

    async def story() -> dict:
        async with session(daemon, tmp_path, name="outsider") as outsider:
            _ok, _text, rows = await outsider.call_tool("roost_agents", {})
            (peer,) = [row for row in rows["peers"] if row["kind"] == "foreground"]

            async def mine() -> dict | None:
                _ok, _text, data = await outsider.call_tool("roost_agents", {})
                return next((r for r in data["sent"] if r["to"] == peer["id"]), None)

            ok, answer, data = await outsider.call_tool("roost_send", {"to": peer["id"], "message": text})
            assert ok and data["result"] == "delivered", answer
            # pi takes it as a new turn: the request that holds it makes it seen.
            await in_thread(wait_until, lambda: holding(fake, text), 60, what="pi's request with the message")
            receipt = await until(lambda: seen_one(mine), 60, "seen")
            ok, agents, _data = await outsider.call_tool("roost_agents", {})
            assert any(line.startswith(peer["id"]) and "; you sent 1: 1 seen" in line for line in agents.splitlines()), agents
            return receipt

    receipt = run_async(story)
    assert receipt["state"] == "seen" and receipt["seen"] >= receipt["created"]
