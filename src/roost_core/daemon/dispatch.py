"""One path for every request: read in one step, done by the one table of routes, answered
in request order. No I/O: lines come in from ``daemon.wire``, answers leave through
:meth:`Connection.send`.

The table (:class:`Route` per op) is built once, when the daemon is assembled: each op of
:data:`~roost_core.daemon.optable.OPS` with the service method that does it. A request
line becomes a :class:`Request` in one step (:meth:`Dispatcher.decode`: the op's
arguments read and checked, in C for the ops done with no wait, by
:mod:`~roost_core.daemon.fastdecode`). Then one of two things happens to it, in the
order the requests came: an op done with no wait (``send``, ``ack``: every message's path)
is done at once by :meth:`Dispatcher.accept`; any other, or any request behind one that
waits, goes to the connection's lane, which :meth:`Dispatcher.run` works through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import msgspec

from roost_core.daemon.callers import caller_of
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import HeldPush, Pending
from roost_core.daemon.fastdecode import FastDecoder
from roost_core.daemon.ledger import AnswerLedger
from roost_core.daemon.optable import OPS, Op
from roost_core.protocol import (
    INTERNAL,
    UNAUTHORIZED,
    UNKNOWN_OP,
    FrameDecoder,
    ProtocolError,
    error,
    ok,
    request_envelope,
)

log = logging.getLogger("roost.daemon")

#: Requests of one connection that may wait for their commit at once; the next one waits
#: for those answers (bounds what a client that never reads answers can make us hold).
MAX_PIPELINED = 256

#: An op's handler: the connection and the checked arguments in, the result out.
Handler = Callable[[Connection, dict[str, Any]], Awaitable[dict[str, Any]]]
#: An op done with no wait: its result, or one that waits for a commit (``Pending``), or a
#: foreground push held for the answer's record (``HeldPush``, keyed sends).
Acceptor = Callable[[Connection, dict[str, Any]], "dict[str, Any] | Pending | HeldPush"]


class Route(msgspec.Struct, frozen=True):
    """An op and the service methods that do it: ``handle`` (awaited), ``accept`` (done
    with no wait, for an op whose ``Op.accept`` is set), ``after`` (run once the
    answer is queued: what must follow it on the connection) and ``before`` (run before
    ``handle``: what the op must find up to date, such as the user config)."""

    name: str
    op: Op
    handle: Handler
    accept: Acceptor | None = None
    after: Callable[[Connection], None] | None = None
    before: Callable[[], None] | None = None


class Request(msgspec.Struct):
    """One request line, read: its id, its route, and its checked arguments, or the error
    to answer it with (a bad line, an unknown op, arguments that fail their checks).
    (A msgspec struct: one is made per request, in C.)"""

    id: Any
    route: Route | None
    args: dict[str, Any] | None
    error: ProtocolError | None = None


def refused(exc: ProtocolError) -> Request:
    """A line that is no request (bad JSON, too long): answered ``exc``, id null."""
    return Request(None, None, None, exc)


def _request_id(frame: dict[str, Any]) -> Any:
    """The id to answer an invalid request with (None when it has no usable one)."""
    request_id = frame.get("id")
    return request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) else None


def _allowed(conn: Connection, route: Route) -> None:
    """Refuse an op this connection may not call (``unauthorized``)."""
    who = route.op.who
    if who == "worker" and conn.job is None:
        raise ProtocolError(UNAUTHORIZED, f"{route.name} is for an authenticated worker connection")
    if who == "bound" and not conn.bound:
        raise ProtocolError(UNAUTHORIZED, f"{route.name} needs a bound connection (peer_register or worker hello)")


#: Reads the requests of the ops done with no wait (every message's path) in one step.
FAST = FastDecoder({name: op.schema for name, op in OPS.items() if op.accept})


class RequestReader(Protocol):
    """Reads a connection's bytes: whole lines, each a :class:`Request` (or the
    ``ProtocolError`` of a line too long); a partial line is held for the next bytes."""

    def feed(self, data: bytes) -> list[Request | ProtocolError]: ...


class Dispatcher:
    """Does requests by ``routes`` (one per op of ``OPS``, built once); a keyed request
    through ``ledger``, which answers a key asked before with its first answer."""

    def __init__(self, routes: dict[str, Route], ledger: AnswerLedger) -> None:
        if set(routes) != set(OPS):
            raise ValueError(f"routes and ops differ: {sorted(set(routes) ^ set(OPS))}")
        for name, route in routes.items():
            if (route.accept is not None) != route.op.accept:
                raise ValueError(f"op {name}: an accept method goes with Op.accept, and only with it")
        self.routes = routes
        self.ledger = ledger
        #: A request read by FAST -> its route.
        self.fast_routes: dict[type, Route] = {struct: routes[name] for struct, (name, _checks) in FAST.ops.items()}

    def decoder(self) -> RequestReader:
        """What a connection's bytes are read with (:class:`RequestReader`): the
        protocol's line splitter, each line read by :meth:`decode`."""
        return cast(RequestReader, FrameDecoder(decode=self.decode))  # type: ignore[arg-type]

    def decode(self, line: bytes) -> Request:
        """One request line, read and its arguments checked, in one step."""
        frame = FAST(line)
        route = self.fast_routes.get(frame.__class__)
        if route is not None:
            try:
                return Request(frame.id, route, FAST.args(frame))
            except ProtocolError as exc:
                return Request(frame.id, route, None, exc)
        if isinstance(frame, ProtocolError):
            return Request(None, None, None, frame)
        return self.request_of(frame)

    def request_of(self, frame: dict[str, Any]) -> Request:
        """A request from a frame read the general way."""
        request_id = _request_id(frame)
        try:
            request_id, name = request_envelope(frame)
        except ProtocolError as exc:
            return Request(request_id, None, None, exc)
        route = self.routes.get(name)
        if route is None:
            return Request(request_id, None, None, ProtocolError(UNKNOWN_OP, f"unknown op {name!r}"))
        try:
            return Request(request_id, route, route.op.check(frame))
        except ProtocolError as exc:
            return Request(request_id, route, None, exc)

    def accept(self, conn: Connection, request: Request | ProtocolError) -> bool:
        """Do a request that needs no wait, now, and answer it in request order; False,
        and nothing done, when it needs one (an op that awaits, or a client with
        :data:`MAX_PIPELINED` answers waiting): it goes to the lane (:meth:`run`)."""
        if type(request) is not Request:
            request = refused(request)  # type: ignore[arg-type]
        route = request.route
        if route is None:
            assert request.error is not None
            conn.answer(error(request.id, request.error))
            return True
        if route.accept is None or conn.pending >= MAX_PIPELINED:
            return False
        request_id = request.id
        try:
            # Every message's path: the checks of _allowed and the call of _accept written
            # out (this runs once per send and per ack; run() calls them for the lane).
            who = route.op.who
            if (who == "bound" and conn.job is None and conn.peer is None) or (who == "worker" and conn.job is None):
                _allowed(conn, route)
            if request.error is not None:
                raise request.error
            args = request.args
            assert args is not None
            # (An unkeyed op's acceptor never holds a push: only a keyed send does.)
            key = args.get("key") if route.op.keyed else None
            answer = route.accept(conn, args) if key is None else self._accept(conn, route, args)
            if isinstance(answer, Pending):
                _answer_when_durable(conn, request_id, answer)
            else:
                conn.answer(ok(request_id, answer))  # type: ignore[arg-type]
        except ProtocolError as exc:
            conn.answer(error(request_id, exc))
        except Exception as exc:  # an op bug answers `internal`, the daemon stays up
            log.exception("op failed")
            conn.answer(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))
        return True

    async def run(self, conn: Connection, request: Request | ProtocolError) -> None:
        """Do one request of the lane and answer it.

        Requests of one connection take effect in the order they came, and are answered
        in that order: an op done with no wait runs at once and, if its result waits for
        a journal commit, is answered from that commit's callback while the next requests
        go on (consecutive sends of one client share a commit); any other op first waits
        until those answers are out."""
        if type(request) is not Request:
            request = refused(request)  # type: ignore[arg-type]
        request_id = request.id
        route = request.route
        try:
            if route is None:
                assert request.error is not None
                raise request.error
            _allowed(conn, route)
            if request.error is not None:
                raise request.error
            args = request.args
            assert args is not None
            if route.accept is not None:
                if conn.pending >= MAX_PIPELINED:
                    await conn.drained()
                answer = self._accept(conn, route, args)
                if isinstance(answer, Pending):
                    _answer_when_durable(conn, request_id, answer)
                    return
                await conn.drained()
                conn.send(ok(request_id, answer))
                return
            await conn.drained()
            if route.before is not None:
                route.before()
            handle = route.handle
            key = args.get("key") if route.op.keyed else None
            if key is None:
                result = await handle(conn, args)
            else:
                result = await self.ledger.run(caller_of(conn), route.name, key, lambda: handle(conn, args), args=args)
            conn.send(ok(request_id, result))
            if route.after is not None:
                route.after(conn)
        except ProtocolError as exc:
            await conn.drained()
            conn.send(error(request_id, exc))
        except Exception as exc:  # an op bug answers `internal`, the daemon stays up
            log.exception("op failed")
            await conn.drained()
            conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))

    def _accept(self, conn: Connection, route: Route, args: dict[str, Any]) -> dict[str, Any] | Pending:
        """Do an op done with no wait; a keyed one through the ledger, which answers a key
        asked before with its first answer."""
        accept = route.accept
        assert accept is not None
        key = args.get("key") if route.op.keyed else None
        if key is None:
            return accept(conn, args)  # type: ignore[return-value]
        return self.ledger.accept(caller_of(conn), route.name, key, lambda: accept(conn, args), args=args)


def _answer_when_durable(conn: Connection, request_id: Any, answer: Pending) -> None:
    """Answer ``answer`` once its commit is over, in one callback of that commit with the
    connection's other answers that wait for it (commits finish in order, and a commit's
    callbacks run in the order they were added, so answers keep request order)."""
    conn.pending += 1
    if conn.batch is not None and conn.last_commit is answer.commit:
        conn.batch.append((request_id, answer.finish))
        return
    batch = conn.batch = [(request_id, answer.finish)]
    conn.last_commit = answer.commit
    # (Called at once if the commit is over already: the batch holds this answer first.)
    answer.commit.when_done(lambda _commit: _answer_batch(conn, batch))


def _answer_batch(conn: Connection, batch: list[tuple[Any, Callable[[], dict[str, Any]]]]) -> None:
    """Make and send the answers of ``batch``, in order: their commit is over."""
    if conn.batch is batch:
        conn.batch = None
    try:
        for request_id, finish in batch:
            try:
                conn.send(ok(request_id, finish()))
            except ProtocolError as exc:
                conn.send(error(request_id, exc))
            except Exception as exc:  # as in Dispatcher.run
                log.exception("op failed")
                conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))
    finally:
        conn.answered_pending(len(batch))
