"""The Claude Code host: a background job runs headless Claude Code (``--host claude``).

The worker runs ``claude -p --input-format stream-json --output-format stream-json`` on
the job's session: ``--session-id ID`` the first time, ``--resume ID`` after that (the
job's session file is Claude Code's own transcript, ``<config>/projects/<cwd>/<ID>.jsonl``,
so routing keys on the same file a user's ``claude --resume ID`` would hold).

What goes in, and how:

- the task and user replies: stream-json user messages, each with a ``uuid`` made from its
  queue seq (:func:`roost_plugins.claude.prompt_uuid`), which Claude Code keeps as the
  transcript entry's ``uuid``. A reply that arrives mid-run is written at the next tool
  boundary; Claude Code takes it into the same turn.
- agent items: never as user input. They wait for the next hook: ``PostToolUse`` (mid-turn,
  as context after the tool result), ``Stop`` (the stop is blocked with them) or
  ``UserPromptSubmit``. An idle session is woken with roost's fixed prompt
  (:data:`roost_plugins.claude.WAKE_PROMPT`) and gets the items as that prompt's context.

The hooks (``roost claude hook EVENT``) and the job's MCP server (``roost mcp``, whose
roost tools run through this worker) reach the host over a private bridge socket named in
``ROOST_BRIDGE``; only the Claude Code process and its descendants are served. The
job token never leaves the worker.

An item counts as delivered once the transcript shows it (its ``uuid``, or its seq in a
``[roost seq ...]`` marker). A run is over when every user message written for it has
completed (``command_lifecycle``) and Claude Code is idle; its final text is the last
``result``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

from roost_core.dialogs import PERMISSION_OPTIONS
from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.hosts.bridged import StreamingHost, response_id, result_outcome
from roost_core.hosts.handover import BRIDGE_ENV, hook_output, wants_items
from roost_core.queue import Item
from roost_plugins.claude import (
    PERMISSION_TOOL,
    SERVER_NAME,
    TESTED_VERSIONS,
    WAKE_PROMPT,
    ClaudeError,
    claude_binary,
    permission,
    prompt_uuid,
    session_id_of,
)
from roost_plugins.claude.hook import EVENTS
from roost_plugins.claude.transcript import TranscriptSeqs, result_usage

log = logging.getLogger("roost.claude")

#: After a run settles, how long to wait for its items to show in the transcript.
SETTLE_TIMEOUT = 5.0
STOP_GRACE = 5.0
#: Claude Code's effort levels; a pi thinking level outside them is not passed on.
EFFORTS = ("low", "medium", "high", "xhigh", "max")


def hook_command(event: str) -> str:
    """The shell command Claude Code runs for ``event``: this Python's roost."""
    return " ".join(shlex.quote(part) for part in (sys.executable, "-m", "roost_plugins.claude", "hook", event))


def mcp_server_config() -> dict[str, Any]:
    """The job's roost MCP server (given with ``--mcp-config``). ``alwaysLoad``: its tools
    are listed in every request as real tools, as the installed server's are; Claude
    Code's tool search (on by default) would otherwise defer them to names in the
    request's text that a model must look up first."""
    return {"command": sys.executable, "args": ["-m", "roost_core.mcp"], "alwaysLoad": True}


def job_settings() -> dict[str, Any]:
    """The hooks a job's Claude Code runs (given with ``--settings``)."""
    hooks: dict[str, Any] = {}
    for event in EVENTS:
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event)}]}
        if event == "PostToolUse":
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return {"hooks": hooks}


class ClaudeHost(StreamingHost):
    agent = "claude"
    tested_versions = TESTED_VERSIONS
    settle_timeout = SETTLE_TIMEOUT
    stop_grace = STOP_GRACE  # Claude Code ends cleanly when its stdin closes

    def __init__(self) -> None:
        super().__init__()
        self.session_id = ""
        self.transcript: TranscriptSeqs | None = None
        self.running = False
        #: Agent items waiting for the next hook that can hand them over.
        self.outbox: list[Item] = []
        #: uuids of the user messages written, and of those Claude Code has completed.
        self.written: set[str] = set()
        self.completed: set[str] = set()
        self.last_result: dict[str, Any] | None = None
        self.results = 0
        #: The session's totals as the last ``result`` gave them.
        self.result_usage: tuple[int, float] = (0, 0.0)
        #: Permission prompts become roost dialogs (``claudePermissionPrompts: "ask"``);
        #: False: they are refused at once (``"none"``).
        self.ask_permissions = True

    # ------------------------------------------------------------------ lifecycle

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.session_id = session_id_of(job.session)
        self.ask_permissions = services.config.claude_permission_prompts == "ask"
        self.take_lock(job)
        self.transcript = TranscriptSeqs(job.session, self.session_id)
        self.transcript.scan()
        self.report_usage()  # a resumed session has spent already
        await self.open_bridge()
        return set(self.transcript.seqs)

    def argv(self) -> list[str]:
        assert self.job is not None
        argv = [claude_binary(), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
        if Path(self.job.session).exists():
            argv += ["--resume", self.session_id]
        else:
            argv += ["--session-id", self.session_id]
        argv += ["--settings", json.dumps(job_settings())]
        argv += ["--mcp-config", json.dumps({"mcpServers": {SERVER_NAME: mcp_server_config()}})]
        # roost's own tools are governed by roost's policy. Anything else that would need a
        # permission prompt asks the user through roost's permission tool (a dialog), or,
        # with ``claudePermissionPrompts: "none"``, is refused at once.
        argv += ["--allowedTools", f"mcp__{SERVER_NAME}"]
        if self.ask_permissions:
            argv += ["--permission-prompts", "host", "--permission-prompt-tool", f"mcp__{SERVER_NAME}__{PERMISSION_TOOL}"]
        else:
            argv += ["--permission-prompts", "none"]
        model = self.job.model
        if model and "/" not in model:  # "provider/id" is pi's form, not a Claude model
            argv += ["--model", model]
        if self.job.thinking in EFFORTS:
            argv += ["--effort", str(self.job.thinking)]
        argv += shlex.split(os.environ.get("ROOST_CLAUDE_ARGS", ""))
        return argv

    async def start_claude(self) -> None:
        assert self.job is not None and self.bridge is not None and self.services is not None
        await self.stop_agent()
        # Once it exits, the worker ends what it left behind (the Bash tool's commands,
        # the MCP servers).
        await self.start_process(self.argv(), {BRIDGE_ENV: str(self.bridge.path)})
        self.gone = False
        self.written.clear()
        self.completed.clear()

    # ------------------------------------------------------------------ plumbing

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "command_lifecycle" and event.get("state") == "completed":
            self.completed.add(str(event.get("command_uuid")))
        elif kind == "result":
            self.last_result = event
            self.results += 1
            tokens, cost = result_usage(event)
            self.result_usage = (max(tokens, self.result_usage[0]), max(cost, self.result_usage[1]))
        if kind == "assistant":
            # Each content block (text, thinking, a tool call) is an event of its own,
            # with its model response's id.
            self.model_answered(response_id(event))
        self.scan()
        self.notify()

    def scan(self) -> None:
        """Settle the items the transcript shows; tell the session's usage."""
        assert self.transcript is not None
        self.transcript.scan()
        self.settle_found()
        self.tell_seen()
        self.report_usage()

    def known_seqs(self) -> set[int]:
        assert self.transcript is not None
        return self.transcript.seqs

    def report_usage(self) -> None:
        """The session's tokens and cost so far, as pi jobs tell theirs: each answer's
        usage in the transcript as it is written, and the totals of Claude Code's last
        ``result`` (which also count its side calls and its cost); the larger of each, as
        both only grow."""
        assert self.transcript is not None
        self.tell_usage(max(self.transcript.tokens, self.result_usage[0]), max(self.transcript.cost, self.result_usage[1]))

    async def write_prompt(self, text: str, item: Item | None = None) -> None:
        if self.process is None or self.gone:
            raise ClaudeError("claude exited")
        message_uuid = prompt_uuid(self.session_id, item.seq) if item is not None else str(uuid.uuid4())
        if item is not None:
            self.pending[item.seq] = item
        self.written.add(message_uuid)
        frame = {"type": "user", "uuid": message_uuid, "message": {"role": "user", "content": text}}
        await self.process.stdin.send(json.dumps(frame, ensure_ascii=False).encode() + b"\n")

    # ------------------------------------------------------------------ the bridge

    def bridge_tools(self) -> list[dict[str, Any]]:
        """The worker's roost tools, and roost's permission tool when prompts are asked."""
        return super().bridge_tools() + ([permission.TOOL] if self.ask_permissions else [])

    async def answer_other(self, op: Any, frame: dict[str, Any]) -> dict[str, Any]:
        """``permission``: Claude Code asks, through roost's permission tool."""
        if op == "permission" and self.ask_permissions:
            return await self.ask_permission(frame)
        return await super().answer_other(op, frame)

    async def ask_permission(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Claude Code asks to run a tool: a dialog for the user (``allow``/``deny``),
        whose answer is the permission tool's result. The answer is acked at once: it is
        in no transcript, and run again as a prompt it would be the user's word out of place."""
        assert self.services is not None
        tool_name, tool_input = str(frame.get("tool_name") or "a tool"), frame.get("input")
        answer = await self.services.dialog(permission.question(tool_name, tool_input), PERMISSION_OPTIONS)
        self.services.delivered(answer)
        return {"text": json.dumps(permission.decision((answer.text or answer.content).strip(), tool_input))}


    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        assert self.job is not None and self.services is not None
        if self.writes_elsewhere(data):
            return None
        self.scan()
        if not wants_items(event, data):
            return None
        if self.running:
            # A tool boundary (or the stop): whatever waits goes in now.
            steered = self.services.take_steer()
            for item in steered:
                if item.kind == "reply":
                    await self.write_prompt(item.content, item)  # the user's own words
                else:
                    self.outbox.append(item)
        items, self.outbox = self.outbox, []
        self.pending.update({item.seq: item for item in items})
        output = hook_output(event, items)
        if output is not None:
            self.hand_over(items)
        return output

    # ------------------------------------------------------------------ runs

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None and self.job is not None
        if self.process is None or self.gone:
            await self.start_claude()
        items = self.drop_known(items)
        if not items:
            return RunOutcome("idle")
        results_before = self.results
        self.running = True
        try:
            async with self.pumping():
                await self.put(items)
                while True:
                    await self.until(lambda: self.written <= self.completed or self.gone or self.misplaced)
                    if self.misplaced:
                        return RunOutcome(
                            "failed",
                            error=f"Claude Code writes this session to {self.misplaced}, not to the job's {self.job.session} "
                            "(does the daemon see another HOME or CLAUDE_CONFIG_DIR than Claude Code?)",
                        )
                    if self.gone:
                        held, self.outbox = self.outbox, []
                        return await self.died_in_run(*held)
                    # Idle now: what arrived since the last boundary starts another turn.
                    more = self.services.take_steer()
                    if not more and not self.outbox:
                        break
                    await self.put(more)
                await self.wait_for_pending(lambda: self.gone)
        finally:
            self.running = False
        return self.outcome(items, results_before)

    async def put(self, items: list[Item]) -> None:
        """Start a turn with ``items``: replies as the user's messages, agent items as the
        context of the first prompt (roost's wake-up prompt when there is no reply)."""
        replies = [item for item in items if item.kind == "reply"]
        self.outbox.extend(item for item in items if item.kind != "reply")
        for reply in replies:
            await self.write_prompt(reply.content, reply)
        if not replies and self.outbox:
            await self.write_prompt(WAKE_PROMPT)

    def outcome(self, items: list[Item], results_before: int) -> RunOutcome:
        """The run's outcome, from its last ``result`` (an API error's status first)."""
        result = self.last_result if self.results > results_before else None
        return result_outcome("claude", items, result, ("api_error_status", "subtype"))
