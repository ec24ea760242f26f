"""The daemon's life: the per-user Unix socket, the accept loop handing each client to
:mod:`roost_core.daemon.wire`, the daemon's tasks, and the stop.

One daemon per user: an exclusive ``flock`` on ``daemon.lock`` (released by the kernel
even on ``kill -9``) decides who owns the socket, and a connect probe refuses to steal the
address of a live daemon. A socket file left by a dead daemon is removed.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from roost_core.config import Config
from roost_core.daemon.connection import Flusher
from roost_core.daemon.core import Daemon
from roost_core.daemon.wire import serve_socket
from roost_core.paths import Paths
from roost_core.worker.spawner import Spawner

log = logging.getLogger("roost.daemon")


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
                daemon.start(tg)
                tg.start_soon(daemon.monitor)
                tg.start_soon(daemon.watchers.run)
                accepting = anyio.CancelScope()

                async def accept() -> None:
                    with accepting:
                        await _accept_loop(daemon, listener)

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


async def _accept_loop(daemon: Daemon, listener: Any) -> None:
    number = 0
    refuser = daemon.refuser
    # Job records an op changed, and dead letters it buried, are written before its
    # answers leave (Daemon.before_output); the pass's journal records are handed
    # over before either.
    assert daemon.journal is not None
    flusher = Flusher(asyncio.get_running_loop(), before_write=daemon.before_output, commit=daemon.journal.hand_over_due)
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
        # The socket goes to an asyncio transport (``daemon.wire``); the stream that
        # wrapped it is not used again.
        await serve_socket(daemon, stream.extra(SocketAttribute.raw_socket), number, flusher)
