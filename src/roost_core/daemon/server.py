"""The daemon's I/O: the per-user Unix socket, the accept loop, one task pair per
connection, and the dispatch table from op name to handler, argument schema and who may
call it.

One daemon per user: an exclusive ``flock`` on ``daemon.lock`` (released by the kernel
even on ``kill -9``) decides who owns the socket, and a connect probe refuses to steal the
address of a live daemon. A socket file left by a dead daemon is removed.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from roost_core.config import Config
from roost_core.daemon.base import Pending
from roost_core.daemon.connection import Connection
from roost_core.daemon.core import Daemon
from roost_core.paths import Paths
from roost_core.protocol import (
    INTERNAL,
    UNAUTHORIZED,
    UNKNOWN_OP,
    Field,
    FrameDecoder,
    ProtocolError,
    error,
    ok,
    compile_args,
    request_envelope,
)
from roost_core.worker.spawner import Spawner

log = logging.getLogger("roost.daemon")

NAME = 200
TEXT = 1_000_000
PATH = 4096
#: Requests of one connection that may wait for their commit at once; the next one waits
#: for those answers (bounds what a client that never reads answers can make us hold).
MAX_PIPELINED = 256
#: A refused client's bytes are read and dropped up to these bounds before the close.
REFUSED_DRAIN_BYTES = 1024 * 1024
REFUSED_DRAIN_SECONDS = 5.0
#: Requests waiting in one connection's lane before its socket is no longer read (until
#: the lane is empty again): a client cannot make the daemon hold more than this.
LANE_PAUSE = 64


@attrs.frozen
class Op:
    handler: str
    schema: dict[str, Field]
    #: "any" (CLI), "bound" (worker or foreground peer), "worker"
    who: str = "any"
    after: str | None = None
    #: A method that does the op with no wait and may return a ``Pending`` result: the
    #: connection's next requests go on while it waits for its journal commit.
    accept: str | None = None
    #: ``schema`` compiled (``protocol.compile_args``): the arguments, checked, from the frame.
    check: Callable[[dict[str, Any]], dict[str, Any]] = attrs.field(init=False, eq=False, repr=False)

    def bind(self, name: str) -> Op:
        """This op with its schema compiled for op ``name``."""
        object.__setattr__(self, "check", compile_args(self.schema, name))
        return self


OPS: dict[str, Op] = {
    "daemon_status": Op("op_daemon_status", {}),
    "daemon_stop": Op("op_daemon_stop", {}),
    "tools": Op("op_tools", {}),
    "test_clock": Op("op_test_clock", {"advance": Field(float, required=True, check=lambda v: None if v >= 0 else "must be >= 0")}),
    "start": Op(
        "op_start",
        {
            "task": Field(str, required=True, max_len=TEXT),
            "name": Field(str, max_len=NAME),
            "cwd": Field(str, max_len=PATH),
            "host": Field(str, max_len=NAME),
            "scenario": Field((str, dict), max_len=TEXT),
            "model": Field(str, max_len=NAME),
            "thinking": Field(str, max_len=NAME),
            "trace": Field(str, max_len=NAME),
            "session": Field(str, max_len=PATH),
        },
    ),
    "jobs": Op("op_jobs", {}),
    "agents": Op("op_agents", {}),
    "watch": Op("op_watch", {}),
    "dead": Op("op_dead", {}),
    "reply": Op("op_reply", {"job": Field(str, required=True, max_len=NAME), "text": Field(str, required=True, max_len=TEXT)}),
    "stop": Op("op_stop", {"job": Field(str, required=True, max_len=NAME)}),
    "remove": Op("op_remove", {"job": Field(str, required=True, max_len=NAME)}),
    "log": Op("op_log", {"job": Field(str, required=True, max_len=NAME), "entries": Field(bool)}),
    "worker_hello": Op(
        "op_worker_hello",
        {"job": Field(str, required=True, max_len=NAME), "token": Field(str, required=True, max_len=NAME), "pid": Field(int)},
        after="after_hello",
    ),
    "warm_hello": Op(
        "op_warm_hello",
        {"job": Field(str, required=True, max_len=NAME), "token": Field(str, required=True, max_len=NAME), "pid": Field(int)},
    ),
    "warm_ready": Op("op_warm_ready", {}),
    "job_status": Op(
        "op_job_status",
        {
            "state": Field(str, check=lambda v: None if v in ("running", "idle", "needs_input", "done", "failed") else "is not a job state"),
            "status": Field((str, type(None)), max_len=NAME * 5),
            "summary": Field((str, type(None)), max_len=2000),
            "question": Field((str, type(None)), max_len=8000),
            "error": Field((str, type(None)), max_len=8000),
            "dialog": Field(bool),
            "settled": Field(bool),
            "trace": Field((str, type(None)), max_len=NAME),
            "hops": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "causes": Field(list, max_len=1000),
            "hostPid": Field((int, type(None)), check=lambda v: None if v is None or 0 < v < 2**31 else "is not a process id"),
            "broadcastChain": Field(bool),
            "usage": Field(dict, max_len=10),
        },
        who="worker",
    ),
    "ack": Op("op_ack", {"seq": Field(int, required=True, check=lambda v: None if v >= 0 else "must be >= 0")}, who="bound", accept="accept_ack"),
    "peer_register": Op(
        "op_peer_register",
        {
            "session": Field((str, type(None)), max_len=PATH),
            "name": Field(str, max_len=NAME),
            "cwd": Field((str, type(None)), max_len=PATH),
            "pid": Field(int, required=True, check=lambda v: None if 0 < v < 2**31 else "is not a process id"),
            "sessionId": Field(str, max_len=NAME),
            "lastSeq": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "host": Field(str, max_len=NAME),
        },
        after="after_register",
    ),
    "peers": Op("op_peers", {"watch": Field(str, max_len=NAME)}, who="bound"),
    "tool_call": Op(
        "op_tool_call",
        {
            "name": Field(str, required=True, max_len=NAME),
            "args": Field(dict, required=True),
            "hops": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "broadcastChain": Field(bool),
        },
        who="bound",
    ),
    "spawn": Op(
        "op_spawn",
        {
            "task": Field(str, required=True, max_len=TEXT),
            "name": Field(str, max_len=NAME),
            "cwd": Field(str, max_len=PATH),
            "model": Field(str, max_len=NAME),
            "thinking": Field(str, max_len=NAME),
            "host": Field(str, max_len=NAME),
            "scenario": Field((str, dict), max_len=TEXT),
        },
        who="bound",
    ),
    "handback": Op(
        "op_handback",
        {
            "result": Field((str, type(None)), max_len=TEXT),
            "state": Field(str, required=True, check=lambda v: None if v in ("done", "idle", "needs_input", "failed") else "is not a settled state"),
            "question": Field((str, type(None)), max_len=8000),
            "error": Field((str, type(None)), max_len=8000),
            "causes": Field(list, required=True, max_len=1000),
            "run": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
        },
        who="worker",
    ),
    "send": Op(
        "op_send",
        {
            "to": Field(str, required=True, max_len=NAME),
            "message": Field(str, required=True, max_len=TEXT),
            "reply_to": Field(str, max_len=NAME),
            "urgent": Field(bool),
        },
        who="bound",
        accept="accept_send",
    ),
}


OPS = {name: op.bind(name) for name, op in OPS.items()}


class DaemonRunning(RuntimeError):
    """Another daemon holds this user's socket."""


def acquire_daemon_lock(paths: Paths) -> int:
    """Take the one-daemon-per-user lock, or raise :class:`DaemonRunning`."""
    paths.ensure()
    fd = os.open(paths.runtime_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise DaemonRunning(f"a roost daemon is already running for {paths.home}") from exc
        raise
    return fd


def socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


async def serve(
    paths: Paths,
    config: Config,
    pm: Any,
    *,
    durable: bool = True,
    task_status: anyio.abc.TaskStatus[Daemon] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until SIGTERM/SIGINT or ``daemon_stop``; ``task_status`` gets the
    :class:`Daemon` once the socket listens."""
    lock_fd = acquire_daemon_lock(paths)
    sock_path = paths.socket
    try:
        if sock_path.exists() or sock_path.is_symlink():
            if socket_is_live(sock_path):
                raise DaemonRunning(f"a roost daemon is already listening on {sock_path}")
            sock_path.unlink()
        daemon = Daemon(paths, config, pm, durable=durable)
        daemon.load()
        # What is loaded now lives as long as the daemon: the collector need not walk it
        # again and again (every message makes young objects, and each young collection
        # that reaches the oldest generation would walk it all).
        gc.freeze()
        # The SIGTERM handler is in place before anyone can connect: a client that sees the
        # socket may stop the daemon at once, and must get a graceful stop, not a kill.
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            old_umask = os.umask(0o077)
            try:
                listener = await anyio.create_unix_listener(sock_path)
            finally:
                os.umask(old_umask)
            os.chmod(sock_path, 0o600)
            fd = os.open(paths.daemon_pidfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            async with listener, anyio.create_task_group() as tg:
                assert daemon.journal is not None
                await tg.start(daemon.journal.run)
                daemon.tg = tg
                daemon.reconcile_workers()
                tg.start_soon(daemon.monitor)
                tg.start_soon(daemon.watch.run)
                accepting = anyio.CancelScope()

                async def accept() -> None:
                    with accepting:
                        await _accept_loop(daemon, listener, tg)

                tg.start_soon(accept)
                tg.start_soon(_signals, daemon, signals)
                tg.start_soon(_start_spawner, daemon)
                task_status.started(daemon)
                await daemon.stopping.wait()
                # Nobody new while the old connections flush: a peer reconnecting now would
                # be served by a daemon that reads no more acks and is closing its journal.
                accepting.cancel()
                await listener.aclose()
                log.info("stopping: no new connections; flushing %d open ones", len(daemon.connections))
                await daemon.shutdown()
                tg.cancel_scope.cancel()
    finally:
        try:
            if paths.daemon_pidfile.read_text().strip() == str(os.getpid()):
                paths.daemon_pidfile.unlink()
                sock_path.unlink()
        except OSError:
            pass
        os.close(lock_fd)


async def _start_spawner(daemon: Daemon) -> None:
    """Start the warm fork server workers are forked from. A task of its own, started
    last: its imports take a core for a moment, which must not delay the first answers."""
    daemon.spawner = Spawner.started()


async def _signals(daemon: Daemon, signals: Any) -> None:
    async for _ in signals:
        daemon.stopping.set()
        return


async def _accept_loop(daemon: Daemon, listener: Any, tg: anyio.abc.TaskGroup) -> None:
    number = 0
    refuser = daemon.refuser
    while True:
        try:
            stream = await listener.accept()
        except (anyio.BrokenResourceError, OSError) as exc:
            # Out of file descriptors: refuse cleanly, never spin or die (daemon/accept.py).
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if not isinstance(cause, OSError):
                raise
            await refuser.failed(listener, cause)
            continue
        refuser.accepted()
        number += 1
        tg.start_soon(_connection, daemon, Connection(stream, number))


async def _connection(daemon: Daemon, conn: Connection) -> None:
    """One connection's error boundary: whatever happens here never reaches the others."""
    daemon.connections.add(conn)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_writer, conn)
            if not conn.same_user:
                await _refuse(conn, error(None, ProtocolError(UNAUTHORIZED, "this daemon serves its own user only")))
            elif conn.can_read_by_callback:
                await _serve(daemon, conn)
            else:
                await _reader(daemon, conn)
            conn.close()
    except Exception:  # noqa: BLE001 - the boundary: log and drop this client only
        log.exception("connection %s failed", conn.number)
    finally:
        conn.stop_reading()  # off the loop before its descriptor is closed
        conn.close()
        daemon.connections.discard(conn)
        daemon.peer_disconnected(conn)
        with anyio.CancelScope(shield=True):
            try:
                await conn.stream.aclose()
            except Exception:  # noqa: BLE001
                pass


async def _refuse(conn: Connection, frame: dict[str, Any]) -> None:
    """Answer a client this daemon will not serve so that it can always read why.

    Closing right after the answer would race the client's first write: a write that
    lands after the close fails (``EPIPE``) and the client never reads the refusal. So:
    the answer, then our write side shut (the client reads the answer, then its end), then
    whatever the client writes read and dropped until it closes, within a bound of bytes
    and time."""
    conn.send(frame)
    conn.close()
    await conn.flushed.wait()
    if conn.raw is None:
        return
    try:
        conn.raw.shutdown(socket.SHUT_WR)
    except OSError:
        return
    taken = 0
    with anyio.move_on_after(REFUSED_DRAIN_SECONDS):
        while taken < REFUSED_DRAIN_BYTES:
            try:
                taken += len(await conn.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return


async def _writer(conn: Connection) -> None:
    try:
        await conn.writer()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        conn.close()


async def _serve(daemon: Daemon, conn: Connection) -> None:
    """Serve a connection whose reads come from a loop callback: each request that needs
    no wait (:func:`accept_frame`) is done in that callback, the others wait in the
    connection's lane for this task, in order."""
    decoder = FrameDecoder()

    def on_data(data: bytes) -> None:
        for frame in decoder.feed(data):
            if conn.closed:
                return
            if conn.lane or not accept_frame(daemon, conn, frame):
                conn.to_lane(frame)
        if len(conn.lane) >= LANE_PAUSE:
            conn.pause_reading()

    conn.start_reading(on_data)
    while True:
        await conn.lane_wait()
        if conn.closed or not conn.lane:
            return
        # The request stays in the lane while it is done, so none that comes meanwhile
        # is done before it.
        while conn.lane and not conn.closed:
            await handle_frame(daemon, conn, conn.lane[0])
            del conn.lane[0]
        conn.resume_reading()


async def _reader(daemon: Daemon, conn: Connection) -> None:
    decoder = FrameDecoder()
    while not conn.closed:
        try:
            data = await conn.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        for frame in decoder.feed(data):
            if conn.closed:
                return
            await handle_frame(daemon, conn, frame)


def _request_id(frame: dict[str, Any]) -> Any:
    """The id to answer an invalid request with (None when it has no usable one)."""
    request_id = frame.get("id")
    return request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) else None


def _checked(conn: Connection, name: str, op: Op | None, frame: dict[str, Any]) -> dict[str, Any]:
    """The request's arguments, once the op exists, this connection may call it, and
    they are valid (else the ``ProtocolError`` to answer)."""
    if op is None:
        raise ProtocolError(UNKNOWN_OP, f"unknown op {name!r}")
    if op.who == "worker" and conn.job is None:
        raise ProtocolError(UNAUTHORIZED, f"{name} is for an authenticated worker connection")
    if op.who == "bound" and not conn.bound:
        raise ProtocolError(UNAUTHORIZED, f"{name} needs a bound connection (peer_register or worker hello)")
    return op.check(frame)


def accept_frame(daemon: Daemon, conn: Connection, frame: dict[str, Any] | ProtocolError) -> bool:
    """Do a request that needs no wait, now, and answer it in request order; False, and
    nothing done, when it needs one (an op without an ``accept`` method, or a client with
    :data:`MAX_PIPELINED` answers waiting): it goes to :func:`handle_frame` then."""
    if isinstance(frame, ProtocolError):
        conn.answer(error(None, frame))
        return True
    request_id = _request_id(frame)
    try:
        request_id, name = request_envelope(frame)
        op = OPS.get(name)
        if op is not None and (op.accept is None or conn.pending >= MAX_PIPELINED):
            return False
        args = _checked(conn, name, op, frame)
        assert op is not None and op.accept is not None
        answer = getattr(daemon, op.accept)(conn, args)
        if isinstance(answer, Pending):
            _answer_when_durable(conn, request_id, answer)
        else:
            conn.answer(ok(request_id, answer))
    except ProtocolError as exc:
        conn.answer(error(request_id, exc))
    except Exception as exc:  # noqa: BLE001 - an op bug answers `internal`, the daemon stays up
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
    request_id = _request_id(frame)
    try:
        request_id, name = request_envelope(frame)
        op = OPS.get(name)
        args = _checked(conn, name, op, frame)
        assert op is not None
        if op.accept is not None:
            if conn.pending >= MAX_PIPELINED:
                await conn.drained()
            answer = getattr(daemon, op.accept)(conn, args)
            if isinstance(answer, Pending):
                _answer_when_durable(conn, request_id, answer)
                return
            await conn.drained()
            conn.send(ok(request_id, answer))
            return
        await conn.drained()
        handler: Callable[[Connection, dict[str, Any]], Awaitable[dict[str, Any]]] = getattr(daemon, op.handler)
        result = await handler(conn, args)
        conn.send(ok(request_id, result))
        if op.after:
            getattr(daemon, op.after)(conn)
    except ProtocolError as exc:
        await conn.drained()
        conn.send(error(request_id, exc))
    except Exception as exc:  # noqa: BLE001 - an op bug answers `internal`, the daemon stays up
        log.exception("op failed")
        await conn.drained()
        conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))


def _answer_when_durable(conn: Connection, request_id: Any, answer: Pending) -> None:
    """Answer ``answer`` from its commit's callback (commits finish in order, and a
    commit's callbacks run in the order they were added, so answers keep request order)."""
    conn.wait_for(answer.commit)

    def done(_commit: Any) -> None:
        try:
            conn.send(ok(request_id, answer.finish()))
        except ProtocolError as exc:
            conn.send(error(request_id, exc))
        except Exception as exc:  # noqa: BLE001 - as in handle_frame
            log.exception("op failed")
            conn.send(error(request_id, ProtocolError(INTERNAL, f"internal error: {type(exc).__name__}")))
        finally:
            conn.answered_pending()

    answer.commit.when_done(done)
