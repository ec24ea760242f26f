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
from roost_core.client import REASK_SECONDS, AsyncClient, DaemonUnavailable, call_on_link
from roost_core.paths import Paths, resolve_paths
from roost_core.protocol import ProtocolError
from roost_core.transcript import (
    AGENT_MESSAGE_TYPE,
    SessionWriter,
    inspect_session,
    message_ids_in,
    seqs_in,
)

log = logging.getLogger("roost.foreground")

DeliverHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class ForegroundSession:
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
        self.session = str(Path(session).absolute()) if session is not None else None
        self.name = name
        self.cwd = cwd or os.getcwd()
        self.paths = paths or resolve_paths()
        self.on_deliver = on_deliver
        self.register_pid = register_pid or os.getpid()
        self.peer_id: str | None = None
        self.tools: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []
        self.client: AsyncClient | None = None
        self.writer: SessionWriter | None = None
        self.lock: locks.WriterLock | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._registered = anyio.Event()
        self._wanted = False
        self._closing = False
        self._arrived = anyio.Event()
        self.error: ProtocolError | None = None
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
        self.reask_seconds = REASK_SECONDS

    async def __aenter__(self) -> ForegroundSession:
        if self.session is not None:
            self.lock = locks.WriterLock(self.session)
            self.lock.acquire()
            for line in inspect_session(self.session).describe(self.session):
                log.warning("%s", line)  # what this resume skips
            self.writer = SessionWriter(self.session, cwd=self.cwd)
            self._seen = seqs_in(self.writer.entries)
            self._seen_ids = message_ids_in(self.session)
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
        if self.writer is not None:
            self.writer.close()
        if self.lock is not None:
            self.lock.release()

    # ------------------------------------------------------------------ registration

    async def ensure_registered(self) -> str:
        """Join as a peer (once); later calls return at once."""
        if not self._wanted:
            self._wanted = True
            assert self._tg is not None, "use ForegroundSession as an async context manager"
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
                # Events are acked on the connection they came by, even one that arrives
                # in the same read as the register answer (before self.client is set).
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
                    args: dict[str, Any] = {"session": self.session, "name": self.name, "cwd": self.cwd, "pid": self.register_pid}
                    # The daemon numbers what it sends after what we hold, so a new
                    # daemon's seqs are never taken for resends.
                    args["lastSeq"] = max(self._seen, default=0)
                    if self.writer is not None and self.writer.session_id:
                        args["sessionId"] = self.writer.session_id
                    elif self.session is None:
                        args["sessionId"] = self.ephemeral_id
                    result = await client.call("peer_register", **args)
                except DaemonUnavailable:
                    tg.cancel_scope.cancel()
                    continue
                except ProtocolError as exc:
                    # Refused (bad lock, wrong pid...): every waiting call hears why.
                    self.error = exc
                    self._registered.set()
                    tg.cancel_scope.cancel()
                    await client.aclose()
                    return
                self.peer_id = result["id"]
                self.name = result.get("name", self.name)
                self.tools = result.get("tools") or []
                self.client = client
                self._registered.set()
                delay = 0.02
                await client.closed.wait()
                self.client = None
                self._registered = anyio.Event()
                tg.cancel_scope.cancel()
            if self.write_failures:
                # The session file refused an item: wait before it is pushed again.
                await anyio.sleep(min(0.05 * 2 ** min(self.write_failures, 8), 5.0))

    async def _on_event(self, event: dict[str, Any], client: AsyncClient | None = None) -> None:
        if event.get("event") != "deliver":
            return
        if client is not None and client is self._dropping:
            return  # after a refused write: nothing more of this connection, to keep order
        seq = int(event["seq"])
        msg_id = event.get("id")
        if seq in self._seen or (msg_id is not None and msg_id in self._seen_ids):
            # Pushed again after a reconnect: already written; only ack it again.
            await self._ack(client, seq)
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
        await self._ack(client or self.client, seq)

    async def _ack(self, client: AsyncClient | None, seq: int) -> None:
        if client is None:
            return
        try:
            # Never await an answer here: this runs inside the reader that would read it.
            await client.notify("ack", seq=seq)
        except DaemonUnavailable:
            pass  # the daemon is gone; what it had in flight for us went with it

    # ------------------------------------------------------------------ use

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """An op on this peer's connection. A request that never left (the daemon had
        gone) is sent again once the session has registered anew. A request of an op that
        changes something (:data:`KEYED_OPS`) carries a key: when its answer is lost with
        the connection, it is asked again with the same key once the session has
        registered anew (within :attr:`reask_seconds`), and the daemon answers what the
        first ask did, so it is done once, never twice. Any other request whose answer
        was lost is not sent again."""
        return await call_on_link(self._linked, op, args, reask_seconds=self.reask_seconds)

    async def _linked(self) -> AsyncClient | None:
        await self.ensure_registered()
        return self.client

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
