"""``roost mcp`` driven by the official ``mcp`` SDK's own stdio client, against a real
daemon: the tools are the daemon's, the client's session is a foreground peer (its pid is
the client, the server's parent), items are pulled with ``roost_inbox``, and a session
another process holds cannot be claimed."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import Any

from conftest import wait_until
from fg import in_thread, run_async
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from roost_core import locks
from roost_core.hosts.handover import marked_seqs


@asynccontextmanager
async def mcp_client(env: dict[str, str], *args: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "roost_core.cli", "mcp", *args], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


async def call(client: Any, name: str, arguments: dict[str, Any] | None = None) -> tuple[bool, str]:
    result = await client.call_tool(name, arguments or {})
    text = "".join(block.text for block in result.content if getattr(block, "type", "") == "text")
    return not result.is_error, text


def agent_row(daemon, name: str) -> dict[str, Any] | None:
    return next((row for row in daemon.call("agents")["agents"] if row["name"] == name), None)


def test_list_spawn_inbox_agents_and_send_through_the_sdk_client(daemon, roost_env, tmp_path):
    env = {**roost_env, "ROOST_NAME": "mcp-lead"}

    async def story():
        async with mcp_client(env) as client:
            listed = (await client.list_tools()).tools
            by_name = {tool.name: tool for tool in listed}
            assert set(by_name) == {"roost_agents", "roost_send", "roost_spawn", "roost_inbox"}
            # The same descriptions and parameters the daemon gives every host.
            for tool in daemon.call("tools")["tools"]:
                assert by_name[tool["name"]].description == tool["description"]
                assert by_name[tool["name"]].input_schema == tool["parameters"]
            # Nothing waits before the session has joined; joining is lazy.
            assert agent_row(daemon, "mcp-lead") is None
            ok, text = await call(client, "roost_spawn", {"task": "count the apples", "name": "kid"})
            assert ok and text.startswith("spawned kid ("), text
            me = agent_row(daemon, "mcp-lead")
            assert me is not None and me["kind"] == "foreground" and me["state"] == "connected"
            # The report is pushed to the server and waits there until it is taken.
            await in_thread(wait_until, lambda: agent_row(daemon, "kid")["state"] == "done", 60, what="the child's run")
            await in_thread(wait_until, lambda: agent_row(daemon, "mcp-lead")["pending"] == 1, 30, what="the report held for the client")
            ok, inbox = await call(client, "roost_inbox")
            assert ok and marked_seqs(inbox) and '<agent-message from="kid"' in inbox and 'kind="report"' in inbox, inbox
            assert "Done: count the apples" in inbox
            # Taken once: acknowledged, and not given again.
            await in_thread(wait_until, lambda: agent_row(daemon, "mcp-lead")["pending"] == 0, 30, what="the ack")
            ok, again = await call(client, "roost_inbox")
            assert ok and again == "no agent items waiting"
            ok, text = await call(client, "roost_agents")
            assert ok and "kid" in text and "[child]" in text
            ok, text = await call(client, "roost_send", {"to": "kid", "message": "and the pears?"})
            assert ok and "kid" in text and "relation child" in text, text
            # A refused call is the tool's error, as the model would read it.
            ok, text = await call(client, "roost_send", {"to": "nobody-here", "message": "hi"})
            assert not ok and text.startswith("error (not_found)"), text

    run_async(story)


def test_the_client_is_the_peer_and_a_session_held_by_another_process_is_refused(daemon, roost_env, tmp_path):
    held = tmp_path / "held.jsonl"
    held.write_text("")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        locks.WriterLock(held, pid=other.pid).acquire()
        mine = tmp_path / "mine.jsonl"

        async def story():
            # A session another live process holds cannot be claimed through roost mcp.
            async with mcp_client({**roost_env, "ROOST_NAME": "spoof"}, "--session", str(held)) as client:
                ok, text = await call(client, "roost_agents")
                assert not ok and "held by pid" in text, text
            assert agent_row(daemon, "spoof") is None
            # Its own session: the writer lock names the client (this process), which the
            # daemon checked the server runs under.
            async with mcp_client({**roost_env, "ROOST_NAME": "honest"}, "--session", str(mine)) as client:
                ok, text = await call(client, "roost_agents")
                assert ok, text
                assert locks.lock_holder(mine) == os.getpid()
                row = agent_row(daemon, "honest")
                assert row is not None and row["session"] == str(mine)
                # An argument that would name another sender is refused, not obeyed.
                ok, text = await call(client, "roost_send", {"to": "honest", "message": "hi", "from": "someone-else"})
                assert not ok and "bad_args" in text, text
            # The client's session ended with the server: the lock is released.
            await in_thread(wait_until, lambda: locks.lock_holder(mine) is None, 10, what="the lock released")

        run_async(story)
    finally:
        other.kill()
        other.wait(10)


def test_roost_mcp_without_the_sdk_says_how_to_install_it(roost_env, tmp_path):
    # A Python where the mcp package cannot be imported (a stub that fails on import).
    stub = tmp_path / "stub"
    (stub / "mcp").mkdir(parents=True)
    (stub / "mcp" / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    env = {**roost_env, "PYTHONPATH": str(stub)}
    result = subprocess.run([sys.executable, "-m", "roost_core.cli", "mcp"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("roost: mcp_missing:") and "roost[mcp]" in result.stderr


def test_what_roost_mcp_adds_stays_within_the_tool_token_budget():
    """Issue 16 caps every roost tool definition together at 1.2x the plain three (JSON
    size as the proxy for tokens): roost_inbox and an allowed host choice fit in it."""
    import json

    from roost_core import policy
    from roost_core.config import Config
    from roost_core.mcp.server import INBOX_TOOL
    from roost_core.plugins import make_plugin_manager

    def size(config: Config, extra: tuple = ()) -> int:
        tools = [tool.to_json() for tool in policy.tool_definitions(make_plugin_manager(config), config, ("pi", "claude"))] + list(extra)
        return len(json.dumps(tools, separators=(",", ":")))

    plain = size(Config())
    widest = size(Config.from_mapping({"agentSpawnHosts": ["pi", "claude"]}), (INBOX_TOOL,))
    assert widest <= 1.2 * plain, (widest, plain)
