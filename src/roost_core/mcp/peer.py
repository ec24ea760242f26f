"""The MCP client's session as a roost foreground peer (``roost mcp`` outside a job).

Identity follows the foreground rules: the peer's pid is the MCP client, the process that
started ``roost mcp`` (its parent), and the daemon checks that the server runs under it.
The session is keyed, in this order, on:

1. a transcript file the client names (``roost mcp --session FILE``, or
   ``ROOST_MCP_SESSION``): the server takes its writer lock for the client's pid;
2. Claude Code's own transcript, when the client is Claude Code: its hooks tell the server
   the session's ``transcript_path`` (and ``CLAUDE_CODE_SESSION_ID`` names it before the
   first hook); a ``/clear`` or ``/resume`` moves the peer to the new session;
3. otherwise no session: a random id the server keeps, so the peer keeps its id across
   daemon reconnects for as long as the client runs.

It joins lazily, on the first roost tool call, and keeps one daemon connection from then
on. Items delivered to it wait in its queue until they are taken: by ``roost_inbox`` (any
client), or by a Claude Code hook (``roost claude hook``). An item is acknowledged once it
is taken: for Claude Code only once its transcript shows it (so a hook whose output never
reached the model gives the item again, and nothing reaches the transcript twice); for
other clients when ``roost_inbox`` hands it over.
"""

from __future__ import annotations

import glob
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import anyio

from roost_core import locks
from roost_core.claude import config_dir
from roost_core.claude.hook import hook_output, items_text, wants_items
from roost_core.claude.transcript import TranscriptSeqs
from roost_core.client import AsyncClient, DaemonUnavailable, call_on_link
from roost_core.paths import Paths
from roost_core.protocol import ProtocolError
from roost_core.queue import Item
from roost_core.worker.reply_queue import ReplyQueue

log = logging.getLogger("roost.mcp")

#: How long to watch Claude Code's transcript for items a hook handed over.
CONFIRM_SECONDS = 60.0
CONFIRM_INTERVAL = 0.1


def find_claude_transcript(session_id: str, env: dict[str, str] | None = None) -> str | None:
    """The transcript of Claude Code session ``session_id``, if it exists yet."""
    pattern = str(config_dir(env) / "projects" / "*" / f"{glob.escape(session_id)}.jsonl")
    found = sorted(glob.glob(pattern))
    return found[0] if found else None


class McpPeer:
    def __init__(
        self,
        paths: Paths,
        *,
        name: str,
        cwd: str,
        client_pid: int,
        session: str | None = None,
        claude: bool = False,
        claude_session_id: str | None = None,
    ) -> None:
        self.paths = paths
        self.name = name
        self.cwd = cwd
        self.client_pid = client_pid
        self.claude = claude
        self.session = str(Path(session).absolute()) if session else None
        #: The Claude Code session id (the transcript's name) when the client is Claude Code.
        self.claude_session_id = claude_session_id
        self.ephemeral_id = uuid.uuid4().hex
        self.peer_id: str | None = None
        self.tools: list[dict[str, Any]] = []
        self.client: AsyncClient | None = None
        self.queue = ReplyQueue()
        self.queue.start(set())
        self.acked = 0
        self.transcript: TranscriptSeqs | None = None
        self.lock: locks.WriterLock | None = None
        self.error: ProtocolError | None = None
        self._registered = anyio.Event()
        self._wanted = False
        self._closing = False
        self._relink = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        #: Items handed to Claude Code whose seq its transcript does not show yet.
        self.handed: dict[int, Item] = {}
        self._watching = False

    async def __aenter__(self) -> McpPeer:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._closing = True
        if self.client is not None:
            await self.client.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self.release()

    # ------------------------------------------------------------------ the session

    def current_session(self) -> tuple[str | None, str | None]:
        """``(session file, session id)`` this peer registers with now."""
        if self.session is not None:
            return self.session, self.claude_session_id
        if self.claude and self.claude_session_id:
            found = find_claude_transcript(self.claude_session_id)
            if found:
                self.session = found
                return found, self.claude_session_id
        return None, self.ephemeral_id

    def take_lock(self, session: str) -> None:
        """The writer lock of ``session``, for the client's pid (the client writes it)."""
        self.release()
        self.lock = locks.WriterLock(session, pid=self.client_pid)
        self.lock.acquire()
        if self.claude and self.claude_session_id:
            self.transcript = TranscriptSeqs(session, self.claude_session_id)
            self.transcript.scan()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def claude_session(self, transcript_path: str | None, session_id: str | None) -> None:
        """A Claude Code hook says which session it runs in; a new one (``/clear``,
        ``/resume``) moves the peer there."""
        if not session_id or not transcript_path:
            return
        path = os.path.normpath(os.path.abspath(transcript_path))
        if path == self.session and session_id == self.claude_session_id:
            return
        moved = self.session is not None or self.peer_id is not None
        self.claude_session_id, self.session = session_id, path
        if moved and self._wanted:
            # Items held for the old session stay unacked: the daemon gives them to that
            # session again if it comes back.
            self.queue = ReplyQueue()
            self.queue.start(set())
            self.handed.clear()
            self._registered = anyio.Event()
            self._relink.set()

    # ------------------------------------------------------------------ the daemon link

    async def ensure_registered(self) -> str:
        if not self._wanted:
            self._wanted = True
            assert self._tg is not None, "use McpPeer as an async context manager"
            self._tg.start_soon(self._link)
        await self._registered.wait()
        if self.error is not None:
            raise self.error
        assert self.peer_id is not None
        return self.peer_id

    async def _link(self) -> None:
        delay = 0.02
        while not self._closing:
            try:
                holder: list[AsyncClient] = []
                client = await AsyncClient.open(self.paths.socket, lambda event: self._on_event(event, holder[0]))  # noqa: B023 - called only by this client, whose run ends with this pass of the loop
                holder.append(client)
            except DaemonUnavailable:
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.run)
                try:
                    session, session_id = self.current_session()
                    if session is not None:
                        self.take_lock(session)
                    args: dict[str, Any] = {"session": session, "name": self.name, "cwd": self.cwd, "pid": self.client_pid}
                    seen = self.transcript.seqs if self.transcript is not None else set()
                    args["lastSeq"] = max([self.queue.watermark, *seen], default=0)
                    if session_id:
                        args["sessionId"] = session_id
                    if self.claude:
                        args["host"] = "claude"
                    result = await client.call("peer_register", **args)
                except DaemonUnavailable:
                    tg.cancel_scope.cancel()
                    continue
                except (ProtocolError, RuntimeError) as exc:
                    # Refused (bad lock, wrong pid...): every waiting call hears why.
                    self.error = exc if isinstance(exc, ProtocolError) else ProtocolError("conflict", str(exc))
                    self._registered.set()
                    tg.cancel_scope.cancel()
                    await client.aclose()
                    return
                if self.transcript is not None:
                    self.queue.start(set(self.transcript.seqs))
                self.peer_id = result["id"]
                self.name = result.get("name", self.name)
                self.tools = result.get("tools") or []
                self.client = client
                self.acked = 0
                self._registered.set()
                delay = 0.02
                self._relink = anyio.Event()
                with anyio.CancelScope() as waiting:
                    tg.start_soon(self._cancel_on_relink, waiting)
                    await client.closed.wait()
                self.client = None
                self._registered = anyio.Event()
                tg.cancel_scope.cancel()
            await client.aclose()

    async def _cancel_on_relink(self, scope: anyio.CancelScope) -> None:
        await self._relink.wait()
        scope.cancel()

    async def _on_event(self, event: dict[str, Any], client: AsyncClient) -> None:
        if event.get("event") != "deliver":
            return
        item = Item.received(event, kind="message")
        if self.transcript is not None:
            self.transcript.scan()
            if item.seq in self.transcript.seqs:
                self.queue.push(item)
                self.queue.mark_done(item.seq)
                await self._send_ack(client)
                return
        if item.seq in self.handed:
            return
        self.queue.push(item)

    async def _send_ack(self, client: AsyncClient | None = None) -> None:
        client = client or self.client
        watermark = self.queue.watermark
        if client is None or watermark <= self.acked:
            return
        try:
            # Never await an answer here: this may run inside the reader that would read it.
            await client.notify("ack", seq=watermark)
            self.acked = watermark
        except DaemonUnavailable:
            pass  # the daemon is gone; it pushes again what it had in flight

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """An op on this peer's link (``client.call_on_link``: a keyed op is asked again
        with its key when the answer is lost, and done once)."""
        return await call_on_link(self._linked, op, args)

    async def _linked(self) -> AsyncClient | None:
        await self.ensure_registered()
        return self.client

    async def tool_call(self, name: str, args: dict[str, Any]) -> tuple[bool, str]:
        result = await self.call("tool_call", name=name, args=args)
        return bool(result.get("ok")), str(result.get("text", ""))

    # ------------------------------------------------------------------ taking items

    async def take(self) -> list[Item]:
        """Hand over everything waiting (in seq order). Claude Code's items are acked
        once its transcript shows them; any other client's at once."""
        items = self.queue.take_all()
        if not items:
            return []
        if self.transcript is not None:
            self.handed.update({item.seq: item for item in items})
            self.watch_transcript()
        else:
            for item in items:
                self.queue.mark_done(item.seq)
            await self._send_ack()
        return items

    async def inbox_text(self) -> str:
        await self.ensure_registered()
        items = await self.take()
        if not items:
            return "no agent items waiting"
        return items_text(items)

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """A Claude Code hook of the client: learn the session, hand over what waits."""
        self.claude_session(data.get("transcript_path"), data.get("session_id"))
        await self.confirm()
        if self.peer_id is None or not self._registered.is_set() or not wants_items(event, data):
            return None
        return hook_output(event, await self.take())

    async def confirm(self) -> None:
        """Settle the handed items Claude Code's transcript shows."""
        if self.transcript is None:
            return
        self.transcript.scan()
        for seq in [seq for seq in self.handed if seq in self.transcript.seqs]:
            self.handed.pop(seq)
            self.queue.mark_done(seq)
        await self._send_ack()

    def watch_transcript(self) -> None:
        if self._watching or self._tg is None:
            return
        self._watching = True
        self._tg.start_soon(self._watch)

    async def _watch(self) -> None:
        # Claude Code appends the hook's output to the transcript right after the hook
        # exits; every later hook confirms too, this only covers an idle session.
        try:
            with anyio.move_on_after(CONFIRM_SECONDS):
                while self.handed:
                    await self.confirm()
                    if self.handed:
                        await anyio.sleep(CONFIRM_INTERVAL)
        finally:
            self._watching = False
