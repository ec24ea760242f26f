"""How one request is done and answered in request order, by the table of ops
(:mod:`~roost_core.daemon.optable`: handler, argument schema, who may call it). No I/O:
requests come in as decoded frames, answers leave through :meth:`Connection.send`
(``daemon.wire`` reads and writes the socket).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from roost_core.daemon.connection import Connection
from roost_core.daemon.core import Daemon
from roost_core.daemon.delivery import Pending
from roost_core.daemon.fastdecode import FastDecoder
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


def _request_id(frame: dict[str, Any]) -> Any:
    """The id to answer an invalid request with (None when it has no usable one)."""
    request_id = frame.get("id")
    return request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) else None


def _checked(conn: Connection, name: str, op: Op | None, frame: dict[str, Any]) -> dict[str, Any]:
    """The request's arguments, once the op exists, this connection may call it, and
    they are valid (else the ``ProtocolError`` to answer)."""
    if op is None:
        raise ProtocolError(UNKNOWN_OP, f"unknown op {name!r}")
    _allowed(conn, name, op)
    return op.check(frame)


def _allowed(conn: Connection, name: str, op: Op) -> None:
    """Refuse an op this connection may not call (``unauthorized``)."""
    if op.who == "worker" and conn.job is None:
        raise ProtocolError(UNAUTHORIZED, f"{name} is for an authenticated worker connection")
    if op.who == "bound" and not conn.bound:
        raise ProtocolError(UNAUTHORIZED, f"{name} needs a bound connection (peer_register or worker hello)")


#: Reads the requests of the ops with an ``accept`` method (every message's path) in one
#: step; the daemon reads every request line with it (:func:`request_decoder`).
FAST = FastDecoder({name: op.schema for name, op in OPS.items() if op.accept is not None})
#: A request read by FAST -> its op's name and its op.
FAST_OPS: dict[type, tuple[str, Op]] = {struct: (name, OPS[name]) for struct, (name, _checks) in FAST.ops.items()}


def request_decoder() -> FrameDecoder:
    """What the daemon reads a connection's bytes with: whole request lines, each a frame
    dict, a ``ProtocolError``, or a request of :data:`FAST`."""
    return FrameDecoder(decode=FAST)


def accept_frame(daemon: Daemon, conn: Connection, frame: Any) -> bool:
    """Do a request that needs no wait, now, and answer it in request order; False, and
    nothing done, when it needs one (an op without an ``accept`` method, or a client with
    :data:`MAX_PIPELINED` answers waiting): it goes to :func:`handle_frame` then."""
    op: Op | None
    fast = FAST_OPS.get(type(frame))
    if fast is not None:
        # Read and checked in one step (FAST; every message's path): its op has an
        # accept method.
        if conn.pending >= MAX_PIPELINED:
            return False
        request_id = frame.id
        name, op = fast
        try:
            _allowed(conn, name, op)
            args = FAST.args(frame)
        except ProtocolError as exc:
            conn.answer(error(request_id, exc))
            return True
    elif isinstance(frame, ProtocolError):
        conn.answer(error(None, frame))
        return True
    else:
        request_id = _request_id(frame)
        try:
            request_id, name = request_envelope(frame)
            op = OPS.get(name)
            if op is not None and (op.accept is None or conn.pending >= MAX_PIPELINED):
                return False
            args = _checked(conn, name, op, frame)
        except ProtocolError as exc:
            conn.answer(error(request_id, exc))
            return True
    assert op is not None and op.accept is not None
    try:
        answer = _accept(daemon, conn, name, op, args)
        if isinstance(answer, Pending):
            _answer_when_durable(conn, request_id, answer)
        else:
            conn.answer(ok(request_id, answer))
    except ProtocolError as exc:
        conn.answer(error(request_id, exc))
    except Exception as exc:  # an op bug answers `internal`, the daemon stays up
        log.exception("op failed")
        conn.answer(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))
    return True


async def handle_frame(daemon: Daemon, conn: Connection, frame: dict[str, Any] | ProtocolError) -> None:
    """Do one request and answer it.

    Requests of one connection take effect in the order they came, and are answered in
    that order: an op with an ``accept`` method runs at once and, if its result waits for
    a journal commit, is answered from that commit's callback while the next requests go
    on (consecutive sends of one client share a commit); any other op first waits until
    those answers are out."""
    if isinstance(frame, ProtocolError):
        await conn.drained()
        conn.send(error(None, frame))
        return
    if not isinstance(frame, dict):
        frame = FAST.as_frame(frame)
    request_id = _request_id(frame)
    try:
        request_id, name = request_envelope(frame)
        op = OPS.get(name)
        args = _checked(conn, name, op, frame)
        assert op is not None
        if op.accept is not None:
            if conn.pending >= MAX_PIPELINED:
                await conn.drained()
            answer = _accept(daemon, conn, name, op, args)
            if isinstance(answer, Pending):
                _answer_when_durable(conn, request_id, answer)
                return
            await conn.drained()
            conn.send(ok(request_id, answer))
            return
        await conn.drained()
        handler: Callable[[Connection, dict[str, Any]], Awaitable[dict[str, Any]]] = getattr(daemon, op.handler)
        key = args.get("key") if op.keyed else None
        if key is None:
            result = await handler(conn, args)
        else:
            result = await daemon.ledger.run(daemon.caller_of(conn), name, key, lambda: handler(conn, args))
        conn.send(ok(request_id, result))
        if op.after:
            getattr(daemon, op.after)(conn)
    except ProtocolError as exc:
        await conn.drained()
        conn.send(error(request_id, exc))
    except Exception as exc:  # an op bug answers `internal`, the daemon stays up
        log.exception("op failed")
        await conn.drained()
        conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))


def _accept(daemon: Daemon, conn: Connection, name: str, op: Op, args: dict[str, Any]) -> dict[str, Any] | Pending:
    """Do an op with an ``accept`` method; a keyed one through the ledger, which answers a
    key asked before with its first answer."""
    do: Callable[[Connection, dict[str, Any]], dict[str, Any] | Pending] = getattr(daemon, op.accept)  # type: ignore[arg-type]
    key = args.get("key") if op.keyed else None
    if key is None:
        return do(conn, args)
    return daemon.ledger.accept(daemon.caller_of(conn), name, key, lambda: do(conn, args))


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
                conn.send({"id": request_id, "ok": True, "result": finish()})  # (protocol.ok, inlined)
            except ProtocolError as exc:
                conn.send(error(request_id, exc))
            except Exception as exc:  # as in handle_frame
                log.exception("op failed")
                conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))
    finally:
        conn.answered_pending(len(batch))
