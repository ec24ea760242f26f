"""How the daemon starts worker processes: forked by its warm fork server
(:mod:`roost_core.worker.forkserver`), else by ``Popen`` as ``python -m roost_core.worker``.

The daemon calls :meth:`Spawner.start_worker` from sync code. A fork answers within a
few ms (the server sends the pid right after ``fork``), so the daemon waits for it; only
the first worker after the server's start may wait for its imports to finish. A server
that is gone, wedged or answers badly is dropped, the job gets a ``Popen`` worker, and a
new server is started for the jobs after it (not again after :data:`MAX_BROKEN_STARTS`
servers that never became ready): a job always starts.

Either way the daemon gets an object with the part of the ``Popen`` API it uses: ``pid``,
``poll()`` (the exit code, negative signal number when killed), plus ``create_time`` and
``orphaned`` (its exit code can no longer be known: only liveness tells).
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import subprocess
import sys
import time
from typing import Any

from roost_core import locks

log = logging.getLogger("roost.daemon")

#: How long a worker start waits for a fork server that is still importing.
READY_TIMEOUT = 10.0
#: How long a worker start waits for the pid of its fork (normally a few ms).
ANSWER_TIMEOUT = 3.0
#: Fork servers that may die or hang before being ready before the daemon stops trying.
MAX_BROKEN_STARTS = 2
#: How long a stopping daemon waits for its fork server to exit.
CLOSE_TIMEOUT = 2.0


class ForkServerError(RuntimeError):
    """The fork server is gone, not ready in time, or answered badly."""


class ForkRefused(ForkServerError):
    """The fork server could not start this worker (e.g. its log cannot be opened) but
    is fine itself."""


class ForkedWorker:
    """A worker forked by the fork server; its exit code comes from the server."""

    def __init__(self, pid: int, create_time: float | None, server: ForkServer) -> None:
        self.pid = pid
        self.create_time = create_time
        self.server = server
        self.returncode: int | None = None
        self.orphaned = False

    def poll(self) -> int | None:
        """The exit code once the fork server has reported it, else None."""
        if self.returncode is None and not self.orphaned:
            self.server.pump()
        return self.returncode


class PopenWorker(subprocess.Popen[bytes]):
    """A worker started as ``python -m roost_core.worker`` (the fallback)."""

    #: The daemon is its parent: ``poll()`` always knows.
    orphaned = False
    create_time: float | None = None


def popen_worker(env: dict[str, str], cwd: str, log_path: str) -> PopenWorker:
    """Start a worker the slow way: a fresh interpreter in its own session."""
    with open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log_file:
        process = PopenWorker(
            [sys.executable, "-m", "roost_core.worker"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            close_fds=True,
        )
    process.create_time = locks.create_time(process.pid)
    return process


class ForkServer:
    """One fork server process and the daemon's end of its channel."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            # close_fds: the server gets the channel and stdio only, never the daemon's
            # lock, its listening socket or a connection.
            self.process = subprocess.Popen(
                [sys.executable, "-m", "roost_core.worker.forkserver", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(ANSWER_TIMEOUT)
        self.channel: socket.socket | None = ours
        # poll, not select: a busy daemon's fd numbers go past FD_SETSIZE.
        self.poller = select.poll()
        self.poller.register(ours, select.POLLIN)
        self.ready = False
        self.buffer = b""
        self.next_id = 0
        self.answers: dict[int, dict[str, Any]] = {}
        #: Workers whose exit is not reported yet, by pid.
        self.children: dict[int, ForkedWorker] = {}

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.channel is not None and self.process.poll() is None

    def spawn(self, env: dict[str, str], cwd: str, log_path: str) -> ForkedWorker:
        """Fork a worker; raises :class:`ForkServerError` when that cannot be done."""
        if not self.ready:
            self.wait_until(lambda: self.ready, READY_TIMEOUT, "ready")
        self.next_id += 1
        request_id = self.next_id
        self.send({"id": request_id, "env": env, "cwd": cwd, "log": log_path})
        self.wait_until(lambda: request_id in self.answers, ANSWER_TIMEOUT, "an answer")
        answer = self.answers.pop(request_id)
        pid = answer.get("pid")
        if "error" in answer:
            raise ForkRefused(f"the fork server could not start the worker: {answer['error']}")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ForkServerError(f"the fork server answered {answer!r}")
        created = answer.get("created")
        worker = ForkedWorker(pid, float(created) if isinstance(created, (int, float)) else None, self)
        self.children[pid] = worker
        return worker

    def send(self, message: dict[str, Any]) -> None:
        if self.channel is None:
            raise ForkServerError("the fork server is gone")
        try:
            self.channel.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            self.lost()
            raise ForkServerError(f"cannot reach the fork server: {exc}") from exc

    def wait_until(self, done: Any, timeout: float, what: str) -> None:
        """Read the channel until ``done()``; exit notices read meanwhile are kept."""
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ForkServerError(f"the fork server sent no {what} within {timeout:.0f}s")
            if not self.read(remaining):
                raise ForkServerError(f"the fork server exited (code {self.process.poll()})")

    def pump(self) -> None:
        """Take in whatever the server has sent, without waiting."""
        if self.channel is not None:
            self.read(0)

    def read(self, timeout: float) -> bool:
        """Read once (waiting up to ``timeout``) and handle every whole line; False when
        the server is gone."""
        if self.channel is None:
            return False
        try:
            if not self.poller.poll(timeout * 1000):
                return True
            data = self.channel.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.lost()
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                log.warning("fork server sent a bad line: %r", line[:200])
                continue
            if isinstance(message, dict):
                self.take(message)
        return True

    def take(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            worker = self.children.pop(message["exit"], None)
            if worker is not None and isinstance(message.get("code"), int):
                worker.returncode = message["code"]
        elif "ready" in message:
            self.ready = True
        elif isinstance(message.get("id"), int):
            self.answers[message["id"]] = message

    def lost(self) -> None:
        """The channel is closed: nobody will report the exits of the workers it forked."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        for worker in self.children.values():
            worker.orphaned = True
        self.children.clear()
        self.process.poll()

    def kill(self) -> None:
        """Drop a server that failed us (its forked workers keep running)."""
        self.lost()
        if self.process.poll() is None:
            self.process.kill()
            try:
                self.process.wait(1)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        """Close the channel: the server exits (its workers keep running)."""
        self.lost()


class Spawner:
    """The daemon's way to start workers: its current fork server, or ``Popen``."""

    def __init__(self) -> None:
        self.server: ForkServer | None = None
        self.broken_starts = 0

    @classmethod
    def started(cls) -> Spawner:
        spawner = cls()
        spawner.restart()
        return spawner

    def restart(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server = None
        if self.broken_starts >= MAX_BROKEN_STARTS:
            log.warning("%d worker fork servers never became ready; workers start without one", self.broken_starts)
            return
        try:
            self.server = ForkServer()
        except OSError as exc:
            log.warning("cannot start the worker fork server: %s", exc)
            self.broken_starts += 1

    def start_worker(self, env: dict[str, str], cwd: str, log_path: str) -> ForkedWorker | PopenWorker:
        """A worker for one job: forked when the fork server can, else by ``Popen``."""
        server = self.server
        if server is not None and server.alive:
            try:
                return server.spawn(env, cwd, log_path)
            except ForkRefused as exc:
                # The server is fine; the same start by Popen says what is wrong, as before.
                log.warning("worker fork server %s: %s; starting the worker without it", server.pid, exc)
            except ForkServerError as exc:
                log.warning("worker fork server %s failed (%s); starting the worker without it", server.pid, exc)
                if not server.ready:
                    self.broken_starts += 1
                self.restart()
        elif server is not None:
            log.warning("worker fork server %s is gone (exit %s); starting a new one", server.pid, server.process.poll())
            if not server.ready:
                self.broken_starts += 1
            self.restart()
        return popen_worker(env, cwd, log_path)

    async def aclose(self) -> None:
        """Stop the fork server: close its channel and give it a moment to exit."""
        import anyio

        server, self.server = self.server, None
        if server is None:
            return
        server.close()
        deadline = time.monotonic() + CLOSE_TIMEOUT
        while server.process.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110 - Popen has no awaitable exit
            await anyio.sleep(0.01)
        if server.process.poll() is None:
            server.kill()

