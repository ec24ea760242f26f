"""One client's link to the daemon: the part every client that registers shares.

A foreground session (:mod:`roost_core.foreground`), the MCP peer
(:mod:`roost_core.mcp.peer`) and a job's worker (:mod:`roost_core.worker.main`) each keep
one daemon connection for as long as they run, and each needs the same things of it:

- connect, and connect again with a growing pause (20 ms doubling to 1 s) while no daemon
  answers; a worker gives up after a while with no daemon at all;
- register on every new connection (``peer_register`` or ``worker_hello``: the client's
  own op, made by its ``register`` callback, which also says the last seq it holds);
- hand every pushed event to the client with the connection it came by;
- the ack (:meth:`PeerLink.ack`): cumulative, on the connection the item came by, once
  per watermark and connection;
- ops on the link (:meth:`PeerLink.call`): a request that never left is sent again once
  the link is back, and an op that changes something carries a key and is asked again
  with it when its answer is lost (the daemon answers what the first ask did).

What differs between the clients (what they register with, what they do with an item, when
they ack) stays with them, in the callbacks they give.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from roost_core.client import (
    KEYED_OPS,
    REASK_SECONDS,
    AsyncClient,
    DaemonUnavailable,
    NotSent,
    new_key,
)
from roost_core.paths import Paths
from roost_core.protocol import ProtocolError

log = logging.getLogger("roost.peerlink")

#: The first pause before connecting again, and the longest.
FIRST_PAUSE = 0.02
MAX_PAUSE = 1.0
#: How long a request that failed with its connection waits for that connection to close
#: before it is asked again on the next one.
CLOSE_WAIT = 30.0

#: What ``run`` makes of a register op whose connection was lost before its answer.
LOST: dict[str, Any] = {}

#: Registers the client on a fresh connection: its answer (the peer id, the tools...), or
#: None when the client will not register (it has been told to stop meanwhile).
Register = Callable[[AsyncClient], Awaitable[dict[str, Any] | None]]
#: A pushed event, with the connection it came by.
OnEvent = Callable[[dict[str, Any], AsyncClient], Awaitable[None] | None]
#: Runs once a connection is registered (a worker tells the daemon its state again).
OnLinked = Callable[[AsyncClient], Awaitable[None]]


class PeerLink:
    """Keeps one registered daemon connection for a client (see the module docstring).

    ``run`` is the link's task (``start`` starts it once, lazily); it returns why the link
    ended: ``"closed"`` (:meth:`aclose`), ``"refused"`` (the register op was refused:
    :attr:`error` says why, and every waiter hears it), ``"ended"`` (``register`` said the
    client will not register) or ``"orphaned"`` (no daemon for ``give_up_after`` seconds).
    """

    def __init__(
        self,
        socket_path: str | Path,
        *,
        register: Register,
        on_event: OnEvent,
        on_linked: OnLinked | None = None,
        give_up_after: Callable[[], float] | None = None,
        pause: Callable[[], float] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.register = register
        self.on_event = on_event
        self.on_linked = on_linked
        #: Seconds with no daemon after which the link gives up (None: never).
        self.give_up_after = give_up_after
        #: Seconds to wait after a connection ended before the next (None: none); a client
        #: that dropped its connection on purpose (its file refused an item) backs off here.
        self.pause = pause
        #: The registered connection (None while there is none).
        self.client: AsyncClient | None = None
        #: The last register answer.
        self.answer: dict[str, Any] | None = None
        #: Why the daemon refused to register this client.
        self.error: ProtocolError | None = None
        #: Set while a registered connection is up (a new event after each loss).
        self.linked = anyio.Event()
        #: Set once ``run`` has returned.
        self.ended = anyio.Event()
        self.closing = False
        self.started = False
        #: The ack watermark sent on ``_acked_on`` (the connection it was sent on).
        self.acked = 0
        self._acked_on: AsyncClient | None = None
        self._waiting: anyio.CancelScope | None = None
        self._relink = False

    # ------------------------------------------------------------------ the link's task

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start :meth:`run` in ``tg``, once (later calls do nothing)."""
        if not self.started:
            self.started = True
            tg.start_soon(self.run)

    async def run(self) -> str:
        """Connect, register and stay connected until :meth:`aclose`; see the class."""
        self.started = True
        try:
            return await self._run()
        finally:
            self.ended.set()
            self.linked.set()  # waiters wake and hear that the link has ended

    async def _run(self) -> str:
        pause = FIRST_PAUSE
        lost_since = time.monotonic()
        while not self.closing:
            try:
                client = await self._open()
            except DaemonUnavailable:
                if self.give_up_after is not None and time.monotonic() - lost_since > self.give_up_after():
                    return "orphaned"
                await anyio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE)
                continue
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.run)
                # A relink asked for before this registration is this registration.
                self._relink = False
                try:
                    answer = await self.register(client)
                except DaemonUnavailable:
                    answer = LOST
                except ProtocolError as exc:
                    # Refused (bad lock, wrong pid, bad token...): every waiting call hears why.
                    self.error = exc
                    answer = None
                if answer is not None and answer is not LOST:
                    await self._linked(client, answer)
                    pause = FIRST_PAUSE
                    lost_since = time.monotonic()
                tg.cancel_scope.cancel()
            await client.aclose()
            if answer is None:
                return "refused" if self.error is not None else "ended"
            wait = self.pause() if self.pause is not None else 0.0
            if wait:
                await anyio.sleep(wait)
        return "closed"

    async def _open(self) -> AsyncClient:
        # Events go to the client with the connection they came by, even one that arrives
        # in the same read as the register answer (before :attr:`client` is set).
        holder: list[AsyncClient] = []
        client = await AsyncClient.open(self.socket_path, lambda event: self.on_event(event, holder[0]))
        holder.append(client)
        return client

    async def _linked(self, client: AsyncClient, answer: dict[str, Any]) -> None:
        """A registered connection, until it closes (or :meth:`relink` drops it)."""
        self.answer = answer
        # The daemon says what it has acked (a worker's hello); an ack it has is not sent
        # again on this connection.
        acked = int(answer.get("acked") or 0)
        if self._acked_on is not client:
            self._acked_on, self.acked = client, acked
        self.client = client
        self.linked.set()
        try:
            with anyio.CancelScope() as self._waiting:
                if self.on_linked is not None:
                    await self.on_linked(client)
                if not self._relink:
                    await client.closed.wait()
        finally:
            self._waiting = None
            self._relink = False
            self.client = None
            self._unlinked()

    def _unlinked(self) -> None:
        # A fresh event only in place of a set one: a waiter on an unset one must hear
        # the next registration, not wait on an event nobody sets.
        if self.linked.is_set():
            self.linked = anyio.Event()

    def relink(self) -> None:
        """Drop the registered connection and register anew (the client's session
        changed); waiters wait for the new registration."""
        self._unlinked()
        self._relink = True
        if self._waiting is not None:
            self._waiting.cancel()

    def stop(self) -> None:
        """No new connection once the current one ends (the client is stopping)."""
        self.closing = True

    async def aclose(self) -> None:
        """End the link: no new connection; the current one is closed."""
        self.stop()
        client = self.client
        if client is not None:
            await client.aclose()

    # ------------------------------------------------------------------ using it

    @property
    def is_linked(self) -> bool:
        """A registered connection is up now (and no :meth:`relink` is under way)."""
        return self.client is not None and self.linked.is_set()

    async def ready(self) -> AsyncClient | None:
        """The registered connection, once there is one; the refusal (:attr:`error`) when
        the daemon refused this client, ``DaemonUnavailable`` when the link has ended."""
        await self.linked.wait()
        if self.error is not None:
            raise self.error
        if self.ended.is_set():
            raise DaemonUnavailable("the link to the daemon has ended")
        return self.client

    async def call(self, op: str, args: dict[str, Any], *, reask_seconds: float | None = REASK_SECONDS) -> dict[str, Any]:
        """``op`` on the registered connection. A request that never left is sent again
        once the link is back. A request of an op in :data:`~roost_core.client.KEYED_OPS`
        carries a key (one is made if ``args`` has none) and is asked again whenever its
        answer is lost, until it is answered or no link came back for ``reask_seconds``
        (None: for as long as the link runs). Any other request whose answer was lost is
        not sent again (``DaemonUnavailable``)."""
        if op in KEYED_OPS and "key" not in args:
            args["key"] = new_key()
        keyed = "key" in args
        for attempt in itertools.count():
            if keyed:
                # Only the time with no daemon counts: a slow answer is waited for.
                try:
                    with anyio.fail_after(reask_seconds):
                        client = await self.ready()
                except TimeoutError:
                    raise DaemonUnavailable(f"no daemon answered for {reask_seconds:.0f}s; {op} was asked again with its key until then") from None
            else:
                client = await self.ready()
            if client is None:
                continue
            try:
                return await client.call(op, **args)
            except NotSent:
                # It never left: sent once more, keyed or not.
                if attempt and not keyed:
                    raise
            except DaemonUnavailable:
                if not keyed:
                    raise
                # It may have taken effect before its answer was lost: the next ask says it
                # is this key asked again (so a send is not refused queue_full).
                args["again"] = True
            with anyio.fail_after(CLOSE_WAIT):
                await client.closed.wait()
        raise AssertionError("unreachable")

    async def ack(self, seq: int, client: AsyncClient | None = None, *, answer: bool = False) -> bool:
        """The ack, for every client: every item up to ``seq`` is in the transcript.

        Sent on ``client`` (the connection the item came by) or the registered one, unless
        that connection has had this watermark already. ``answer=False`` writes it without
        waiting (safe inside an event handler, which runs in the reader that would read
        the answer); ``answer=True`` waits for the daemon's answer, so an ack the daemon
        could not store (``not_stored``) is sent again with the next. False when it did
        not go out (no connection, the daemon gone: it pushes again what it had in flight)."""
        client = client or self.client
        if client is None:
            return False
        if client is not self._acked_on:
            self._acked_on, self.acked = client, 0
        if seq <= self.acked:
            return False
        try:
            if answer:
                await client.call("ack", seq=seq)
            else:
                # Never await an answer here: this may run inside the reader that would read it.
                await client.notify("ack", seq=seq)
        except (DaemonUnavailable, ProtocolError) as exc:
            if answer:
                log.warning("ack %s not sent: %s", seq, exc)
            return False
        if client is self._acked_on:
            self.acked = max(self.acked, seq)
        return True


class LinkedPeer:
    """A foreground peer around its :class:`PeerLink`: what :class:`ForegroundSession
    <roost_core.foreground.ForegroundSession>` and :class:`McpPeer
    <roost_core.mcp.peer.McpPeer>` share. The link starts lazily, on first use, in the
    peer's own task group (``async with``); it registers with ``peer_register`` and keeps
    the peer id, name and tools the daemon answers.

    A subclass gives ``_register`` (the ``peer_register`` arguments, through
    :meth:`peer_register`) and ``_on_event`` (what it does with a pushed item)."""

    def __init__(self, paths: Paths, name: str, *, pause: Callable[[], float] | None = None) -> None:
        self.paths = paths
        self.name = name
        self.peer_id: str | None = None
        self.tools: list[dict[str, Any]] = []
        #: How long an op that changes something is asked again while no daemon answers.
        self.reask_seconds = REASK_SECONDS
        self._tg: anyio.abc.TaskGroup | None = None
        #: The daemon link (connect, register, ack, ask again), started on first use.
        self.link = PeerLink(paths.socket, register=self._register, on_event=self._on_event, pause=pause)

    async def _register(self, client: AsyncClient) -> dict[str, Any]:
        raise NotImplementedError

    async def _on_event(self, event: dict[str, Any], client: AsyncClient) -> None:
        raise NotImplementedError

    @property
    def client(self) -> AsyncClient | None:
        """The registered daemon connection (None while there is none)."""
        return self.link.client

    @property
    def error(self) -> ProtocolError | None:
        """Why the daemon refused to register this peer, if it did."""
        return self.link.error

    async def _open_tasks(self) -> None:
        """The peer's task group (the link runs in it): entered by ``__aenter__``."""
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()

    async def _close_tasks(self) -> None:
        """End the link and the peer's tasks: ``__aexit__``'s first step."""
        await self.link.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    def _start_link(self) -> None:
        assert self._tg is not None, f"use {type(self).__name__} as an async context manager"
        self.link.start(self._tg)

    async def ensure_registered(self) -> str:
        """Join as a peer (once); later calls return at once. The daemon's refusal is
        raised (:class:`~roost_core.protocol.ProtocolError`)."""
        self._start_link()
        await self.link.ready()
        assert self.peer_id is not None
        return self.peer_id

    async def peer_register(self, client: AsyncClient, args: dict[str, Any]) -> dict[str, Any]:
        """``peer_register`` with ``args`` on ``client``; the peer id, name and tools it
        answers are kept."""
        result = await client.call("peer_register", **args)
        self.peer_id = result["id"]
        self.name = result.get("name", self.name)
        self.tools = result.get("tools") or []
        return result

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """An op on this peer's connection (:meth:`PeerLink.call`). A request that never
        left (the daemon had gone) is sent again once the peer has registered anew. A
        request of an op that changes something (:data:`~roost_core.client.KEYED_OPS`)
        carries a key: when its answer is lost with the connection, it is asked again with
        the same key once the peer has registered anew (within :attr:`reask_seconds`), and
        the daemon answers what the first ask did, so it is done once, never twice. Any
        other request whose answer was lost is not sent again."""
        self._start_link()
        return await self.link.call(op, args, reask_seconds=self.reask_seconds)
