"""The Claude Code bridge's frame limit, on a real Unix socket: a request longer than the
bridge reads is refused by the client before it is sent, and one that reaches the
server anyway is answered ``frame_too_large`` and logged, never closed without a word."""

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
