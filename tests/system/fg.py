"""Helpers for tests that drive a foreground session (the public Python API) against the
real daemon of the ``daemon`` fixture."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from roost_core.foreground import ForegroundSession


def run_async(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


async def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking daemon helper without stalling the session's event loop."""
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def session(daemon, tmp_path, name: str = "lead", **kwargs: Any) -> ForegroundSession:
    return ForegroundSession(tmp_path / f"{name}.jsonl", name=name, paths=daemon.paths, cwd=str(tmp_path), **kwargs)


async def spawn(me: ForegroundSession, task: str, name: str, **extra: Any) -> str:
    """Spawn a child through the op (scenario/host are op-only extras)."""
    result = await me.call("spawn", task=task, name=name, **extra)
    return result["id"]


async def send(me: ForegroundSession, to: str, message: str) -> tuple[bool, str, dict[str, Any]]:
    return await me.call_tool("roost_send", {"to": to, "message": message})


def taken(daemon, *peers: ForegroundSession) -> bool:
    """Every item the daemon pushed to these foreground peers is acked, so it is in their
    ``delivered`` (a session acks an item only after it has recorded it)."""
    rows = {row["id"]: row for row in daemon.call("agents")["agents"]}
    return all(rows[peer.peer_id]["pending"] == 0 for peer in peers)
