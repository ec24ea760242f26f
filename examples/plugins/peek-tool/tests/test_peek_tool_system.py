"""roost_peek in a real daemon: a plugin's tool is offered to every agent and runs.

A scripted job (an agent loop with no model) calls ``roost_peek`` on its child; a
foreground session calls it on a peer it may not reach and with bad arguments. With the
plugin blocked, the tool is not offered and a call of it is ``not_found``.

Runs from the roost checkout (``scripts/test.sh``): the daemon fixtures come from roost's
``tests/conftest.py``, which is on pytest's ``pythonpath``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BLOCKED_BY_DEFAULT, daemon_factory, roost_env, wait_until, write_config  # noqa: F401 - fixtures
from fg import run_async, session

from roost_core.protocol import ProtocolError

NAME = "peek-tool"
OTHERS_BLOCKED = ",".join(name for name in BLOCKED_BY_DEFAULT.split(",") if name != NAME)
ENABLED = {"ROOST_DISABLE_PLUGINS": OTHERS_BLOCKED}


def lead_scenario(gate: Path) -> dict:
    """The lead spawns a child that says a line, waits until it has, then peeks at it."""
    return {
        "run": [
            {
                "match": "^lead",
                "steps": [
                    {"spawn": {"task": "child work", "name": "kid", "model": "kid"}},
                    {"wait_for": str(gate)},
                    {"tool": "roost_peek", "args": {"peer": "kid", "lines": 3}},
                    {"say": "peeked"},
                ],
            }
        ],
        "default": {"steps": [{"say": "noted"}]},
        "models": {"kid": {"default": {"steps": [{"say": "Done: the kid's own words"}]}}},
    }


def tool_results(entries: list[dict], tool: str) -> list[str]:
    """The texts the job's model read back from ``tool``."""
    texts = []
    for entry in entries:
        message = entry.get("message") or {}
        if message.get("role") == "toolResult" and message.get("toolName") == tool:
            texts.append(" ".join(part.get("text", "") for part in message.get("content") or []))
    return texts


def test_a_scripted_agent_calls_a_plugin_tool_and_reads_its_answer(daemon_factory, tmp_path):
    daemon = daemon_factory(**ENABLED).start()
    gate = tmp_path / "gate"
    lead = daemon.start_job("lead the work", name="lead", scenario=lead_scenario(gate))
    kid = wait_until(lambda: next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid"), None), what="the child")
    daemon.wait_job(kid, "done")
    gate.write_text("open")
    daemon.wait_job(lead, "done", "idle")
    (text,) = tool_results(daemon.entries(lead), "roost_peek")
    assert text.startswith("kid: last") and "Done: the kid's own words" in text, text


def test_reach_and_arguments_are_checked_for_a_plugin_tool(daemon_factory, tmp_path):
    daemon = daemon_factory(**ENABLED).start()
    other = daemon.start_job("someone else's", name="stranger", scenario={"default": {"steps": [{"say": "secret"}]}})
    daemon.wait_job(other, "done")

    async def story():
        async with session(daemon, tmp_path, name="me") as me:
            await me.ensure_registered()
            assert "roost_peek" in [tool["name"] for tool in me.tools]
            ok, text, _ = await me.call_tool("roost_peek", {"peer": other})
            assert not ok and text.startswith("error (unreachable)"), text
            ok, text, _ = await me.call_tool("roost_peek", {"peer": other, "lines": "many"})
            assert not ok and text.startswith("error (bad_args)") and "'lines'" in text, text
            ok, text, _ = await me.call_tool("roost_peek", {"peer": other, "lines": 500})
            assert not ok and "at most 50" in text, text

    run_async(story)


def test_blocked_the_tool_is_not_offered(daemon_factory, tmp_path):
    daemon = daemon_factory().start()  # roost_env blocks every example plugin

    async def story():
        async with session(daemon, tmp_path, name="me") as me:
            await me.ensure_registered()
            assert "roost_peek" not in [tool["name"] for tool in me.tools]
            with pytest.raises(ProtocolError) as refused:
                await me.call_tool("roost_peek", {"peer": "x"})
            assert refused.value.code == "not_found"

    run_async(story)
