"""The OpenCode host: a background job runs OpenCode's server (``--host opencode``).

The worker starts ``opencode serve --hostname 127.0.0.1 --port P`` (a free port, and a
password of its own in ``OPENCODE_SERVER_PASSWORD``: nothing else on the machine may
drive it), with ``OPENCODE_CONFIG_CONTENT`` adding to the user's own config the MCP
server ``roost`` (``roost mcp`` in job mode: the tools run through this worker over a
private bridge socket) and roost's plugin (``roost_plugin.js``), and with a config home of
its own that shows the user's (:mod:`roost_plugins.opencode.confighome`: OpenCode would
otherwise wait for an npm install into the user's config folder). It makes one OpenCode
session (``POST /session``) and names it in the job's session file
(:mod:`roost_plugins.opencode.transcript`); a restarted worker starts the server again and
goes on in that session.

What goes in, and how:

- a run's items open a turn as one user message (``POST /session/ID/prompt_async``): a
  text part per item, its queue seq (and, for an agent item, who sent it) in the part's
  ``metadata.roost``, which OpenCode keeps in its store and never shows the model. Agent
  items come framed, as for every host.
- agent items that arrive during a turn are handed over **mid-turn**: after each tool call
  the plugin asks the worker, and appends them (after roost's marker line) to that tool's
  result, which the next model call reads. A user reply that arrives mid-turn waits for the
  end of the turn and opens the next one.
- the turn is over when the event stream (``GET /event``) says the session is idle; what
  arrived since then opens another turn at once.

An item counts as delivered once OpenCode's store shows it. Usage is the session row's
token and cost totals. A permission OpenCode asks for is a roost dialog the user answers
(``roost answer JOB allow|deny``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from roost_core.dialogs import PERMISSION_OPTIONS, choice_of
from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.hosts.bridged import BridgedHost
from roost_core.hosts.handover import BRIDGE_ENV, marker
from roost_core.queue import Item
from roost_plugins.opencode import (
    PLUGIN_BRIDGE_ENV,
    PLUGIN_FILE,
    SERVER_NAME,
    TESTED_VERSIONS,
    OpenCodeError,
    opencode_binary,
)
from roost_plugins.opencode.confighome import (
    USER_CONFIG_HOME_ENV,
    job_config_home,
    user_config_home,
)
from roost_plugins.opencode.http import HttpError, Server
from roost_plugins.opencode.transcript import (
    SessionFile,
    messages_of,
    seqs_of,
    session_stored,
    store_path,
    usage_of,
)

log = logging.getLogger("roost.opencode")

#: How long ``opencode serve`` may take to say it listens.
START_TIMEOUT = 120.0
#: What a job's session may not do: ask the user a question or switch to plan mode
#: (nobody is there to answer); ``opencode run`` denies the same.
JOB_PERMISSIONS = [{"permission": name, "action": "deny", "pattern": "*"} for name in ("question", "plan_enter", "plan_exit")]
#: The fields of an agent item kept in its part's ``metadata.roost`` (for ``roost log``).
ITEM_FIELDS = (("from", "sender"), ("fromName", "sender_name"), ("relation", "relation"), ("id", "msg_id"), ("replyTo", "reply_to"))


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on now (``opencode serve --port 0`` means 4096)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def item_part(item: Item, first: bool) -> dict[str, Any]:
    """The text part that carries ``item`` into OpenCode. OpenCode joins a message's text
    parts with nothing between them, so each after the first starts on a new paragraph."""
    meta: dict[str, Any] = {"seq": item.seq, "kind": item.kind}
    if item.kind != "reply":
        meta.update({key: getattr(item, field) for key, field in ITEM_FIELDS if getattr(item, field)})
    return {"type": "text", "text": item.content if first else "\n\n" + item.content, "metadata": {"roost": meta}}


def job_config(bridge: str, model: str | None) -> dict[str, Any]:
    """What a job adds to the user's OpenCode config (``OPENCODE_CONFIG_CONTENT``)."""
    config: dict[str, Any] = {
        "mcp": {SERVER_NAME: {"type": "local", "command": [sys.executable, "-m", "roost_core.mcp"], "environment": {BRIDGE_ENV: bridge}}},
        "plugin": [PLUGIN_FILE.as_uri()],
    }
    if model and "/" in model:  # OpenCode's "provider/model"
        config["model"] = model
    return config


class OpenCodeHost(BridgedHost):
    agent = "opencode"
    tested_versions = TESTED_VERSIONS
    #: ``opencode serve`` does not end when its stdin closes: SIGTERM follows soon.
    stop_grace = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.file: SessionFile | None = None
        self.server: Server | None = None
        self.gone = True
        self.running = False
        self.seqs: set[int] = set()
        #: Events of this session seen on the stream: turns ended, errors.
        self.idles = 0
        self.errors: list[str] = []
        #: What the user denied in this run (permission dialogs answered ``deny``).
        self.denied: list[str] = []
        #: User replies taken at a tool boundary: they open the next turn.
        self.later: list[Item] = []
        #: Items handed over mid-turn, by tool call, until the store shows them.
        self.handed: dict[str, list[Item]] = {}

    # ------------------------------------------------------------------ lifecycle

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.take_lock(job)
        self.file = SessionFile(job.session)
        self.scan()  # a resumed session has spent already, and holds what it holds
        await self.open_bridge()
        return set(self.seqs)

    async def start_opencode(self) -> None:
        assert self.job is not None and self.bridge is not None and self.file is not None
        await self.stop_opencode()
        port, password = free_port(), secrets.token_urlsafe(24)
        env = {
            "OPENCODE_SERVER_PASSWORD": password,
            "OPENCODE_CONFIG_CONTENT": json.dumps(job_config(str(self.bridge.path), self.job.model)),
            PLUGIN_BRIDGE_ENV: str(self.bridge.path),
        }
        assert self.bridge_dir is not None
        user_home = user_config_home(os.environ)
        home = job_config_home(self.bridge_dir / "config", user_home)
        if home is not None:
            env.update({"XDG_CONFIG_HOME": str(home), USER_CONFIG_HOME_ENV: str(user_home)})
        argv = [opencode_binary(), "serve", "--hostname", "127.0.0.1", "--port", str(port)]
        process = await self.start_process(argv, env)
        self.gone = False
        with anyio.move_on_after(START_TIMEOUT):
            if await self.until_listening(process):
                self.server = Server(port, password)
                return
        await self.stop_opencode()
        raise OpenCodeError(f"opencode serve did not start listening on 127.0.0.1:{port}")

    async def until_listening(self, process: Any) -> bool:
        """Read the server's output until it says it listens (False: it ended first)."""
        buffer = b""
        while b"listening on" not in buffer:
            try:
                buffer = buffer[-4096:] + await process.stdout.receive(65536)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                return False
        return True

    async def stop_opencode(self) -> None:
        self.server = None
        if await self.end_process():
            self.gone = True

    async def close(self) -> None:
        await self.stop_opencode()
        await self.close_bridge()

    async def ensure_session(self) -> str:
        """The job's OpenCode session, made on the first run."""
        assert self.file is not None and self.server is not None
        if not self.file.session_id:
            made = await self.server.call("POST", "/session", {"permission": JOB_PERMISSIONS})
            db = str(store_path())
            if not session_stored(db, str(made["id"])):
                # roost reads what OpenCode took from its store: without it nothing could
                # be acknowledged (and everything would be handed over again).
                raise OpenCodeError(f"OpenCode keeps its sessions elsewhere than {db} (does the daemon see another HOME or XDG_DATA_HOME than OpenCode?)")
            self.file.start(str(made["id"]), db)
        return self.file.session_id

    # ------------------------------------------------------------------ the store

    def messages(self) -> list[dict[str, Any]]:
        assert self.file is not None
        return messages_of(self.file.db, self.file.session_id) if self.file.session_id else []

    def scan(self) -> None:
        """Settle the items OpenCode's store shows, copy its finished messages into the
        session file, tell the session's usage."""
        assert self.file is not None
        if not self.file.session_id:
            return
        messages = self.messages()
        self.seqs = seqs_of(messages, self.file.handovers)
        self.settle_found()
        self.tell_seen()
        # Between runs, or once it died, no OpenCode of this job writes the session.
        self.file.copy_finished(messages, writer_gone=self.gone or self.process is None)
        self.tell_usage(*usage_of(self.file.db, self.file.session_id))

    def known_seqs(self) -> set[int]:
        return self.seqs

    # ------------------------------------------------------------------ the bridge

    async def answer_hook_frame(self, frame: dict[str, Any]) -> dict[str, Any]:
        """A ``hook`` call from roost's plugin: ``{"text": ...}``, what goes into the tool's
        result (:meth:`after_tool`)."""
        return {"text": self.after_tool(dict(frame.get("input") or {}))}

    def after_tool(self, data: dict[str, Any]) -> str | None:
        """A tool call of the session ended (the plugin's ``tool.execute.after``): the agent
        items that wait go into its result, after roost's marker line; user replies wait
        for the end of the turn."""
        assert self.services is not None and self.file is not None
        call_id = str(data.get("callID") or "")
        if not self.running or not call_id or data.get("sessionID") != self.file.session_id:
            return None
        items: list[Item] = []
        for item in self.services.take_steer():
            (self.later if item.kind == "reply" else items).append(item)
        if not items:
            return None
        seqs = [item.seq for item in items]
        self.file.handover(call_id, seqs)  # on disk before OpenCode has them
        self.handed[call_id] = items
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        return marker(seqs) + "\n" + "\n\n".join(item.content for item in items)

    # ------------------------------------------------------------------ runs

    @contextlib.asynccontextmanager
    async def pumping(self) -> AsyncIterator[None]:
        """For the length of a run: the server's event stream (connected before this
        yields), its output (its end says it exited) and the bridge."""
        assert self.bridge is not None
        connected = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.read_events, connected)
            tg.start_soon(self.watch_process, self.process)
            tg.start_soon(self.bridge.serve)
            await self.until(lambda: connected.is_set() or self.gone)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def watch_process(self, process: Any) -> None:
        while True:
            try:
                await process.stdout.receive(65536)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                break
        if process is self.process:
            self.gone = True
        self.notify()

    async def read_events(self, connected: anyio.Event) -> None:
        assert self.server is not None and self.file is not None
        try:
            async for event in self.server.events():
                kind = event.get("type")
                props = event.get("properties") or {}
                if kind == "server.connected":
                    connected.set()
                elif props.get("sessionID") == self.file.session_id or (props.get("part") or {}).get("sessionID") == self.file.session_id:
                    await self.on_event(str(kind), props)
                else:
                    continue
                self.notify()
        except (OSError, HttpError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            log.warning("opencode's event stream ended: %s", exc)
        self.gone = True
        self.notify()

    async def on_event(self, kind: str, props: dict[str, Any]) -> None:
        if kind == "session.idle":
            self.idles += 1
        elif kind == "session.error":
            error = props.get("error") or {}
            self.errors.append(str((error.get("data") or {}).get("message") or error.get("name") or error))
        elif kind == "permission.asked":
            await self.ask_permission(props)
        elif kind == "message.part.updated" and (props.get("part") or {}).get("type") == "step-start":
            # Each model call of the session is a step of its own: what was handed over
            # before it began is in its request (issue 42.4's seen).
            self.model_answered()
            self.scan()
        elif kind == "message.part.updated" and (props.get("part") or {}).get("type") in ("text", "tool"):
            self.scan()

    async def ask_permission(self, props: dict[str, Any]) -> None:
        """OpenCode asks to run a tool its ``permission`` config marks ``ask``: a dialog for
        the user (``allow``/``deny``, ``roost answer``), whose answer goes back as
        OpenCode's reply (``once`` or ``reject``). The answer is acked at once: it is in no
        transcript, and run again as a prompt it would be the user's word out of place.
        The event stream waits meanwhile (OpenCode waits too); a run that ends (OpenCode
        died) closes the dialog."""
        assert self.server is not None and self.services is not None
        asked = str(props.get("permission") or props.get("type") or "a tool")
        command = (props.get("metadata") or {}).get("command")
        if isinstance(command, str) and command:
            # The command as it will run: its patterns are its parts, split at ; and &&.
            what = command
        else:
            patterns = props.get("patterns") or props.get("pattern") or []
            what = ", ".join(str(p) for p in (patterns if isinstance(patterns, list) else [patterns]))
        question = f"OpenCode asks to use {asked}" + (f": {what[:1000]}" if what else "")
        answer = await self.services.dialog(question, PERMISSION_OPTIONS)
        self.services.delivered(answer)
        allowed = choice_of((answer.text or answer.content).strip(), PERMISSION_OPTIONS) == "allow"
        if not allowed:
            self.denied.append(f"{asked}" + (f": {what[:200]}" if what else ""))
        with contextlib.suppress(HttpError, OSError):
            await self.server.call("POST", f"/permission/{props.get('id')}/reply", {"reply": "once" if allowed else "reject"})

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None
        if self.process is None or self.gone or self.server is None:
            await self.start_opencode()
        session_id = await self.ensure_session()
        items = self.drop_known(items)
        if not items:
            return RunOutcome("idle")
        self.errors.clear()
        self.denied.clear()
        self.running = True
        try:
            async with self.pumping():
                turn: list[Item] = items
                while turn:
                    idles = self.idles
                    await self.prompt(session_id, turn)
                    await self.until(lambda idles=idles: self.idles > idles or self.gone)
                    if self.gone:
                        held, self.later = self.later, []
                        return await self.died_in_run(*held)
                    self.scan()
                    # Idle now: what arrived since, and what a tool result did not carry
                    # (a call that failed stores no result), opens the next turn.
                    turn = [*self.later, *self.unconfirmed(), *self.services.take_steer()]
                    self.later = []
                await self.wait_for_pending(lambda: self.gone)
        finally:
            self.running = False
        return self.outcome(items)

    def unconfirmed(self) -> list[Item]:
        lost = [item for items in self.handed.values() for item in items if item.seq in self.pending]
        self.handed.clear()
        for item in lost:
            self.pending.pop(item.seq, None)
        return lost

    async def prompt(self, session_id: str, items: list[Item]) -> None:
        assert self.server is not None
        self.pending.update({item.seq: item for item in items})
        self.hand_over(items)
        parts = [item_part(item, index == 0) for index, item in enumerate(items)]
        await self.server.call("POST", f"/session/{session_id}/prompt_async", {"parts": parts})

    def outcome(self, items: list[Item]) -> RunOutcome:
        last = next((m for m in reversed(self.messages()) if m["info"].get("role") == "assistant"), None)
        text = "".join(str(p.get("text") or "") for p in (last or {}).get("parts", []) if p.get("type") == "text")
        error = (last or {}).get("info", {}).get("error")
        if self.errors or error:
            message = self.errors[-1] if self.errors else str((error.get("data") or {}).get("message") or error.get("name") or error)
            return RunOutcome("failed", text, error=message)
        if last is None:
            return RunOutcome("failed", error="opencode ended the turn without an answer")
        state = "done" if any(item.kind == "reply" for item in items) else "idle"
        if not text.strip() and self.denied:
            # OpenCode ends the turn with no words when a permission is refused: say so.
            text = f"the user denied OpenCode's request to use {self.denied[-1]}; the turn ended there"
        return RunOutcome(state, text)
