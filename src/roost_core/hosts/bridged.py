"""What the hosts whose agent CLI reaches roost over a private bridge share (``claude``,
``qwen``, ``codex``, ``opencode``, ``gemini``): the job's bridge socket
(:mod:`roost_core.hosts.bridge`) that the agent's hooks and its ``roost mcp`` server call,
its common ops, its end, and the agent's stream of JSON events.

The bridge serves only the agent process and its descendants; the job token never leaves
the worker. A subclass answers the ``hook`` op its own way (:meth:`BridgedHost.answer_hook`,
or the whole frame with :meth:`BridgedHost.answer_hook_frame`) and may add ops
(:meth:`BridgedHost.answer_other`) and tools (:meth:`BridgedHost.bridge_tools`).
:class:`StreamingHost` adds the one agent process that serves many runs and tells its
events on stdout (``claude -p`` and ``qwen -p`` in stream-json).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from roost_core.hosts.base import RunOutcome
from roost_core.hosts.bridge import BridgeServer, private_folder
from roost_core.hosts.process import ProcessHost
from roost_core.queue import Item


async def json_events(process: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects ``process`` writes to its stdout, one a line, until the stream
    ends (a line that is not a JSON object is skipped)."""
    buffer = b""
    while True:
        try:
            data = await process.stdout.receive(256 * 1024)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event


class BridgedHost(ProcessHost):
    """A :class:`ProcessHost` whose agent calls the worker over a private bridge socket."""

    def __init__(self) -> None:
        super().__init__()
        self.bridge: BridgeServer | None = None
        #: The private folder the bridge's socket is in (and the job's side files).
        self.bridge_dir: Path | None = None
        #: The agent items handed to the agent (in a hook's output, a prompt) whose model
        #: request has not been answered yet, each with the model response that was
        #: streaming when it was handed over (:attr:`answering`); and the seqs of those
        #: answered that the transcript does not show yet (seen once it does: a
        #: hand-over that never reached it is made again).
        self.handed_over: list[tuple[int, str | None]] = []
        self.answered_seqs: list[int] = []
        #: The id of the model response the agent streams or streamed last, where its CLI
        #: tells it (None: it does not).
        self.answering: str | None = None

    async def open_bridge(self) -> None:
        """Make the private folder and listen on its ``bridge.sock`` (whose path the agent
        finds in its environment)."""
        self.bridge_dir = private_folder()
        self.bridge = BridgeServer(self.bridge_dir / "bridge.sock", self.answer_bridge, self.agent_pid)
        await self.bridge.open()

    def agent_pid(self) -> int | None:
        """The agent's pid: the bridge serves it and its descendants only."""
        return self.process.pid if self.process is not None else None

    async def close_bridge(self) -> None:
        """Stop serving the bridge, remove its folder, release the session's lock (the
        end of :meth:`close`, once the agent is ended)."""
        if self.bridge is not None:
            await self.bridge.close()
        if self.bridge_dir is not None:
            shutil.rmtree(self.bridge_dir, ignore_errors=True)
        self.release_lock()

    # ------------------------------------------------------------------ seen receipts

    def hand_over(self, items: list[Item]) -> None:
        """``items`` go to the agent now (a hook's output, a prompt): its next model request
        holds the agent items among them."""
        self.handed_over.extend((item.seq, self.answering) for item in items if item.kind != "reply")

    def model_answered(self, response: str | None = None) -> None:
        """The agent wrote a model output (text, a tool call, thinking) of the model
        response ``response`` (its id, where the CLI tells it). No CLI tells of a request
        as it goes out: the first output of a response that began after a hand-over is
        the sign that the hand-over was in its request, whatever that output is. An
        output of the response that was streaming when the items were handed over (a tool
        call beside the one whose hook handed them over) is not: its request went out
        before. Without ids, the host calls this only for outputs no earlier request
        can have made."""
        if response is not None:
            self.answering = response
        answered = [seq for seq, at in self.handed_over if response is None or at != response]
        self.answered_seqs.extend(answered)
        self.handed_over = [(seq, at) for seq, at in self.handed_over if seq not in answered]

    def tell_seen(self) -> None:
        """The answered hand-overs the transcript shows are seen (the agent may write the
        hand-over after the answer has begun to stream). Called by :meth:`scan`."""
        assert self.services is not None
        if not self.answered_seqs:
            return
        known = self.known_seqs()
        seen = [seq for seq in self.answered_seqs if seq in known]
        if seen:
            self.answered_seqs = [seq for seq in self.answered_seqs if seq not in known]
            self.services.seen(seen)

    # ------------------------------------------------------------------ the ops

    async def answer_bridge(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Answer one bridge call: ``hello`` (the roost tools the agent's MCP server lists),
        ``tool_call`` (run through the worker), ``hook``, or the subclass's own."""
        assert self.services is not None
        op = frame.get("op")
        if op == "hello":
            return {"tools": self.bridge_tools(), "mode": "job"}
        if op == "tool_call":
            ok, text = await self.services.call_tool(str(frame.get("name")), dict(frame.get("args") or {}))
            return {"ok": ok, "text": text}
        if op == "hook":
            return await self.answer_hook_frame(frame)
        return await self.answer_other(op, frame)

    def bridge_tools(self) -> list[dict[str, Any]]:
        """The roost tools the job's MCP server lists: the worker's."""
        services: Any = self.services
        tools = getattr(services, "tools", None)
        return list(tools) if isinstance(tools, list) else []

    async def answer_hook_frame(self, frame: dict[str, Any]) -> dict[str, Any]:
        """A ``hook`` call: ``{"output": ...}``, the hook's answer (:meth:`answer_hook`)."""
        return {"output": await self.answer_hook(str(frame.get("event")), dict(frame.get("input") or {}))}

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """What the agent's hook ``event`` (its input ``data``) is told; None: nothing."""
        raise NotImplementedError

    async def answer_other(self, op: Any, frame: dict[str, Any]) -> dict[str, Any]:
        """An op the bridge does not know: an error for the caller."""
        raise ValueError(f"unknown op {op!r}")


class StreamingHost(BridgedHost):
    """A :class:`BridgedHost` whose agent runs as one process for many runs and writes
    its events to stdout as JSON lines; ``gone`` once that process exited or was ended."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = True
        #: Set when the agent writes somewhere else than the job's session (the daemon
        #: and the job see different agent folders): the run fails, it cannot be routed
        #: or acknowledged.
        self.misplaced: str | None = None

    async def stop_agent(self) -> None:
        """End the agent process (the next run starts another)."""
        if await self.end_process():
            self.gone = True

    async def close(self) -> None:
        """End the agent, then the bridge."""
        await self.stop_agent()
        await self.close_bridge()

    def writes_elsewhere(self, data: dict[str, Any]) -> bool:
        """Whether a hook's input ``data`` names a transcript that is not the job's
        session file: then it is logged, kept in :attr:`misplaced` (the run fails on it)
        and the run is woken."""
        assert self.job is not None
        path = data.get("transcript_path")
        if isinstance(path, str) and path and os.path.realpath(path) != os.path.realpath(self.job.session):
            self.log.error("%s writes %s, not the job's session %s", self.agent, path, self.job.session)
            self.misplaced = path
            self.notify()
            return True
        return False

    @contextlib.asynccontextmanager
    async def pumping(self) -> AsyncIterator[None]:
        """Read the agent's events and serve the bridge for the length of one run."""
        assert self.bridge is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.read_events, self.process)
            tg.start_soon(self.bridge.serve)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def read_events(self, process: Any) -> None:
        """Hand each event to :meth:`on_event` until the stream ends: then, if ``process``
        is still the agent, it is gone."""
        async for event in json_events(process):
            self.on_event(event)
        if process is self.process:
            self.gone = True
        self.notify()

    def on_event(self, event: dict[str, Any]) -> None:
        """One event the agent wrote."""
        raise NotImplementedError


def response_id(event: dict[str, Any]) -> str | None:
    """The model response id of a stream-json ``assistant`` event (``message.id``; Claude
    Code and Qwen Code write one event per content block, each with its response's id)."""
    message = event.get("message")
    value = message.get("id") if isinstance(message, dict) else None
    return value if isinstance(value, str) and value else None


def result_outcome(agent: str, items: list[Item], result: dict[str, Any] | None, error_keys: tuple[str, ...]) -> RunOutcome:
    """The outcome of a run of ``items`` whose agent ended it with the stream-json
    ``result`` event ``result`` (None: it wrote none). Failed without one, or when it is an
    error (the error is its first set field of ``error_keys``, else its text); else done
    when the run carried a user reply, idle when not; its text is the result's."""
    if result is None:
        return RunOutcome("failed", error=f"{agent} ended the run without a result")
    text = str(result.get("result") or "")
    if result.get("is_error") or result.get("subtype") not in (None, "success"):
        reason = next((result[key] for key in error_keys if result.get(key)), None)
        return RunOutcome("failed", text, error=str(reason or text or f"{agent} failed"))
    state = "done" if any(item.kind == "reply" for item in items) else "idle"
    return RunOutcome(state, text)
