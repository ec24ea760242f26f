"""A foreground session as a roost peer: the public Python API (the pi bridge speaks the
same ops).

A foreground session becomes a peer lazily, on its first roost tool call or spawn. From
then on it keeps one daemon connection open (liveness = that connection), re-registers
after a reconnect, receives ``deliver`` events, writes each into its own session file as a
``pi-roost-agent-message`` entry and only then acks it. It holds the writer lock of its
session file for as long as it is open::

    async with ForegroundSession("/path/session.jsonl", name="main") as me:
        print(await me.call_tool("roost_agents", {}))
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from roost_core import locks
from roost_core.client import AsyncClient
from roost_core.paths import Paths, resolve_paths
from roost_core.peerlink import LinkedPeer
from roost_core.transcript import (
    AGENT_MESSAGE_TYPE,
    SessionWriter,
    inspect_session,
    message_ids_in,
    seqs_in,
)

log = logging.getLogger("roost.foreground")

DeliverHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class ForegroundSession(LinkedPeer):
    """A foreground session as a roost peer (see the module docstring), on a
    :class:`~roost_core.peerlink.LinkedPeer`."""

    def __init__(
        self,
        session: str | Path | None,
        *,
        name: str,
        cwd: str | None = None,
        paths: Paths | None = None,
        on_deliver: DeliverHandler | None = None,
        register_pid: int | None = None,
    ) -> None:
        super().__init__(paths or resolve_paths(), name, pause=self._pause)
        self.session = str(Path(session).absolute()) if session is not None else None
        self.cwd = cwd or os.getcwd()
        self.on_deliver = on_deliver
        self.register_pid = register_pid or os.getpid()
        self.delivered: list[dict[str, Any]] = []
        self.writer: SessionWriter | None = None
        self.lock: locks.WriterLock | None = None
        self._arrived = anyio.Event()
        #: A no-session peer's own id source, so it keeps its peer id across reconnects.
        self.ephemeral_id = uuid.uuid4().hex
        #: Seqs already written (or, with no session, seen): a resend is acked, not kept.
        self._seen: set[int] = set()
        #: Consecutive deliveries the session file refused (a full disk): the connection
        #: is dropped and made again after a growing pause, and the daemon pushes them again.
        self.write_failures = 0
        self._dropping: AsyncClient | None = None
        #: Message ids of the agent items written (or, with no session, seen): a second
        #: copy of one (a sender's resend after a daemon died) is acked, not kept.
        self._seen_ids: set[str] = set()

    async def __aenter__(self) -> ForegroundSession:
        if self.session is not None:
            self.lock = locks.WriterLock(self.session)
            self.lock.acquire()
            for line in inspect_session(self.session).describe(self.session):
                log.warning("%s", line)  # what this resume skips
            self.writer = SessionWriter(self.session, cwd=self.cwd)
            self._seen = seqs_in(self.writer.entries)
            self._seen_ids = message_ids_in(self.writer.entries)
        await self._open_tasks()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._close_tasks()
        if self.writer is not None:
            self.writer.close()
        if self.lock is not None:
            self.lock.release()

    # ------------------------------------------------------------------ registration

    async def _register(self, client: AsyncClient) -> dict[str, Any]:
        """``peer_register`` on a fresh connection (the link's ``register``)."""
        args: dict[str, Any] = {"session": self.session, "name": self.name, "cwd": self.cwd, "pid": self.register_pid}
        # The daemon numbers what it sends after what we hold, so a new daemon's seqs are
        # never taken for resends.
        args["lastSeq"] = max(self._seen, default=0)
        if self.writer is not None and self.writer.session_id:
            args["sessionId"] = self.writer.session_id
        elif self.session is None:
            args["sessionId"] = self.ephemeral_id
        return await self.peer_register(client, args)

    def _pause(self) -> float:
        """After the session file refused an item: wait before it is pushed again."""
        if not self.write_failures:
            return 0.0
        return min(0.05 * 2.0 ** min(self.write_failures, 8), 5.0)

    async def _on_event(self, event: dict[str, Any], client: AsyncClient | None = None) -> None:
        """A pushed event (the link's ``on_event``): a delivered item is written to the
        session file, then acked on the connection it came by."""
        if event.get("event") != "deliver":
            return
        if client is not None and client is self._dropping:
            return  # after a refused write: nothing more of this connection, to keep order
        seq = int(event["seq"])
        msg_id = event.get("id")
        if seq in self._seen or (msg_id is not None and msg_id in self._seen_ids):
            # Pushed again after a reconnect: already written; only ack it again.
            await self.link.ack(seq, client)
            return
        if self.writer is not None:
            try:
                self.writer.append(
                    "custom_message",
                    customType=AGENT_MESSAGE_TYPE,
                    content=event.get("content", ""),
                    display=True,
                    details={
                        **{key: event.get(key) for key in ("seq", "from", "fromName", "relation", "kind", "trace", "hops")},
                        # The message id, the id it answers, its scope: only those it has.
                        **{key: event[key] for key in ("id", "replyTo", "replyQuote", "scope") if event.get(key)},
                    },
                )
            except OSError as exc:
                # Not in the file, so not acked: the daemon keeps it in flight and pushes
                # it again when this session registers anew, after a pause.
                self.write_failures += 1
                log.warning("session file %s refused item %s (%s); it comes again after a reconnect", self.session, seq, exc)
                if client is not None:
                    self._dropping = client
                    await client.aclose()
                return
        self.write_failures = 0
        self._seen.add(seq)
        if msg_id is not None:
            self._seen_ids.add(msg_id)
        self.delivered.append(event)
        self._arrived.set()
        self._arrived = anyio.Event()
        if self.on_deliver is not None:
            result = self.on_deliver(event)
            if result is not None:
                await result
        await self.link.ack(seq, client)

    # ------------------------------------------------------------------ use

    async def call_tool(self, name: str, args: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
        """Call an agent tool as the model would: ``(ok, text for the model, data)``
        (keyed: asked again after a lost answer, done once)."""
        result = await self.call("tool_call", name=name, args=args)
        return bool(result.get("ok")), str(result.get("text", "")), result.get("data") or {}

    async def wait_for_delivery(self, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` items have arrived in this session."""
        with anyio.fail_after(timeout):
            while len(self.delivered) < count:
                await self._arrived.wait()
        return self.delivered
