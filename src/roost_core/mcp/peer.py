"""The MCP client's session as a roost foreground peer (``roost mcp`` outside a job).

Identity follows the foreground rules: the peer's pid is the MCP client, the process that
started ``roost mcp`` (its parent), and the daemon checks that the server runs under it.
The session is keyed, in this order, on:

1. a transcript file the client names (``roost mcp --session FILE``, or
   ``ROOST_MCP_SESSION``): the server takes its writer lock for the client's pid;
2. Claude Code's own transcript, when the client is Claude Code: its hooks tell the server
   the session's ``transcript_path`` (and ``CLAUDE_CODE_SESSION_ID`` names it before the
   first hook); a ``/clear`` or ``/resume`` moves the peer to the new session;
3. another agent CLI's session file, when ``roost mcp`` is told which host the client is
   (``ROOST_MCP_HOST``, set by that host's install command in the server's environment):
   its hooks name the file (``transcript_path``) as Claude Code's do, and the host's own
   ``transcript_seqs`` reads which items it holds;
4. otherwise no session: a random id the server keeps, so the peer keeps its id across
   daemon reconnects for as long as the client runs.

A peer that joined with no session and learns it later (a hook that names the file comes
after the first roost tool call) keeps the id it joined with: one session is one agent
from its first call, and what was sent to that id reaches it. A move from one session
to another (``/clear``, ``/resume``) is a new agent.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from roost_core import locks
from roost_core.client import AsyncClient, DaemonUnavailable
from roost_core.hosts.handover import hook_output, items_text, wants_items
from roost_core.paths import Paths
from roost_core.peerlink import LinkedPeer
from roost_core.protocol import ProtocolError
from roost_core.queue import Item
from roost_core.worker.reply_queue import ReplyQueue
from roost_plugins.claude import config_dir
from roost_plugins.claude.transcript import TranscriptSeqs

log = logging.getLogger("roost.mcp")

#: The hooks Claude Code runs only after a model call (a tool it asked for, the end of
#: its answer): the items its transcript showed before one were in that call.
SEEN_AFTER = ("PostToolUse", "Stop")
#: How long to watch Claude Code's transcript for items a hook handed over.
CONFIRM_SECONDS = 60.0
CONFIRM_INTERVAL = 0.1


def find_claude_transcript(session_id: str, env: dict[str, str] | None = None) -> str | None:
    """The transcript of Claude Code session ``session_id``, if it exists yet."""
    pattern = str(config_dir(env) / "projects" / "*" / f"{glob.escape(session_id)}.jsonl")
    found = sorted(glob.glob(pattern))
    return found[0] if found else None


class HostSeqs:
    """A session file read with its host's ``transcript_seqs`` (the same face as
    :class:`TranscriptSeqs`: ``scan()`` and ``seqs``)."""

    def __init__(self, path: str, read: Callable[[str], set[int]]) -> None:
        self.path = path
        self.read = read
        self.seqs: set[int] = set()

    def scan(self) -> set[int]:
        try:
            self.seqs = set(self.read(self.path))
        except (OSError, ValueError):
            pass  # not written yet, or a line being written: the next scan sees it
        return self.seqs


class McpPeer(LinkedPeer):
    """The MCP client's session as a foreground peer (see the module docstring)."""

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
        host: str | None = None,
        read_seqs: Callable[[str], set[int]] | None = None,
    ) -> None:
        super().__init__(paths, name)
        #: The host the client runs when it is another agent CLI (``--host`` or
        #: ``ROOST_MCP_HOST``: ``roost agents`` shows it; ``roost log`` reads the session the
        #: hooks name as that host writes it), and how its session file says which items it holds.
        self.host = host
        self.read_seqs = read_seqs
        self.cwd = cwd
        self.client_pid = client_pid
        self.claude = claude
        self.session = str(Path(session).absolute()) if session else None
        #: The Claude Code session id (the transcript's name) when the client is Claude Code.
        self.claude_session_id = claude_session_id
        self.ephemeral_id = uuid.uuid4().hex
        #: The id it joined with before it knew its session: kept once the session is known.
        self.kept_id: str | None = None
        self.queue = ReplyQueue()
        self.queue.start(set())
        self.transcript: TranscriptSeqs | HostSeqs | None = None
        self.lock: locks.WriterLock | None = None
        #: Items handed to Claude Code whose seq its transcript does not show yet.
        self.handed: dict[int, Item] = {}
        #: Seqs its transcript shows whose model call has not been told of yet (``seen``),
        #: and those of them taken by ``roost_inbox``: that tool's own PostToolUse comes
        #: before any model call has them.
        self.unseen: list[int] = []
        self.pulled: set[int] = set()
        #: Handed items a model call has followed whose line the transcript did not show
        #: yet (Claude Code writes it behind): seen as soon as it does.
        self.followed: set[int] = set()
        self._watching = False

    async def __aenter__(self) -> McpPeer:
        await self._open_tasks()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._close_tasks()
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
        elif self.read_seqs is not None and self.claude_session_id:
            self.transcript = HostSeqs(session, self.read_seqs)
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
        # Joined with no session: the same agent goes on in it (the daemon names a peer
        # after the ``sessionId`` it registers with).
        self.kept_id = self.ephemeral_id if self.session is None and self.peer_id is not None else None
        self.claude_session_id, self.session = session_id, path
        if moved and self.link.started:
            # Items held for the old session stay unacked: the daemon gives them to that
            # session again if it comes back.
            self.queue = ReplyQueue()
            self.queue.start(set())
            self.handed.clear()
            self.unseen, self.followed = [], set()
            self.link.relink()

    # ------------------------------------------------------------------ the daemon link

    async def _register(self, client: AsyncClient) -> dict[str, Any]:
        """``peer_register`` on a fresh connection (the link's ``register``), for the
        session the client is in now."""
        session, session_id = self.current_session()
        try:
            if session is not None:
                self.take_lock(session)
        except RuntimeError as exc:
            # The session is held by another process: refused, as the daemon refuses.
            raise ProtocolError("conflict", str(exc)) from exc
        args: dict[str, Any] = {"session": session, "name": self.name, "cwd": self.cwd, "pid": self.client_pid}
        seen = self.transcript.seqs if self.transcript is not None else set()
        args["lastSeq"] = max([self.queue.watermark, *seen], default=0)
        if session_id:
            args["sessionId"] = self.kept_id or session_id
        if self.claude:
            args["host"] = "claude"
        elif self.host:
            args["host"] = self.host
        result = await self.peer_register(client, args)
        if self.transcript is not None:
            self.queue.start(set(self.transcript.seqs))
        return result

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
        """Ack what the queue has settled (its watermark)."""
        await self.link.ack(self.queue.watermark, client)

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
        self.pulled.update(item.seq for item in items)
        return items_text(items)

    async def answer_hook(self, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """A Claude Code hook of the client: learn the session, hand over what waits."""
        self.claude_session(data.get("transcript_path"), data.get("session_id"))
        await self.confirm()
        if event in SEEN_AFTER:
            await self.tell_seen()
        if self.peer_id is None or not self.link.is_linked or not wants_items(event, data):
            return None
        return hook_output(event, await self.take())

    async def confirm(self) -> None:
        """Settle the handed items Claude Code's transcript shows."""
        if self.transcript is None:
            return
        self.transcript.scan()
        late: list[int] = []
        for seq in [seq for seq in self.handed if seq in self.transcript.seqs]:
            self.handed.pop(seq)
            self.queue.mark_done(seq)
            if seq in self.followed:
                self.followed.discard(seq)
                late.append(seq)
            else:
                self.unseen.append(seq)
        await self._send_ack()
        if late:
            await self.say_seen(late)

    async def tell_seen(self) -> None:
        """A hook that follows a model call (:data:`SEEN_AFTER`): the items the transcript
        showed before it were in that call (the senders' receipts say ``seen``). Claude
        Code tells of no model request as it goes out; this is the first sign of one."""
        seqs = [seq for seq in self.unseen if seq not in self.pulled]
        self.unseen = [seq for seq in self.unseen if seq in self.pulled]
        # Handed, and followed by a model call, but not in the transcript yet.
        self.followed.update(seq for seq in self.handed if seq not in self.pulled)
        self.pulled.clear()  # their tool's hook is this one: the next follows a model call
        await self.say_seen(seqs)

    async def say_seen(self, seqs: list[int]) -> None:
        """Tell the daemon the model had ``seqs`` (op ``seen``)."""
        if not seqs or self.peer_id is None or not self.link.is_linked:
            return
        try:
            await self.call("seen", seqs=seqs)
        except (ProtocolError, DaemonUnavailable) as exc:
            log.warning("seen %s not told: %s", seqs, exc)

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
