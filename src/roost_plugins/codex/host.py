"""The Codex host: a background job runs the Codex CLI headless (``--host codex``).

Codex has no long-lived stdin mode that takes messages as they come (``codex exec``
reads one prompt), so a run is one ``codex exec --json PROMPT`` process, the first time,
and ``codex exec resume --json THREAD PROMPT`` after that: the same thread, the same
session file (Codex's rollout), the whole history resent by Codex itself.

What goes in, and how:

- a run's items (the task, user replies, agent items that woke an idle job): the prompt,
  starting with the marker line ``[roost seq ...]`` (:func:`roost_core.hosts.handover.items_text`);
- agent items that arrive during the run: the next hook, over the worker's bridge (the
  hook command is Claude Code's, ``roost claude hook EVENT``: Codex's hooks answer in the
  same shapes): ``PostToolUse`` (mid-turn, a developer message after the tool call) or
  ``Stop`` (the stop is blocked, the reason is a new user input in the same run);
- a user reply that arrives during the run: the prompt of the next ``exec resume``, right
  after this one ends (it is the user's words: never a hook's context).

The job's session file (in roost's sessions folder) becomes a symbolic link to the
rollout as soon as Codex names it: the rollout's name holds the thread id, which is
unknown before Codex starts. An item counts as delivered once the rollout shows its seq.

The roost tools come from ``roost mcp`` (job mode) as the Codex MCP server ``roost``,
``required`` (the first request waits for it) and approved (nobody answers a prompt);
its calls run through this worker over the bridge (``ROOST_BRIDGE``, given in the
server's own ``env``: Codex hands its MCP servers only a few variables). Hooks given on
the command line run only when trusted, so the job passes
``--dangerously-bypass-hook-trust``: they are roost's own, written by this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices, until_exited
from roost_core.hosts.bridged import BridgedHost, json_events
from roost_core.hosts.handover import BRIDGE_ENV, hook_output, items_text, wants_items
from roost_core.queue import Item
from roost_core.worker.proctree import MARK_VARIABLE
from roost_plugins.codex import SERVER_NAME, TESTED_VERSIONS, CodexError, codex_binary, codex_home
from roost_plugins.codex.transcript import RolloutSeqs

log = logging.getLogger("roost.codex")

#: Codex's reasoning efforts; a pi thinking level outside them is not passed on.
EFFORTS = ("minimal", "low", "medium", "high", "xhigh")
#: How long Codex waits for the roost MCP server before its first request.
MCP_STARTUP_SECONDS = 60
#: The ``codex exec --json`` item types that are the model's output (not ``error``).
MODEL_OUTPUTS = {"agent_message", "reasoning", "command_execution", "file_change", "mcp_tool_call", "web_search", "todo_list"}
#: After Codex exited, how long its last events may take to be read.
STDOUT_DRAIN = 5.0


def toml_value(value: Any) -> str:
    """A value for ``codex -c key=VALUE`` (TOML): strings and lists as JSON (valid TOML),
    tables as inline tables."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def hook_command(event: str) -> str:
    """The shell command Codex runs for ``event``: this Python's roost hook relay."""
    return shlex.join([sys.executable, "-m", "roost_core.hookrelay", event])


def mcp_server(bridge: str | None) -> dict[str, Any]:
    """The roost MCP server's Codex settings (``mcp_servers.roost``)."""
    server: dict[str, Any] = {
        "command": sys.executable,
        "args": ["-m", "roost_core.mcp"],
        "startup_timeout_sec": MCP_STARTUP_SECONDS,
        # approval_policy = never refuses an MCP call whose tools are not approved.
        "default_tools_approval_mode": "approve",
    }
    if bridge is not None:
        server["env"] = {BRIDGE_ENV: bridge}
        # Codex starts an MCP server with a cleared environment: without the worker's
        # mark it would outlive a killed worker, unseen by the daemon's clean-up.
        mark = os.environ.get(MARK_VARIABLE)
        if mark:
            server["env"][MARK_VARIABLE] = mark
        # The first request waits for the server (else Codex waits ~1 s, then goes on
        # without its tools).
        server["required"] = True
    return server


#: A job's hooks: after each tool and at the turn's end. Not ``UserPromptSubmit``: a job's
#: prompt holds its items already, and that hook would hold up every first request by
#: one Python start (the rollout is found by its thread id instead).
JOB_EVENTS = ("PostToolUse", "Stop")


def hooks_settings() -> dict[str, Any]:
    """A job's hooks in Codex's ``hooks`` shape (event -> matcher groups)."""
    hooks: dict[str, Any] = {}
    for event in JOB_EVENTS:
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event), "timeout": 30}]}
        if event == "PostToolUse":
            entry["matcher"] = ".*"
        hooks[event] = [entry]
    return hooks


def thread_of(rollout: str) -> str:
    """The thread id a rollout's name ends with (``rollout-TIME-THREAD.jsonl``: a UUID)."""
    stem = Path(rollout).stem
    parts = stem.split("-")
    if len(parts) < 6:
        raise CodexError(f"{rollout} is not a Codex rollout")
    return "-".join(parts[-5:])


def event_message(event: dict[str, Any]) -> str:
    """The message of a Codex ``error`` or ``turn.failed`` event (``{"message"}``, or
    ``{"error": {"message"}}``), on one line; ``""`` when it has none."""
    error = event.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) or not message.strip():
        message = event.get("message")
    return " ".join(message.split()) if isinstance(message, str) else ""


class CodexHost(BridgedHost):
    agent = "codex"
    tested_versions = TESTED_VERSIONS
    # A stopped job ends Codex at once: closing stdin does not end an exec run, and a run
    # whose model server does not answer retries for minutes.
    stop_grace = 0.2

    def __init__(self) -> None:
        super().__init__()
        self.thread = ""
        self.rollout: RolloutSeqs | None = None
        self.running = False
        #: User replies that came during a run: the next exec's prompt.
        self.held: list[Item] = []
        self.last_text = ""
        #: What Codex said went wrong in this exec: its ``error`` events (retries as they
        #: go) and its ``turn.failed`` (why the turn ended), the last of each.
        self.last_error = ""
        self.turn_failure = ""
        self.turn_done = False
        #: Whether this run's items held a user reply (the task is one): it ends ``done``.
        self.replied = False
        #: Ids of this exec's items that have started (a tool call's, before it runs).
        self.started_items: set[str] = set()
        #: Set when Codex's stdout ends (it exited, or closed it).
        self.stdout_done = anyio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.take_lock(job)
        if os.path.islink(job.session):
            self.link(os.readlink(job.session))
        self.scan()
        await self.open_bridge()
        return set(self.known_seqs())

    async def close(self) -> None:
        await self.end_process()
        await self.close_bridge()

    # ------------------------------------------------------------------ the rollout

    def link(self, rollout: str) -> None:
        """The job's session is this rollout (its thread): point the session file at it."""
        assert self.job is not None
        self.thread = thread_of(rollout)
        if not os.path.islink(self.job.session) or os.readlink(self.job.session) != rollout:
            Path(self.job.session).parent.mkdir(parents=True, exist_ok=True)
            temp = f"{self.job.session}.{os.getpid()}.link"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            os.symlink(rollout, temp)
            os.replace(temp, self.job.session)
        self.rollout = RolloutSeqs(self.job.session)

    def find_rollout(self) -> None:
        """Link the thread's rollout once Codex has written it."""
        if self.rollout is not None or not self.thread:
            return
        found = sorted((codex_home() / "sessions").rglob(f"rollout-*-{self.thread}.jsonl"))
        if found:
            self.link(str(found[-1]))

    def scan(self) -> None:
        """Settle the items the rollout shows; tell the thread's tokens (Codex reports no cost)."""
        self.find_rollout()
        if self.rollout is None:
            return
        self.rollout.scan()
        self.settle_found()
        self.tell_seen()
        self.tell_usage(self.rollout.tokens, 0.0)

    def known_seqs(self) -> set[int]:
        return self.rollout.seqs if self.rollout is not None else set()

    # ------------------------------------------------------------------ the command

    def argv(self, prompt: str) -> list[str]:
        assert self.job is not None and self.bridge is not None
        argv = [codex_binary(), "exec"]
        if self.thread:
            argv.append("resume")
        argv += ["--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust"]
        settings: dict[str, Any] = {
            "approval_policy": "never",
            f"mcp_servers.{SERVER_NAME}": mcp_server(str(self.bridge.path)),
        }
        for event, groups in hooks_settings().items():
            settings[f"hooks.{event}"] = groups
        for key, value in settings.items():
            argv += ["-c", f"{key}={toml_value(value)}"]
        model = self.job.model
        if model and "/" not in model:  # "provider/id" is pi's form, not a Codex model
            argv += ["-m", model]
        if self.job.thinking in EFFORTS:
            argv += ["-c", f"model_reasoning_effort={toml_value(self.job.thinking)}"]
        argv += shlex.split(os.environ.get("ROOST_CODEX_ARGS", ""))
        if self.thread:
            argv.append(self.thread)
        argv.append(prompt)
        return argv

    # ------------------------------------------------------------------ the bridge

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        assert self.services is not None
        path = data.get("transcript_path")
        if self.rollout is None and isinstance(path, str) and path:
            self.link(path)  # the turn's first hook names the rollout
        self.scan()
        if not self.running or not wants_items(event, data) or event == "UserPromptSubmit":
            return None
        items: list[Item] = []
        for item in self.services.take_steer():
            (self.held if item.kind == "reply" else items).append(item)
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        return hook_output(event, items)

    # ------------------------------------------------------------------ runs

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None
        items = self.drop_known(items)
        if not items:
            return RunOutcome("idle")
        self.running, self.replied = True, False
        try:
            while items:
                failure = await self.exec_once(items)
                if failure is not None:
                    return failure
                # What came after the last hook starts the next exec at once.
                items, self.held = [*self.held, *self.services.take_steer()], []
            await self.wait_for_pending(lambda: False)
        finally:
            self.running = False
        state = "done" if self.replied else "idle"
        return RunOutcome(state, self.last_text)

    async def exec_once(self, items: list[Item]) -> RunOutcome | None:
        """One ``codex exec`` run with ``items`` as its prompt; a failed outcome, or None."""
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        self.replied = self.replied or any(item.kind == "reply" for item in items)
        self.last_error, self.turn_failure, self.turn_done, self.last_text = "", "", False, ""
        self.started_items = set()
        assert self.bridge is not None
        # The hooks Codex runs find the bridge in its environment.
        process = await self.start_process(self.argv(items_text(items)), {BRIDGE_ENV: str(self.bridge.path)})
        # Codex appends piped stdin to the prompt: it gets none.
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
        async with self.pumping(process):
            await process.wait()
        self.process = None
        self.scan()
        if process.returncode != 0 or not self.turn_done:
            await until_exited(process, self.stop_grace)
            held, self.held = self.held, []
            self.keep_unrecorded(*held)
            said = self.turn_failure or self.last_error
            if said:
                return RunOutcome("failed", self.last_text, error=f"codex: {said}", explained=True)
            return RunOutcome("failed", self.last_text, error=f"codex exited {process.returncode}")
        return None

    @contextlib.asynccontextmanager
    async def pumping(self, process: Any) -> AsyncIterator[None]:
        """Read Codex's events and serve the bridge while it runs."""
        assert self.bridge is not None
        self.stdout_done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.read_events, process)
            tg.start_soon(self.bridge.serve)
            try:
                yield
                # Its last events are still in the pipe once it exited; a command the agent
                # left running may hold the pipe open, so the read is given a bound.
                with anyio.move_on_after(STDOUT_DRAIN):
                    await self.stdout_done.wait()
            finally:
                tg.cancel_scope.cancel()

    async def read_events(self, process: Any) -> None:
        try:
            async for event in json_events(process):
                self.on_event(event)
        finally:
            self.stdout_done.set()

    def model_output(self, kind: str, item: dict[str, Any]) -> None:
        """An item event of Codex: where it begins a model output (a text, thinking, a
        tool call), what was handed over before was in the request it answers
        (:meth:`model_answered`). A tool call's item is counted when it starts: it
        completes after its own ``PostToolUse`` hook, which may hand items over that the
        request before could not hold. Codex tells no response id: two tool calls of one
        response are told apart from two responses only by this order."""
        if item.get("type") not in MODEL_OUTPUTS:
            return
        item_id = str(item.get("id") or "")
        if kind == "item.started" or item_id not in self.started_items:
            self.model_answered()
        if kind == "item.started":
            self.started_items.add(item_id)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            self.thread = str(event.get("thread_id") or self.thread)
        elif kind in ("item.started", "item.completed"):
            item = event.get("item") or {}
            self.model_output(kind, item)
            if kind == "item.completed" and item.get("type") == "agent_message":
                self.last_text = str(item.get("text") or "")
        elif kind == "turn.completed":
            self.turn_done = True
        elif kind == "turn.failed":
            self.turn_failure = event_message(event) or self.turn_failure
        elif kind == "error":
            self.last_error = event_message(event) or self.last_error
        self.scan()
        self.notify()
