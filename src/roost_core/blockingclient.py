"""The blocking client of the daemon (the CLI's) and the daemon's auto-start.

It imports no async stack: ``roost jobs`` and the CLI's other one-request commands load
this and not :mod:`roost_core.client`'s async client (``bench/commands.py`` measures them).
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time
from typing import Any

from roost_core.paths import Paths, resolve_paths
from roost_core.protocol import (
    FrameDecoder,
    ProtocolError,
    decode_answer,
    encode,
    error_of,
    request_too_large,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

STARTUP_TIMEOUT = 15.0


class DaemonUnavailable(ConnectionError):
    """No daemon answers on the socket."""


class NotSent(DaemonUnavailable):
    """The request never left: the connection was already gone. Safe to retry."""


class Client:
    """A blocking request/response client (the CLI's). Events are ignored."""

    def __init__(self, path: Path, *, timeout: float = 30.0) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise DaemonUnavailable(str(exc)) from exc
        self._decoder = FrameDecoder(decode=decode_answer)
        self._frames: list[Any] = []
        self._ids = itertools.count(1)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        data = encode({"id": request_id, "op": op, **args})
        too_large = request_too_large(data)
        if too_large is not None:
            raise too_large  # the daemon would discard it and answer with no id
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # A daemon that refuses the connection (out of fds) answers and closes at once,
            # maybe before this request went out: its answer is still there to read.
            frame = self._refusal()
            if frame is None:
                raise DaemonUnavailable(f"daemon closed the connection ({exc.strerror})") from exc
            raise error_of(frame.get("error")) from exc
        while True:
            frame = self._next_frame()
            if isinstance(frame, ProtocolError):
                # One request at a time: a frame it cannot read is this request's answer.
                import logging  # here: only this path writes to the log

                logging.getLogger("roost.client").error("a frame from the daemon could not be read and is lost: %s: %s", frame.code, frame.message)
                raise ProtocolError(frame.code, f"the daemon's answer could not be read: {frame.message}")
            if isinstance(frame, dict) and frame.get("id") is None and frame.get("ok") is False and "event" not in frame:
                # The daemon refused the connection itself (``busy``, ``unauthorized``).
                raise error_of(frame.get("error"))
            if isinstance(frame, dict) and frame.get("id") == request_id:
                if frame.get("ok"):
                    return frame.get("result") or {}
                raise error_of(frame.get("error"))

    def _refusal(self) -> dict[str, Any] | None:
        """The refusal frame (``id`` null, an error) the daemon left before it closed, if any."""
        try:
            frame = self._next_frame()
        except (DaemonUnavailable, OSError):
            return None
        if isinstance(frame, dict) and frame.get("id") is None and frame.get("ok") is False:
            return frame
        return None

    def _next_frame(self) -> Any:
        while not self._frames:
            data = self.sock.recv(256 * 1024)
            if not data:
                raise DaemonUnavailable("daemon closed the connection")
            self._frames.extend(self._decoder.feed(data))
        return self._frames.pop(0)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def daemon_command() -> list[str]:
    return [sys.executable, "-m", "roost_core.daemon"]


def start_daemon(paths: Paths, *, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a detached daemon (its own session) logging to the state dir. A
    ``ROOST_PLATFORM`` no daemon could run with is refused here (PlatformError, a
    ValueError: ``bad_args``), not after a daemon that cannot start is waited for."""
    import subprocess  # here: a command that finds its daemon running starts nothing

    from roost_core import platform  # noqa: F401 - importing it checks ROOST_PLATFORM

    paths.ensure()
    env = dict(os.environ)
    env.update(extra_env or {})
    with os.fdopen(os.open(paths.daemon_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log_file:
        process = subprocess.Popen(
            daemon_command(),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        # Where this daemon's lines start, to read back why it could not start.
        process.log_offset = log_file.tell()  # type: ignore[attr-defined]
        return process


def wait_for_daemon(paths: Paths, timeout: float = STARTUP_TIMEOUT, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until a daemon answers on the socket. When ``process`` (the daemon this client
    started) exits because the user config cannot be read, raise that
    :class:`~roost_core.config.ConfigError` at once instead of waiting out ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            Client(paths.socket, timeout=2).close()
            return
        except DaemonUnavailable:
            if process is not None and process.poll() is not None:
                check_start_failure(paths, process)
                # It lost the race to another daemon, which may still be coming up.
                process = None
            time.sleep(0.02)
    raise DaemonUnavailable(f"the daemon did not start within {timeout:.0f}s (see {paths.daemon_log})")


def check_start_failure(paths: Paths, process: subprocess.Popen[bytes]) -> None:
    """Raise the config error a daemon this client started exited with, if it did: the
    line it wrote to daemon.log (the log is shared: the last such line after where this
    daemon started)."""
    from roost_core.config import BAD_CONFIG_LINE, EXIT_BAD_CONFIG, ConfigError

    if process.returncode != EXIT_BAD_CONFIG:
        return
    message = f"the daemon could not read its config (see {paths.daemon_log})"
    try:
        with open(paths.daemon_log, "rb") as log_file:
            log_file.seek(getattr(process, "log_offset", 0))
            lines = log_file.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        if line.startswith(BAD_CONFIG_LINE):
            message = line[len(BAD_CONFIG_LINE) :]
            break
    raise ConfigError(message)


def connect(paths: Paths | None = None, *, autostart: bool = True) -> Client:
    """A client to this user's daemon, starting the daemon when none answers. The user
    config is read first, as the daemon will read it: one it cannot read is a
    :class:`~roost_core.config.ConfigError` now, not a daemon that never answers."""
    paths = paths or resolve_paths()
    try:
        return Client(paths.socket)
    except DaemonUnavailable:
        if not autostart:
            raise
    from roost_core.config import load_user_config

    load_user_config(paths.config_file)
    process = start_daemon(paths)
    wait_for_daemon(paths, process=process)
    return Client(paths.socket)
