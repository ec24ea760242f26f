"""The pi host: a background job runs the real pi coding agent (``pi --mode rpc``).

The worker keeps the job's authenticated daemon connection and its token; pi never sees
either. pi loads the bundled roost extension (``-e``), which finds this host through
``ROOST_PI_BRIDGE``: a Unix socket in a fresh 0700 folder, 0600, that accepts only the pi
process (or its descendants) and only one connection. Over it the extension gets the tool
definitions, runs roost tool calls through the worker, pulls steered items at each tool
boundary (its ``tool_result`` hook, which pi awaits before the next model call) and puts
items into the session (custom messages for agent items, user messages for replies).

Seqs in the session file, so a restarted worker drops resends:
- agent items: ``custom_message`` entries of type ``pi-roost-agent-message`` with
  ``details.seq`` (written by pi at the message's ``message_end``);
- user replies: the user ``message`` entry itself carries ``message.roost = {seq, kind}``
  (the extension adds it in its ``message_end`` handler, so the seq and the reply are one
  line of the file);
- dialog answers: a ``custom`` entry of type ``pi-roost-seq`` with ``data.seq``, appended
  right after pi has the answer.

Before each model request the extension tells which agent items the request holds that
the one before did not (those after its last assistant message): ``seen`` over the
bridge, which the worker tells the daemon (the senders' receipts say ``seen``).

An item counts as delivered (``services.delivered``) only once that line is in the file:
the host tails the session file on every pi event.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from roost_core import locks, platform
from roost_core.agentenv import find_program
from roost_core.dialogs import CONFIRM_OPTIONS, MAX_OPTIONS, choice_of, clean_options
from roost_core.envelope_rules import NO_USER_AUTHORITY
from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.hosts.process import ProcessHost, SessionTail
from roost_core.queue import Item
from roost_core.store import write_all
from roost_core.transcript import inspect_session, now_iso, seqs_in, usage_of

log = logging.getLogger("roost.pi")

SEQ_ENTRY = "pi-roost-seq"
DIALOG_METHODS = ("select", "confirm", "input", "editor")
#: How long pi may take from start to the extension's hello (cold jiti compile included);
#: ``ROOST_PI_START_TIMEOUT`` overrides it.
START_TIMEOUT = 60.0
RPC_TIMEOUT = 60.0
#: After a run settles, how long to wait for its items' lines to reach the session file.
SETTLE_TIMEOUT = 5.0
STOP_GRACE = 5.0
MAX_SOCKET_PATH = 107
#: The pi versions roost's tests ran (tests/pi/package-lock.json).
TESTED_VERSIONS = ("0.73.1",)
YES = re.compile(r"^\s*(y|yes|ok|okay|sure|confirm|confirmed|approve|approved|true|go|go ahead|do it)\b", re.IGNORECASE)


class PiError(RuntimeError):
    """pi could not be started or stopped answering."""


def pi_binary() -> str:
    """The pi program: ``$ROOST_PI_BIN``, else ``pi`` on PATH."""
    return find_program("ROOST_PI_BIN", "pi", "pi", PiError)


def entry_seqs(entry: dict[str, Any]) -> list[int]:
    """The queue seqs one session-file line records."""
    seqs: list[Any] = []  # as the file has them; the ints are kept below
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        tag = message.get("roost") if isinstance(message, dict) else None
        if isinstance(tag, dict):
            seqs.append(tag.get("seq"))
    elif kind == "custom" and entry.get("customType") == SEQ_ENTRY:
        data = entry.get("data")
        seqs.append(data.get("seq") if isinstance(data, dict) else None)
    seqs.extend(seqs_in([entry]))
    return [seq for seq in seqs if isinstance(seq, int) and not isinstance(seq, bool)]


def private_bridge_dir() -> Path:
    """A fresh 0700 folder whose socket path fits in ``sun_path``."""
    folder = Path(tempfile.mkdtemp(prefix="roost-pi-"))
    if len(os.fsencode(str(folder / "bridge.sock"))) <= MAX_SOCKET_PATH:
        return folder
    folder.rmdir()
    base = Path("/tmp") / f"roost-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    if base.stat().st_uid != os.getuid():
        raise PiError(f"{base} belongs to another user")
    os.chmod(base, 0o700)
    return Path(tempfile.mkdtemp(prefix="pi-", dir=base))


def item_json(item: Item) -> dict[str, Any]:
    return {
        "seq": item.seq,
        "kind": item.kind,
        "content": item.content,
        "from": item.sender,
        "fromName": item.sender_name,
        "relation": item.relation,
        "trace": item.trace,
        "hops": item.hops,
        "id": item.msg_id,
        "replyTo": item.reply_to,
        "replyQuote": item.reply_quote,
        "scope": item.scope,
        "delivery": item.delivery,
    }


def prepare_for_pi(session: str, cwd: str) -> None:
    """Make a damaged session file one pi resumes instead of wiping, and say in the job's
    log what pi will skip.

    pi reads a session file line by line and skips what is not JSON, but (0.73) when its
    first entry is not a session header it starts the file afresh: every entry in it,
    acknowledged items included, is gone. And it appends its next entry right after a torn
    last line, so that entry is torn too. So: a session header is put first (a copy of the
    file's own, or a new one), and a torn last line is ended; nothing else changes, no
    line is dropped (pi skips the unreadable ones, as the log says)."""
    report = inspect_session(session)
    for line in report.describe(session):
        log.warning("%s", line)
    if not report.entries and not report.skipped:
        return  # missing or empty: pi makes a new one
    first = report.entries[0] if report.entries else None
    header_first = first is not None and first.get("type") == "session" and isinstance(first.get("id"), str)
    if header_first and not report.torn_tail:
        return
    data = Path(session).read_bytes()
    if report.torn_tail:
        data += b"\n"
    if not header_first:
        header = next((e for e in report.entries if e.get("type") == "session" and isinstance(e.get("id"), str)), None)
        if header is None:
            header = {"type": "session", "version": 3, "id": str(uuid.uuid4()), "timestamp": now_iso(), "cwd": cwd}
        data = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + data
        log.warning("session file %s: pi would start it afresh (no session header first): a copy of its header now leads it", session)
    tmp = f"{session}.{os.getpid()}.repair"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
        platform.sync_file(fd)
    finally:
        os.close(fd)
    os.replace(tmp, session)


class Lines:
    """Newline-delimited JSON over a byte stream; split on ``\\n`` only, as pi's RPC wants."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""
        self.closed = False

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if not line.strip():
                    continue
                try:
                    frame = json.loads(line)
                except ValueError:
                    log.warning("pi: unreadable line %r", line[:200])
                    continue
                if isinstance(frame, dict):
                    yield frame
            try:
                data = await self.stream.receive(256 * 1024)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                self.closed = True
                return
            self.buffer += data

    async def send(self, frame: dict[str, Any]) -> None:
        await self.stream.send(json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")


class PiHost(ProcessHost):
    agent = "pi"
    tested_versions = TESTED_VERSIONS
    settle_timeout = SETTLE_TIMEOUT
    stop_grace = STOP_GRACE  # pi ends cleanly when its stdin closes

    def __init__(self) -> None:
        super().__init__()
        self.rpc: Lines | None = None
        self.stdin: Lines | None = None
        self.bridge: Lines | None = None
        self.bridge_dir: Path | None = None
        self.listener: Any = None
        self.tg: anyio.abc.TaskGroup | None = None
        self._ids = 0
        self._waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self.hello = False
        self.pi_gone = False
        self.streaming = False
        self.agent_starts = 0
        self.agent_ends = 0
        self.last_messages: list[dict[str, Any]] = []
        #: The queue seqs the session file holds (as of the last scan).
        self.in_file: set[int] = set()
        self.tail: SessionTail | None = None
        self.tokens = 0
        self.cost = 0.0

    # ------------------------------------------------------------------ lifecycle

    async def prestart(self, job: JobInfo, services: WorkerServices) -> None:
        """A warm worker (``roost_core.daemon.pool``): start pi now for the job this
        worker will be (its id, session file, cwd, model and thinking level are known
        already), exactly as :meth:`open` would, so that ``open`` finds it up."""
        self.job, self.services = job, services
        self.take_lock(job)
        await self.start_pi()

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        up = self.job is not None and self.process is not None and not self.pi_gone and self.process.returncode is None
        if up and self.job is not None and self.job.session != job.session:
            # A warm pi adopted by a job that continues its session file (a wake).
            await self.switch_session(job, services)
            return set(self.in_file)
        self.job, self.services = job, services
        self.take_lock(job)
        if up:
            log.info("warm start: pi %s was up before this job existed", self.process.pid)
        else:
            await self.start_pi()
        return set(self.in_file)

    async def switch_session(self, job: JobInfo, services: WorkerServices) -> None:
        """Make the warm pi this worker started (for a slot's session file, which pi has
        not written: it writes a file at its first assistant message) continue ``job``'s
        session file: pi's RPC ``switch_session``, which runs the code a cold ``pi
        --session FILE`` with the same flags runs, in the session's cwd. pi loads its
        extensions afresh for the new session: the new roost extension connects to the
        bridge again (the old one lets go at its ``session_shutdown``) and says hello;
        the seqs in the file are read as a cold start reads them."""
        assert self.job is not None and self.process is not None
        slot_session, pid = self.job.session, self.process.pid
        self.release_lock()
        self.lock = None
        self.job, self.services = job, services
        self.take_lock(job)
        prepare_for_pi(job.session, job.cwd)
        self.in_file, self.tail = set(), None
        old, self.bridge, self.hello = self.bridge, None, False
        async with self.pumping() as tg:
            if old is not None:
                tg.start_soon(self.read_bridge, old)  # until the old extension lets go
            response = await self.command({"type": "switch_session", "sessionPath": job.session})
            if not response.get("success") or (response.get("data") or {}).get("cancelled"):
                raise PiError(f"pi did not switch to {job.session}: {response.get('error') or 'cancelled'}")
            with anyio.move_on_after(float(os.environ.get("ROOST_PI_START_TIMEOUT", START_TIMEOUT))):
                await self.until(lambda: self.hello or self.pi_gone)
            if not self.hello:
                raise PiError("pi switched sessions but its roost extension did not say hello again; see the job log")
            state = await self.command({"type": "get_state"})
            session_file = (state.get("data") or {}).get("sessionFile")
            if not session_file or os.path.realpath(session_file) != os.path.realpath(job.session):
                raise PiError(f"pi opened {session_file}, not {job.session}")
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.stream.aclose()
        self.scan()
        log.info("warm start: pi %s (started for %s) switched to this job's session %s", pid, slot_session, job.session)

    async def start_pi(self) -> None:
        """Start (or restart) pi on the job's session file and wait for its extension."""
        assert self.job is not None
        await self.stop_pi()
        # Every start (first, restart, warm): a damaged file must not be wiped by pi.
        prepare_for_pi(self.job.session, self.job.cwd)
        self.bridge_dir = private_bridge_dir()
        sock_path = self.bridge_dir / "bridge.sock"
        old_umask = os.umask(0o077)
        try:
            self.listener = await anyio.create_unix_listener(sock_path)
        finally:
            os.umask(old_umask)
        os.chmod(sock_path, 0o600)
        from roost_core.pi import extension_path

        argv = [pi_binary(), "--mode", "rpc", "--session", self.job.session, "-e", str(extension_path())]
        if self.job.model:
            argv += ["--model", self.job.model]
        if self.job.thinking:
            argv += ["--thinking", self.job.thinking]
        argv += shlex.split(os.environ.get("ROOST_PI_ARGS", ""))
        await self.start_process(argv, {"ROOST_PI_BRIDGE": str(sock_path)})
        self.rpc = Lines(self.process.stdout)
        self.stdin = Lines(self.process.stdin)
        self.pi_gone = False
        self.hello = False
        self.streaming = False
        # A new pi has no run under way: a run the last one died in never ends, and must
        # not keep the next run waiting for its agent_end.
        self.agent_ends = self.agent_starts
        self.scan()
        async with self.pumping():
            # Read at use: a forked worker imported this module under another environment.
            with anyio.move_on_after(float(os.environ.get("ROOST_PI_START_TIMEOUT", START_TIMEOUT))):
                await self.until(lambda: self.hello or self.pi_gone)
            if not self.hello:
                raise PiError("pi did not start (no hello from the roost extension); see the job log")
            log.info("pi is up (its extension said hello)")
            # No set_steering_mode (nor set_model, set_thinking_level): pi saves those into
            # the user's global settings.json, which every later pi of theirs would read.
            # Model and thinking level come as flags; the steering mode is the user's own.
            state = await self.command({"type": "get_state"})
            session_file = (state.get("data") or {}).get("sessionFile")
            if session_file and os.path.realpath(session_file) != os.path.realpath(self.job.session):
                raise PiError(f"pi opened {session_file}, not {self.job.session}")

    async def stop_pi(self) -> None:
        await self.end_process()
        if self.bridge is not None:
            with contextlib.suppress(Exception):
                await self.bridge.stream.aclose()
            self.bridge = None
        if self.listener is not None:
            with contextlib.suppress(Exception):
                await self.listener.aclose()
            self.listener = None
        if self.bridge_dir is not None:
            shutil.rmtree(self.bridge_dir, ignore_errors=True)
            self.bridge_dir = None

    async def close(self) -> None:
        await self.stop_pi()
        self.release_lock()

    # ------------------------------------------------------------------ plumbing

    @contextlib.asynccontextmanager
    async def pumping(self) -> AsyncIterator[anyio.abc.TaskGroup]:
        """Read pi's events and serve the bridge for the length of one call (open/run)."""
        async with anyio.create_task_group() as tg:
            self.tg = tg
            tg.start_soon(self.read_rpc)
            tg.start_soon(self.serve_bridge)
            try:
                yield tg
            finally:
                self.tg = None
                tg.cancel_scope.cancel()

    async def read_rpc(self) -> None:
        assert self.rpc is not None
        async for frame in self.rpc.frames():
            if frame.get("type") == "response":
                waiter = self._waiting.pop(str(frame.get("id")), None)
                if waiter is not None:
                    waiter[1].append(frame)
                    waiter[0].set()
                continue
            self.on_event(frame)
        self.pi_gone = True
        for event, box in self._waiting.values():
            box.append({"success": False, "error": "pi exited"})
            event.set()
        self._waiting.clear()
        self.notify()

    async def serve_bridge(self) -> None:
        assert self.listener is not None
        while self.bridge is None:
            stream = await self.listener.accept()
            if not self.trusted(stream):
                await stream.aclose()
                continue
            self.bridge = Lines(stream)
        await self.read_bridge(self.bridge)

    def trusted(self, stream: Any) -> bool:
        """Only the pi process this host started (or one of its children) may connect."""
        try:
            pid, _uid = platform.peer_credentials(stream.extra(SocketAttribute.raw_socket))
        except anyio.TypedAttributeLookupError:
            return False
        return self.process is not None and pid > 0 and locks.is_descendant(pid, self.process.pid)

    async def read_bridge(self, bridge: Lines) -> None:
        async for frame in bridge.frames():
            if "op" in frame:
                assert self.tg is not None
                self.tg.start_soon(self.answer_bridge, bridge, frame)
            elif "ok" in frame:
                waiter = self._waiting.pop(str(frame.get("id")), None)
                if waiter is not None:
                    waiter[1].append(frame)
                    waiter[0].set()
        self.notify()

    async def answer_bridge(self, bridge: Lines, frame: dict[str, Any]) -> None:
        assert self.services is not None
        op = frame.get("op")
        try:
            if op == "hello":
                # ``job``: what the extension puts in ROOST_JOB for the tools it starts (a
                # warm pi started under a slot's name; after a switch it runs this job).
                # ``notice``: the extension gives a run of agent messages in one model
                # request one notice (roost_core.envelope_rules.one_notice).
                result: dict[str, Any] = {
                    "tools": await self.tool_definitions(),
                    "job": self.job.id if self.job else None,
                    "notice": NO_USER_AUTHORITY,
                }
                self.hello = True
                self.notify()
            elif op == "tool_call":
                ok, text = await self.services.call_tool(str(frame.get("name")), dict(frame.get("args") or {}))
                result = {"ok": ok, "text": text}
            elif op == "seen":
                # pi's next model request holds these items (the extension's ``context``
                # handler): their senders' receipts say seen.
                self.services.seen([seq for seq in frame.get("seqs") or [] if type(seq) is int and seq >= 0])
                result = {}
            elif op == "boundary":
                # A tool boundary: whatever waits goes in before pi's next model call.
                items = self.services.take_steer()
                self.pending.update({item.seq: item for item in items})
                result = {"items": [item_json(item) for item in items]}
            else:
                raise ValueError(f"unknown op {op!r}")
            answer = {"id": frame.get("id"), "ok": True, "result": result}
        except Exception as exc:
            log.exception("bridge op %s failed", op)
            answer = {"id": frame.get("id"), "ok": False, "error": {"code": "internal", "message": str(exc)}}
        with contextlib.suppress(Exception):
            await bridge.send(answer)

    async def tool_definitions(self) -> list[dict[str, Any]]:
        """The daemon's tool definitions, as the worker got them in its hello."""
        services: Any = self.services
        definitions = getattr(services, "tool_definitions", None)
        if callable(definitions):
            return list(definitions())
        tools = getattr(services, "tools", None)
        if isinstance(tools, list):
            return tools
        names = services.tool_names() if services is not None else []
        socket_path = os.environ.get("ROOST_SOCKET")
        if names and socket_path:
            from roost_core.client import Client

            with Client(Path(socket_path), timeout=10) as conn:
                return [tool for tool in conn.call("tools").get("tools", []) if tool.get("name") in names]
        return []

    async def call(self, channel: Lines | None, frame: dict[str, Any], timeout: float = RPC_TIMEOUT) -> dict[str, Any]:
        """A request with an id on ``channel`` (pi's stdin or the bridge); its answer."""
        if channel is None:
            raise PiError("pi is not connected")
        self._ids += 1
        request_id = f"r{self._ids}"
        event = anyio.Event()
        box: list[dict[str, Any]] = []
        self._waiting[request_id] = (event, box)
        await channel.send({"id": request_id, **frame})
        with anyio.fail_after(timeout):
            await event.wait()
        return box[0]

    async def command(self, command: dict[str, Any]) -> dict[str, Any]:
        """An RPC command to pi; its response."""
        if self.process is None or self.pi_gone or self.stdin is None:
            raise PiError("pi exited")
        return await self.call(self.stdin, command)

    async def extension(self, op: str, **args: Any) -> dict[str, Any]:
        """A request to the extension inside pi."""
        answer = await self.call(self.bridge, {"op": op, **args})
        if not answer.get("ok"):
            raise PiError(f"extension {op}: {(answer.get('error') or {}).get('message')}")
        return answer.get("result") or {}

    # ------------------------------------------------------------------ the session file

    def scan(self) -> None:
        """Read what pi appended to the session file; settle items whose line is there."""
        assert self.job is not None
        if self.tail is None or self.tail.path != self.job.session:
            self.tail = SessionTail(self.job.session)
        entries, from_start = self.tail.read()
        if from_start:  # the first read, or pi rewrote the file (migration): count again
            self.tokens, self.cost = 0, 0.0
        for entry in entries:
            self.in_file.update(entry_seqs(entry))
            tokens, cost = usage_of(entry)
            self.tokens, self.cost = self.tokens + tokens, self.cost + cost
        self.settle_found()
        # pi's own usage records (each assistant message's ``usage``), summed.
        self.tell_usage(self.tokens, self.cost)

    def known_seqs(self) -> set[int]:
        return self.in_file

    # ------------------------------------------------------------------ events

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "agent_start":
            self.streaming = True
            self.agent_starts += 1
        elif kind == "agent_end":
            self.streaming = False
            self.agent_ends += 1
            self.last_messages = list(event.get("messages") or [])
        elif kind == "extension_ui_request" and event.get("method") in DIALOG_METHODS:
            assert self.tg is not None
            self.tg.start_soon(self.answer_dialog, event)
        elif kind == "extension_error":
            log.warning("pi extension error: %s", event.get("error"))
        if kind in ("message_end", "agent_end", "tool_execution_end", "turn_end"):
            self.scan()
        self.notify()

    async def answer_dialog(self, request: dict[str, Any]) -> None:
        """A dialog in pi: the user answers through roost (``roost answer``, ``roost
        reply``, the view). A confirm is a choice of yes/no, a select one of its options;
        an input or editor takes any text."""
        assert self.services is not None
        method = request.get("method")
        question = " — ".join(str(part) for part in (request.get("title"), request.get("message")) if part)
        # pi's own options, and the same as roost shows them (one line each, cut).
        raw = [str(option) for option in request.get("options") or []][:MAX_OPTIONS] if method == "select" else []
        options = list(CONFIRM_OPTIONS) if method == "confirm" else clean_options(raw)
        answer = await self.services.dialog(question or "pi asks for input", options)
        text = (answer.text or answer.content).strip()
        response: dict[str, Any] = {"type": "extension_ui_response", "id": request.get("id")}
        if method == "confirm":
            response["confirmed"] = bool(YES.match(text))
        elif method == "select":
            # ``roost answer`` gives an option as listed; a plain ``roost reply`` may give
            # its number or the start of one.
            shown = choice_of(text, options) or next((o for o in options if o.lower().startswith(text.lower())), None)
            chosen = raw[options.index(shown)] if shown is not None else None
            response.update({"value": chosen} if chosen is not None else {"cancelled": True})
        else:
            response["value"] = text
        assert self.stdin is not None
        await self.stdin.send(response)
        # Recorded after pi has the answer: a crash in between repeats the answer, never loses it.
        self.pending[answer.seq] = answer
        await self.extension("mark", seq=answer.seq, kind=answer.kind, dialog=True)

    # ------------------------------------------------------------------ runs

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.services is not None
        if self.process is None or self.pi_gone or self.process.returncode is not None:
            # Never started, or ended (killed) since the last run: start it again.
            await self.start_pi()
        items = self.drop_known(items)
        if not items:
            return RunOutcome("idle")
        replies = [item for item in items if item.kind == "reply"]
        async with self.pumping():
            starts = self.agent_starts
            self.pending.update({item.seq: item for item in items})
            if replies and not replies[0].content.startswith("/"):
                # The task or a user reply: an RPC prompt, its seq tagged onto the message.
                first = replies[0]
                await self.extension("tag", seq=first.seq, kind=first.kind)
                response = await self.command({"type": "prompt", "message": first.content})
                if not response.get("success"):
                    await self.extension("untag")
                    return RunOutcome("failed", error=f"pi refused the prompt: {response.get('error')}")
                rest = [item for item in items if item is not first]
            elif not replies:
                await self.steer_together(items)
                rest = []
            else:
                await self.extension("steer", items=[item_json(items[0])])
                rest = items[1:]
            await self.until(lambda: self.agent_starts > starts or self.pi_gone)
            if rest and not self.pi_gone:
                await self.extension("steer", items=[item_json(item) for item in rest])
            while True:
                await self.until(lambda: (self.agent_ends >= self.agent_starts and not self.streaming) or self.pi_gone)
                if self.pi_gone:
                    return await self.died_in_run()
                # Idle now: what arrived since the last boundary starts the next round.
                more = self.services.take_steer()
                if not more:
                    break
                starts = self.agent_starts
                self.pending.update({item.seq: item for item in more})
                if all(item.kind != "reply" for item in more):
                    await self.steer_together(more)
                    later = []
                else:
                    await self.extension("steer", items=[item_json(more[0])])
                    later = more[1:]
                await self.until(lambda starts=starts: self.agent_starts > starts or self.pi_gone)
                if later and not self.pi_gone:
                    await self.extension("steer", items=[item_json(item) for item in later])
            await self.wait_for_pending(lambda: self.pi_gone)
            text = ((await self.command({"type": "get_last_assistant_text"})).get("data") or {}).get("text") or ""
        return self.outcome(items, text)

    async def interrupt(self) -> None:
        """Interrupt the run as pi's own Escape does (RPC ``abort``): the turn ends with an
        aborted answer, and the run settles."""
        await self.command({"type": "abort"})

    async def steer_together(self, items: list[Item]) -> None:
        """Agent items for an idle pi, as one prompt: the extension appends all but the last
        to the session and the last starts the turn, so the model reads them in one request
        (with one notice: ``envelope_rules.one_notice``), whatever pi's steering mode."""
        await self.extension("steer", items=[item_json(item) for item in items], together=True)

    def outcome(self, items: list[Item], text: str) -> RunOutcome:
        last = next((m for m in reversed(self.last_messages) if m.get("role") == "assistant"), None) or {}
        stop = last.get("stopReason")
        if stop == "error":
            return RunOutcome("failed", text, error=str(last.get("errorMessage") or "the model call failed"))
        state = "done" if any(item.kind == "reply" for item in items) else "idle"
        return RunOutcome(state, text)
