"""The job bridge on a real Unix socket: its frame limit (a request longer than the bridge
reads is refused by the client before it is sent, and one that reaches the server anyway
is answered ``frame_too_large`` and logged, never closed without a word); a connection
that outlives a run's serving; a call whose worker closed the bridge says so."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from roost_core.hosts import bridge


async def echo(frame: dict[str, Any]) -> dict[str, Any]:
    return {"op": frame.get("op")}


def serve(tmp_path: Path, check: Any) -> None:
    """Run a bridge server for this process while ``check`` (blocking) runs in a thread."""

    async def main() -> None:
        server = bridge.BridgeServer(tmp_path / "b.sock", echo, os.getpid)
        await server.open()
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            await anyio.to_thread.run_sync(check, server.path)
            tg.cancel_scope.cancel()
        await server.close()

    anyio.run(main)


def test_a_request_longer_than_the_bridge_reads_is_refused_before_it_is_sent(tmp_path):
    def check(path: Path) -> None:
        with pytest.raises(RuntimeError, match=f"frame_too_large: .* at most {bridge.MAX_FRAME}; nothing was sent"):
            bridge.request(path, "hook", input={"tool_response": "x" * bridge.MAX_FRAME})
        assert bridge.request(path, "hook", input={}) == {"op": "hook"}

    serve(tmp_path, check)


def test_an_oversize_line_that_reaches_the_server_is_answered_and_logged(tmp_path, caplog):
    def check(path: Path) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(path))
            sock.sendall(b'{"id": 1, "op": "hook", "input": "' + b"x" * (bridge.MAX_FRAME + 1))
            answer = b""
            while b"\n" not in answer:
                data = sock.recv(65536)
                assert data, "closed without an answer"
                answer += data
        error = json.loads(answer)["error"]
        assert error["code"] == "frame_too_large" and error["limit"] == bridge.MAX_FRAME

    with caplog.at_level("ERROR", logger="roost.bridge"):
        serve(tmp_path, check)
    assert any(r.levelname == "ERROR" and "longer than" in r.getMessage() for r in caplog.records)


def test_a_connection_outlives_the_serving_and_what_it_asks_between_runs_is_answered_in_the_next(tmp_path):
    """A host serves the bridge for one run; the agent's MCP server keeps its connection
    across runs: the run's end keeps it, and the next run answers it."""

    async def main() -> None:
        server = bridge.BridgeServer(tmp_path / "b.sock", echo, os.getpid)
        await server.open()
        client = None
        try:
            async with anyio.create_task_group() as tg:  # the first run
                tg.start_soon(server.serve)
                client = await bridge.AsyncBridgeClient.connect(server.path)
                assert await client.call("first") == {"op": "first"}
                tg.cancel_scope.cancel()
            async with anyio.create_task_group() as tg:
                asked, answered = anyio.Event(), anyio.Event()
                answers: list[dict[str, Any]] = []

                async def ask() -> None:
                    assert client is not None
                    asked.set()
                    answers.append(await client.call("between"))
                    answered.set()

                tg.start_soon(ask)  # asked between the runs
                await asked.wait()
                tg.start_soon(server.serve)  # the next run
                with anyio.fail_after(30):
                    await answered.wait()
                tg.cancel_scope.cancel()
            assert answers == [{"op": "between"}]
        finally:
            if client is not None:
                await client.aclose()
            await server.close()

    anyio.run(main)


def test_a_call_whose_worker_closed_the_bridge_says_so(tmp_path):
    async def main() -> None:
        server = bridge.BridgeServer(tmp_path / "b.sock", echo, os.getpid)
        await server.open()
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            client = await bridge.AsyncBridgeClient.connect(server.path)
            assert await client.call("first") == {"op": "first"}
            tg.cancel_scope.cancel()
        await server.close()  # the worker ends
        with pytest.raises(bridge.BridgeClosed, match=r"^bridge_closed: the roost worker closed the bridge before answering 'tool_call'"):
            await client.call("tool_call")
        await client.aclose()

    anyio.run(main)
