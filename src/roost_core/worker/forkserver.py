"""The worker fork server: one helper process per daemon that has already imported
everything a worker needs, and forks a worker per job.

A worker started as ``python -m roost_core.worker`` spends ~100 ms importing before it
can say hello (and more: ``PYTHONDONTWRITEBYTECODE`` recompiles roost at every start). The
daemon starts this process once (:mod:`roost_core.worker.spawner`) with one end of a
socketpair as its only extra fd; it imports the worker and the built-in hosts without
running an event loop, says ``ready``, and then serves newline-delimited JSON:

* daemon -> server: ``{"id": n, "env": {...}, "cwd": path, "log": path}``: fork a worker;
* server -> daemon: ``{"ready": pid}`` once, after the imports;
  ``{"id": n, "pid": p, "created": t}`` right after each fork (``created`` is the child's
  create time, read before the child can be reaped, so it always names the right process),
  or ``{"id": n, "error": text}``;
  ``{"exit": pid, "code": c}`` when a child exits, ``c`` as ``Popen.returncode`` has it
  (negative signal number when killed).

The child becomes what ``python -m roost_core.worker`` in its own session would have been:
new session, the job's cwd and environment (replaced wholesale: the server imported under
the daemon's environment), stdin from /dev/null, stdout and stderr appended to the job
log, no other fd, the signal handling the interpreter started with; then it runs
:func:`roost_core.worker.main.run` and ``os._exit``\\ s with its code.

The server exits when the daemon's end of the channel closes (the daemon stopped or was
killed): its children are workers in sessions of their own and keep running, to be
re-found by the next daemon by pid and create time, as when the daemon itself dies.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any

#: What a worker imports, imported once here so a forked worker starts with it loaded.
#: anyio picks its backend module at ``anyio.run``: load it too.
PRELOAD = (
    "roost_core.worker.main",
    "anyio._backends._asyncio",
    "roost_core.hosts.scripted",
    "roost_core.hosts.shell",
    # A worker builds its plugin manager when its first run settles (the settle hook);
    # preload() imports the default plugins too.
    "roost_core.plugins",
    "roost_core.policy",
)
#: The worker itself: without it the server is no use, and says so by exiting.
ESSENTIAL = "roost_core.worker.main"
#: Signals whose handling this process changes; a child gets back what it started with.
CHANGED_SIGNALS = (signal.SIGCHLD, signal.SIGINT)


def preload() -> Any:
    """Import :data:`PRELOAD`; a host that fails to import is left for its worker to
    report (it would fail there too), the worker module itself is required. Returns the
    plugins a worker needs when its first run settles, built once here
    (:func:`roost_core.worker.main.prepare_plugins`), or None."""
    from roost_core.plugins import DEFAULT_PLUGINS

    for name in (*PRELOAD, *DEFAULT_PLUGINS.values()):
        try:
            importlib.import_module(name)
        except Exception:  # one broken host must not cost every job its fast start
            if name == ESSENTIAL:
                raise
            print(f"roost fork server: could not preload {name}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    from roost_core.worker.main import prepare_plugins

    prepared = prepare_plugins()
    for name in warm_host_modules(prepared):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - its jobs report it; the others keep their fast start
            print(f"roost fork server: could not preload {name}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    # Warm what every worker reads once (psutil caches the boot time behind create_time).
    from roost_core import locks

    locks.create_time(os.getpid())
    # What is loaded now stays shared with every worker: a worker's full collection would
    # otherwise touch (copy) the whole pre-imported heap (~10 MB private per worker, ~3
    # MB frozen).
    gc.collect()
    gc.freeze()
    return prepared


def warm_host_modules(prepared: Any) -> list[str]:
    """The modules of the hosts with warm workers (``HostSpec.warm_pool``): a worker of
    theirs starts with its host class loaded. Named by the factory of the host's plugin
    (:func:`roost_core.hosts.lazy.host_factory`); none without a plugin manager."""
    if prepared is None:
        return []
    from roost_core.hosts import registered_hosts

    targets = [getattr(spec.factory, "lazy_target", "") for spec in registered_hosts(prepared.manager).values() if spec.warm_pool]
    return [target.partition(":")[0] for target in targets if target]


class Server:
    """The request loop: fork on request, reap on SIGCHLD, stop when the channel closes."""

    def __init__(self, channel: socket.socket, prepared: Any = None) -> None:
        self.channel = channel
        #: The plugin manager every forked worker starts with (see preload()).
        self.prepared = prepared
        self.buffer = b""
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.started_with = {signum: signal.getsignal(signum) for signum in CHANGED_SIGNALS}

    def send(self, message: dict[str, Any]) -> None:
        self.channel.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> int:
        # SIGCHLD only wakes the loop (its C handler writes to the wakeup fd); reaping
        # happens in the loop, after the answer of the fork that made the child is sent.
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, _ignore)
        # Ctrl-C at a foreground daemon reaches its whole process group: the daemon
        # decides what it means, and its channel closing is what stops this server.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # poll, not select: the channel keeps the daemon's fd number, which is above
        # FD_SETSIZE when a busy daemon restarts its server.
        poller = select.poll()
        poller.register(self.channel, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        try:
            self.send({"ready": os.getpid()})
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self.wake_r in ready:
                    _drain(self.wake_r)
                    self.reap()
                if self.channel.fileno() in ready:
                    data = self.channel.recv(65536)
                    if not data:
                        return 0
                    self.buffer += data
                    while b"\n" in self.buffer:
                        line, self.buffer = self.buffer.split(b"\n", 1)
                        self.handle(line)
        except ConnectionError:
            return 0  # the daemon is gone (killed while we wrote or read)

    def handle(self, line: bytes) -> None:
        try:
            request = json.loads(line)
            request_id = request["id"]
            env, cwd, log_path = request["env"], request["cwd"], request["log"]
            if not (isinstance(env, dict) and isinstance(cwd, str) and isinstance(log_path, str)):
                raise TypeError("env must be an object, cwd and log strings")
        except (ValueError, KeyError, TypeError) as exc:
            self.send({"id": None, "error": f"bad request: {exc}"})
            return
        try:
            pid = self.fork_worker({str(k): str(v) for k, v in env.items()}, cwd, log_path)
        except OSError as exc:
            self.send({"id": request_id, "error": f"{type(exc).__name__}: {exc}"})
            return
        # The token travelled in this request: hold no reference to it once the child has it.
        del request, env
        from roost_core import locks

        self.send({"id": request_id, "pid": pid, "created": locks.create_time(pid)})

    def fork_worker(self, env: dict[str, str], cwd: str, log_path: str) -> int:
        """Fork one worker; the parent gets its pid, the child never returns."""
        # Opened here so a bad log path is an answer to the daemon, not a dead child.
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(log_fd)
            raise
        # Anything buffered here would otherwise be written again by the child.
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            os.close(log_fd)
            os.close(null_fd)
            raise
        if pid == 0:
            code = 1
            try:
                code = self.become_worker(env, cwd, log_fd, null_fd)
            except SystemExit as exc:
                code = _exit_code(exc)
            except KeyboardInterrupt:
                # As the interpreter does: die of the signal, so the daemon sees SIGINT.
                traceback.print_exc()
                _flush()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            except BaseException:  # noqa: BLE001 - the child must never return into the server loop
                traceback.print_exc()
            finally:
                _flush()
                os._exit(code)
        os.close(log_fd)
        os.close(null_fd)
        return pid

    def become_worker(self, env: dict[str, str], cwd: str, log_fd: int, null_fd: int) -> int:
        """In the child: turn into the job's worker process and run it."""
        os.setsid()
        signal.set_wakeup_fd(-1)
        for signum, handler in self.started_with.items():
            signal.signal(signum, handler)
        # The server's own fds go through their owners (a Python object closing a number
        # later could otherwise hit a worker's fd that reused it).
        self.channel.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        from roost_core import platform

        platform.close_inherited_fds()  # the daemon's and the server's: none is the worker's
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        from roost_core.worker.main import run

        return run(self.prepared)

    def reap(self) -> None:
        """Collect every exited child and tell the daemon how each ended."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _ignore(signum: int, frame: Any) -> None:
    """SIGCHLD's Python handler: the wakeup fd does the work."""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    """``python -m roost_core.worker.forkserver FD``: serve the daemon on socket ``FD``."""
    channel = socket.socket(fileno=int(argv[1]))
    channel.setblocking(True)
    try:
        prepared = preload()
    except Exception:  # noqa: BLE001 - the daemon falls back to starting workers itself
        print(f"roost fork server: cannot preload the worker:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return 1
    return Server(channel, prepared).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
