"""Issue 42.4 on the real Claude Code (host ``claude``) with the fake Anthropic model: a
message handed over in a hook's output says ``seen`` once the model call that held it
answers (Claude Code tells of no request as it goes out), and not before."""

from __future__ import annotations

import json

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn


def holding(fake, text: str) -> list[dict]:
    """The fake model's requests that hold ``text``."""
    return [r for r in fake.requests() if text in json.dumps(r["raw"], ensure_ascii=False)]


def test_a_claude_child_has_seen_a_message_once_its_model_call_holds_it(claude_kit, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"wait_for": str(gate)}, {"say": "after the tool"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    daemon = claude_kit.daemon()
    text = "also check the docs"

    async def story() -> tuple[str, dict]:
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="claude")
            await in_thread(wait_until, lambda: len(fake.requests()) >= 1, 90, what="the first model call")
            ok, answer, data = await send(lead, kid, text)
            assert ok and data["result"] == "delivered", answer
            # Held by the worker until the slow tool's PostToolUse hook: no model call has it.
            receipt = daemon.received(kid, text)
            assert receipt["state"] == "delivered" and receipt["seen"] is None
            gate.write_text("go")
            seen = await in_thread(daemon.wait_seen, kid, text, 90)
            await in_thread(daemon.wait_job, kid, timeout=90)
            ok, agents, _data = await lead.call_tool("roost_agents", {})
            assert ok and any(line.startswith(kid) and "; you sent 1: 1 seen" in line for line in agents.splitlines()), agents
            return kid, seen

    kid, seen = run_async(story)
    assert seen["state"] == "seen" and seen["seen"] >= seen["created"] and seen["answered"] is None
    # The call that held it is the one after the tool; its answer closed the run.
    (request,) = holding(fake, text)
    assert request["reply"]["text"] == "after the tool"
    assert daemon.job(kid)["pending"] == 0
