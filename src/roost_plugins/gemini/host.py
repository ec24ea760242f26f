"""The Gemini CLI host: a background job runs headless Gemini CLI (``--host gemini``).

Each run is one process, ``gemini -p TEXT --output-format stream-json``, on the job's
Gemini session: ``--session-id ID`` the first time, ``--resume ID`` after (the session is
Gemini CLI's own, under its folder; roost's session file names it, see
:mod:`roost_plugins.gemini.transcript`). The process exits when its turn is over.

What goes in, and how (every text starts with the marker line ``[roost seq ...]``):

- the items that start a run (the task, a user reply, agent items for an idle session):
  the ``-p`` prompt, the user's words first;
- agent items that arrive while it runs: the next ``AfterTool`` hook hands them over as
  context after that tool's result (mid-turn), else the ``AfterAgent`` hook at the end of
  the turn denies the stop with them as its reason, a new prompt in the same run; what
  arrives after that (Gemini CLI allows one denial in a row) starts the next ``--resume``
  process of the run;
- a user reply that arrives while it runs: the prompt of the next ``--resume`` process,
  right after this one ends (it is the user's words: never a hook's context, beside agent
  items and their notice that they are not from the user).

The hooks (``roost gemini hook EVENT --bridge PATH``) and the job's MCP server
(``roost mcp`` in job mode, whose roost tools run through this worker) reach the host over
a private bridge socket (:class:`roost_core.hosts.bridge.BridgeServer`: only the Gemini
CLI process and its descendants are served). The MCP server is trusted: Gemini CLI leaves
an untrusted server's tools out of a headless run.

Gemini CLI takes its MCP servers and hooks from settings files only (no flag), and reads
the system layers (``GEMINI_CLI_SYSTEM_SETTINGS_PATH``) only from a folder no other user
can write (never under ``/tmp``). So a job runs it with a home of its own
(``GEMINI_CLI_HOME``, :func:`roost_plugins.gemini.transcript.job_home`, beside roost's
session file): its ``.gemini`` links every entry of the user's own ``~/.gemini`` (auth,
extensions, memory, ...) except ``settings.json``, which is the user's with roost's server
and hooks put in (:func:`job_settings`), written again before each run, and the folders
where Gemini CLI keeps sessions (``tmp``, ``history``, ``projects.json``), which are the
job's.

An item counts as delivered once Gemini CLI's session files show its seq. A run's final
text is the last assistant message of its last process.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio

from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices, until_exited
from roost_core.hosts.bridged import BridgedHost, json_events
from roost_core.hosts.handover import BRIDGE_ENV
from roost_core.queue import Item
from roost_core.settingsfile import SettingsFileError, read_object, write_object
from roost_plugins.gemini import (
    JOB_EVENTS,
    SERVER_NAME,
    TESTED_VERSIONS,
    GeminiError,
    gemini_binary,
    gemini_dir,
)
from roost_plugins.gemini.hook import hook_output, items_text, wants_items
from roost_plugins.gemini.install import without_roost_hooks
from roost_plugins.gemini.transcript import GeminiSession, job_home, read_header, write_header

#: Where Gemini CLI finds its ``.gemini`` folder.
HOME_ENV = "GEMINI_CLI_HOME"
#: What of the user's ``~/.gemini`` a job's home does not link: its own settings, and
#: where Gemini CLI keeps sessions and its project list.
OWN_ENTRIES = frozenset({"settings.json", "tmp", "history", "projects.json"})
#: How long a finished ``gemini -p`` has to exit once its output ended.
EXIT_GRACE = 10.0


def hook_command(event: str, bridge: Path) -> str:
    """The shell command Gemini CLI runs for ``event`` in a job: this Python's roost."""
    return shlex.join([sys.executable, "-m", "roost_plugins.gemini", "hook", event, "--bridge", str(bridge)])


def job_settings(user: dict[str, Any], bridge: Path) -> dict[str, Any]:
    """A job's settings: the user's ``user`` with roost's MCP server (job mode, trusted)
    and the job's hooks put in (a ``roost gemini install``'s own hooks taken out: the
    job's answer them)."""
    theirs = user.get("hooks")
    hooks = without_roost_hooks(theirs if isinstance(theirs, dict) else {})
    for event in JOB_EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event, bridge)}]}
        if event == "AfterTool":
            group = {"matcher": ".*", **group}
        groups = hooks.get(event)
        hooks[event] = [*(groups if isinstance(groups, list) else []), group]
    listed = user.get("mcpServers")
    servers: dict[str, Any] = listed if isinstance(listed, dict) else {}
    server = {"command": sys.executable, "args": ["-m", "roost_core.mcp"], "env": {BRIDGE_ENV: str(bridge)}, "trust": True}
    return {**user, "mcpServers": {**servers, SERVER_NAME: server}, "hooks": hooks}


def prepare_home(home: Path, user_dir: Path, bridge: Path) -> None:
    """Make ``home`` a job's Gemini CLI home (see the module): link the user's entries of
    ``user_dir`` it does not have yet, write its settings."""
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        entries = list(user_dir.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        link = folder / entry.name
        if entry.name not in OWN_ENTRIES and not link.exists() and not link.is_symlink():
            link.symlink_to(entry)
    try:
        user = read_object(user_dir / "settings.json")
    except SettingsFileError as exc:
        raise GeminiError(f"cannot read the user's Gemini settings: {exc}") from exc
    write_object(folder / "settings.json", job_settings(user, bridge))


def users_words_first(items: list[Item]) -> list[Item]:
    """``items`` as one prompt holds them: the user's words (the task, replies) first, then
    the agent items, each followed by its own notice that it is not from the user."""
    return [item for item in items if not item.is_agent_item] + [item for item in items if item.is_agent_item]


class GeminiHost(BridgedHost):
    """A :class:`BridgedHost` that runs one ``gemini -p`` process a run (see the module)."""

    agent = "gemini"
    tested_versions = TESTED_VERSIONS

    def __init__(self) -> None:
        super().__init__()
        self.session_id = ""
        self.home = Path()
        self.session: GeminiSession | None = None
        self.running = False
        #: Agent items taken from the queue that wait for a hook (or the next process).
        self.outbox: list[Item] = []
        #: User replies that came during a run: the next process's prompt.
        self.held: list[Item] = []
        #: The stream-json events of the current process.
        self.texts: list[str] = []
        self.result: dict[str, Any] | None = None
        self.errors: list[str] = []
        #: Set when a hook names a file that is not this session's (another Gemini folder).
        self.misplaced: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.take_lock(job)
        header = read_header(job.session)
        if header is None:
            self.session_id = str(uuid.uuid4())
            write_header(job.session, self.session_id, job.cwd)
        else:
            self.session_id = str(header["sessionId"])
        self.home = job_home(job.session)
        self.session = GeminiSession(self.session_id, self.home / ".gemini")
        self.session.scan()
        self.report_usage()  # a resumed session has spent already
        await self.open_bridge()
        return set(self.session.seqs)

    def argv(self, prompt: str) -> list[str]:
        assert self.job is not None and self.session is not None
        argv = [gemini_binary()]
        # A session Gemini CLI has written is resumed; a fresh one gets roost's id.
        argv += ["--resume", self.session_id] if self.session.files else ["--session-id", self.session_id]
        argv += ["-p", prompt, "--output-format", "stream-json"]
        model = self.job.model
        if model and "/" not in model:  # "provider/id" is pi's form, not a Gemini model
            argv += ["--model", model]
        argv += shlex.split(os.environ.get("ROOST_GEMINI_ARGS", ""))
        return argv

    async def close(self) -> None:
        await self.end_process()
        await self.close_bridge()

    # ------------------------------------------------------------------ the transcript

    def scan(self) -> None:
        assert self.session is not None
        self.session.scan()
        self.settle_found()
        self.tell_seen()
        self.report_usage()

    def known_seqs(self) -> set[int]:
        assert self.session is not None
        return self.session.seqs

    def report_usage(self) -> None:
        """The session's tokens so far: every answer's in its files (Gemini CLI reports
        no cost)."""
        assert self.session is not None
        self.tell_usage(self.session.tokens, 0.0)

    # ------------------------------------------------------------------ the bridge

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """A hook of the running Gemini CLI: hand over what waits (see the module)."""
        assert self.services is not None and self.session is not None
        self.scan()
        path = data.get("transcript_path")
        if isinstance(path, str) and path and os.path.realpath(path) not in {os.path.realpath(p) for p in self.session.files}:
            self.log.error("gemini writes %s, not a file of the job's session %s", path, self.session_id)
            self.misplaced = path
            return None
        if not self.running or not wants_items(event, data):
            return None
        for item in self.services.take_steer():
            (self.outbox if item.is_agent_item else self.held).append(item)
        items, self.outbox = self.outbox, []
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        return hook_output(event, items)

    # ------------------------------------------------------------------ runs

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None and self.job is not None
        items = self.drop_known(items)
        if not items:
            return RunOutcome("idle")
        replied = False
        self.running = True
        try:
            batch = users_words_first(items)
            while batch:
                replied = replied or any(item.kind == "reply" for item in batch)
                failed = await self.one_process(batch)
                if failed is not None:
                    return failed
                # What arrived after the last hook starts the next process on the session.
                batch, self.held, self.outbox = self.next_batch(), [], []
            await self.wait_for_pending(lambda: False)
        finally:
            self.running = False
        text = self.texts[-1] if self.texts else ""
        return RunOutcome("done" if replied else "idle", text)

    def next_batch(self) -> list[Item]:
        """The items of the run's next process: the held user replies, the agent items
        no hook took, and what waits."""
        assert self.services is not None
        return users_words_first([*self.held, *self.outbox, *self.services.take_steer()])

    async def one_process(self, batch: list[Item]) -> RunOutcome | None:
        """Run ``gemini -p`` with ``batch`` as its prompt to its end; a failed outcome,
        or None when it succeeded."""
        assert self.bridge is not None and self.job is not None
        self.pending.update({item.seq: item for item in batch})
        self.hand_over(batch)
        self.texts, self.result, self.errors, self.misplaced = [], None, [], None
        prepare_home(self.home, gemini_dir(), self.bridge.path)
        env = {HOME_ENV: str(self.home), BRIDGE_ENV: str(self.bridge.path)}
        env.setdefault("GEMINI_CLI_NO_RELAUNCH", os.environ.get("GEMINI_CLI_NO_RELAUNCH", "1"))
        process = await self.start_process(self.argv(items_text(batch)), env)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.bridge.serve)
            await self.read_events(process)
            await until_exited(process, EXIT_GRACE)
            tg.cancel_scope.cancel()
        code = process.returncode
        await self.end_process()
        self.scan()
        if self.misplaced:
            return RunOutcome("failed", error=f"Gemini CLI writes this session to {self.misplaced}, not where the daemon looks "
                              "(does the daemon see another HOME or GEMINI_CLI_HOME than Gemini CLI?)")
        status = self.result.get("status") if self.result is not None else None
        if code != 0 or status != "success":
            held, self.held, self.outbox = [*self.held, *self.outbox], [], []
            self.keep_unrecorded(*held)
            error = "; ".join(self.errors) or f"gemini exited {code} without a result"
            return RunOutcome("failed", self.texts[-1] if self.texts else "", error=error)
        return None

    async def read_events(self, process: Any) -> None:
        """Read stream-json events until Gemini CLI's output ends."""
        joining = False
        async for event in json_events(process):
            kind = event.get("type")
            if kind == "message" and event.get("role") == "assistant":
                self.model_answered()  # what was handed over was in the request it answers
                # Deltas of one answer are joined; a new answer starts a new text.
                if joining and event.get("delta") and self.texts:
                    self.texts[-1] += str(event.get("content") or "")
                else:
                    self.texts.append(str(event.get("content") or ""))
                joining = bool(event.get("delta"))
                continue
            joining = False
            if kind == "tool_use":
                # A tool call is a model output too. Gemini CLI runs a response's tool
                # calls once it has streamed them all, so no hook of a sibling call has
                # handed anything over before this event.
                self.model_answered()
            if kind == "result":
                self.result = event
            elif kind == "error" and event.get("severity") != "warning":
                self.errors.append(str(event.get("message") or "error"))
            self.scan()
