"""The Qwen Code host: a background job runs headless Qwen Code (``--host qwen``).

The worker runs ``qwen -p --input-format stream-json --output-format stream-json`` on the
job's session: ``--session-id ID`` the first time, ``--resume ID`` after that (the job's
session file is Qwen Code's own, ``<qwen home>/projects/<cwd>/chats/<ID>.jsonl``, so a user's
``qwen --resume ID`` holds the same session). One Qwen Code process serves the job's runs
for as long as it lives: each prompt is one stream-json user message, answered by one
``result``.

What goes in, and how (docs/hosts.md, "Qwen Code as a background host"):

- the task, user replies, and agent items waiting at the end of a turn: a prompt whose
  first line is the marker ``[roost seq ...]`` naming the seqs it carries, then their
  texts (agent items framed by the daemon, with their "not from the user" line);
- agent items that arrive mid-turn: the context of the next ``PostToolUse`` hook, which
  Qwen Code appends to the tool's output (and writes to the session file with it). Qwen
  Code does not write a blocked ``Stop``'s reason to the session file, so a turn's end is
  not blocked: what waits then is the next prompt, written at once.

The hook (``python -m roost_plugins.qwen hook EVENT``) and the job's MCP server (``roost
mcp``, whose roost tools run through this worker) reach the host over the private bridge
socket the Claude Code host uses (:mod:`roost_core.hosts.bridge`); the job token never
leaves the worker. The hook and Qwen Code's side settings (no memory extraction, no
follow-up suggestions: model calls on nobody's behalf) come from a settings file of the
job's, given as Qwen Code's system defaults (``QWEN_CODE_SYSTEM_DEFAULTS_PATH``); hooks of
every settings scope run, so a user's own hooks keep running.

An item counts as delivered once the session file shows its seq.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.hosts.bridged import StreamingHost, response_id, result_outcome
from roost_core.hosts.handover import BRIDGE_ENV, hook_output, items_text
from roost_core.queue import Item
from roost_plugins.qwen import (
    ARGS_ENV,
    SERVER_NAME,
    TESTED_VERSIONS,
    QwenError,
    qwen_binary,
    session_id_of,
)
from roost_plugins.qwen.transcript import SessionSeqs

#: Qwen Code ends cleanly when its stdin closes.
STOP_GRACE = 5.0
#: After a run settles, how long to wait for its items to show in the session file.
SETTLE_TIMEOUT = 5.0
#: The variable Qwen Code reads its system defaults (the lowest settings scope) from.
DEFAULTS_ENV = "QWEN_CODE_SYSTEM_DEFAULTS_PATH"


def hook_command(event: str) -> str:
    """The shell command a job's Qwen Code runs for ``event``: this Python's roost."""
    return shlex.join([sys.executable, "-m", "roost_plugins.qwen", "hook", event])


def job_settings() -> dict[str, Any]:
    """A job's Qwen Code settings (its system defaults): the mid-turn hook, and none of
    Qwen Code's own extra model calls."""
    return {
        "hooks": {"PostToolUse": [{"matcher": ".*", "hooks": [{"type": "command", "command": hook_command("PostToolUse")}]}]},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "ui": {"enableFollowupSuggestions": False},
    }


def mcp_config(bridge: str) -> dict[str, Any]:
    """``--mcp-config``: ``roost mcp`` in job mode (its tools run through the worker),
    trusted (roost's own reach rules and limits govern its tools)."""
    server = {"command": sys.executable, "args": ["-m", "roost_core.mcp"], "env": {BRIDGE_ENV: bridge}, "trust": True}
    return {"mcpServers": {SERVER_NAME: server}}


def prompt_text(items: list[Item]) -> str:
    """One prompt carrying ``items``: the marker line, then their texts."""
    return items_text(items)


class QwenHost(StreamingHost):
    agent = "qwen"
    tested_versions = TESTED_VERSIONS
    settle_timeout = SETTLE_TIMEOUT
    stop_grace = STOP_GRACE

    def __init__(self) -> None:
        super().__init__()
        self.session_id = ""
        self.transcript: SessionSeqs | None = None
        self.running = False
        #: Items that wait for the next prompt (replies, and what a stop left behind).
        self.later: list[Item] = []
        #: Prompts written, and results read, in this process.
        self.prompts = 0
        self.results = 0
        self.last_result: dict[str, Any] | None = None
        #: The session's total tokens as the last ``result`` gave them (it counts the
        #: whole session, earlier processes' runs too).
        self.result_tokens = 0

    # ------------------------------------------------------------------ lifecycle

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.session_id = session_id_of(job.session)
        self.take_lock(job)
        self.transcript = SessionSeqs(job.session)
        self.transcript.scan()
        self.report_usage()  # a resumed session has spent already
        await self.open_bridge()
        assert self.bridge_dir is not None
        (self.bridge_dir / "settings.json").write_text(json.dumps(job_settings()))
        return set(self.transcript.seqs)

    def argv(self) -> list[str]:
        assert self.job is not None and self.bridge is not None
        argv = [qwen_binary(), "-p", "--input-format", "stream-json", "--output-format", "stream-json"]
        argv += ["--resume", self.session_id] if Path(self.job.session).exists() else ["--session-id", self.session_id]
        argv += ["--mcp-config", json.dumps(mcp_config(str(self.bridge.path)))]
        model = self.job.model
        if model and "/" not in model:  # "provider/id" is pi's form
            argv += ["--model", model]
        argv += shlex.split(os.environ.get(ARGS_ENV, ""))
        return argv

    async def start_qwen(self) -> None:
        assert self.bridge is not None and self.bridge_dir is not None
        await self.stop_agent()
        env = {BRIDGE_ENV: str(self.bridge.path), DEFAULTS_ENV: str(self.bridge_dir / "settings.json")}
        await self.start_process(self.argv(), env)
        self.gone = False
        self.prompts = self.results = 0

    # ------------------------------------------------------------------ plumbing

    def on_event(self, event: dict[str, Any]) -> None:
        """An ``assistant`` event is a model output (:meth:`model_answered`, by its response id);
        a ``result`` ends a prompt. Qwen Code's other events are not read."""
        if event.get("type") == "assistant":
            self.model_answered(response_id(event))
            self.scan()
            return
        if event.get("type") != "result":
            return
        self.last_result = event
        self.results += 1
        usage = event.get("usage")
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        if isinstance(total, int) and not isinstance(total, bool):
            self.result_tokens = max(self.result_tokens, total)
        self.scan()
        self.notify()

    def scan(self) -> None:
        """Settle the items the session file shows; tell the session's usage."""
        assert self.transcript is not None
        self.transcript.scan()
        self.settle_found()
        self.tell_seen()
        self.report_usage()

    def known_seqs(self) -> set[int]:
        assert self.transcript is not None
        return self.transcript.seqs

    def report_usage(self) -> None:
        """The session's tokens: every answer's ``usageMetadata`` in the session file, or
        the last ``result``'s session total when larger (both only grow). Qwen Code puts
        no price on its calls: the cost stays 0."""
        assert self.transcript is not None
        self.tell_usage(max(self.transcript.tokens, self.result_tokens), 0.0)

    async def write_prompt(self, items: list[Item]) -> None:
        if self.process is None or self.gone:
            raise QwenError("qwen exited")
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        frame = {"type": "user", "message": {"role": "user", "content": prompt_text(items)}}
        self.prompts += 1
        await self.process.stdin.send(json.dumps(frame, ensure_ascii=False).encode() + b"\n")

    # ------------------------------------------------------------------ the bridge

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """``PostToolUse`` during a run hands over the agent items waiting (a tool
        boundary); replies wait for the next prompt, where they are the user's words."""
        assert self.job is not None and self.services is not None
        if self.writes_elsewhere(data):
            return None
        self.scan()
        if event != "PostToolUse" or not self.running:
            return None
        items: list[Item] = []
        for item in self.services.take_steer():
            (self.later if item.kind == "reply" else items).append(item)
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        return hook_output(event, items)

    # ------------------------------------------------------------------ runs

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None and self.job is not None
        if self.process is None or self.gone:
            await self.start_qwen()
        items = self.drop_known([*self.later, *items])
        self.later = []
        if not items:
            return RunOutcome("idle")
        results_before = self.results
        self.running = True
        try:
            async with self.pumping():
                await self.write_prompt(items)
                while True:
                    await self.until(lambda: self.results >= self.prompts or self.gone or self.misplaced)
                    if self.misplaced:
                        return RunOutcome(
                            "failed",
                            error=f"Qwen Code writes this session to {self.misplaced}, not to the job's {self.job.session} "
                            "(does the daemon see another HOME or QWEN_HOME than Qwen Code?)",
                        )
                    if self.gone:
                        return await self.died_in_run()
                    # The turn ended: what arrived since (or waited for a prompt) is the next one.
                    more = [*self.later, *self.services.take_steer()]
                    self.later = []
                    if not more:
                        break
                    await self.write_prompt(more)
                await self.wait_for_pending(lambda: self.gone)
        finally:
            self.running = False
        return self.outcome(items, results_before)

    def outcome(self, items: list[Item], results_before: int) -> RunOutcome:
        """The run's outcome, from its last ``result``."""
        result = self.last_result if self.results > results_before else None
        return result_outcome("qwen", items, result, ("subtype",))
