"""Where roost keeps its socket, state and config.

``ROOST_HOME`` puts everything in one folder (tests, users who want that). Otherwise the
socket lives in platformdirs' runtime dir and state in its state dir. A Unix socket path
must fit in 108 bytes; a longer one is moved to a short, per-user, 0700 folder under the
temp dir, named by a hash of the long path so every process finds the same one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import attrs

#: sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


class HomeError(ValueError):
    """``ROOST_HOME`` (or a folder roost keeps its files in) cannot be used: it is a file,
    lies under one, or cannot be made. The CLI reports it as ``bad_home``."""


@attrs.frozen
class Paths:
    """The folders and files of one roost home."""

    home: Path
    runtime_dir: Path
    state_dir: Path
    config_file: Path

    @property
    def socket(self) -> Path:
        preferred = self.runtime_dir / "roost.sock"
        if len(os.fsencode(str(preferred))) <= MAX_SOCKET_PATH:
            return preferred
        digest = hashlib.sha256(os.fsencode(str(preferred))).hexdigest()[:16]
        return short_socket_dir() / f"{digest}.sock"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"

    @property
    def sessions_dir(self) -> Path:
        return self.state_dir / "sessions"

    @property
    def journal(self) -> Path:
        return self.state_dir / "queue.journal"

    @property
    def daemon_pidfile(self) -> Path:
        return self.runtime_dir / "daemon.pid"

    @property
    def daemon_log(self) -> Path:
        return self.state_dir / "daemon.log"

    def ensure(self) -> None:
        """Create the folders owner-only (0700); :class:`HomeError` when one cannot be."""
        for folder in (self.runtime_dir, self.state_dir, self.jobs_dir, self.sessions_dir, self.socket.parent):
            try:
                private_dir(folder)
            except OSError as exc:
                raise HomeError(f"roost cannot keep its files in {folder}: {exc.strerror or exc}") from exc


#: Room a socket's name takes in :func:`short_socket_dir` (``cc-`` + 20 hex + ``.sock``
#: is the longest, 28 bytes) plus the separator.
SOCKET_NAME_ROOM = 32


def short_socket_dir() -> Path:
    """The per-user folder for sockets whose natural path is too long for ``sun_path``:
    under the temp folder (``TMPDIR``), or under ``/tmp`` when that one is itself too long
    to hold a socket (every process of a user computes the same folder from the same
    environment, so a Claude Code hook finds its ``roost mcp`` server's socket)."""
    import tempfile  # here: only a socket path too long for sun_path comes here

    folder = Path(tempfile.gettempdir()) / f"roost-{os.getuid()}"
    if len(os.fsencode(str(folder))) + SOCKET_NAME_ROOM <= MAX_SOCKET_PATH:
        return folder
    return Path("/tmp") / f"roost-{os.getuid()}"


def worker_folder(mark: str) -> Path:
    """The private folder of the worker started with ``mark`` (its start's mark,
    ``ROOST_WORKER_MARK``), where a host puts the socket its agent's helpers reach it by:
    in the per-user short-socket folder, named by a hash of the mark, so the daemon finds
    it from the job's record and removes it when it finds that worker gone
    (:func:`remove_worker_folder`), a ``kill -9`` too. ``w-`` + 16 hex + ``/bridge.sock``
    fits in the room that folder leaves."""
    return short_socket_dir() / f"w-{hashlib.sha256(mark.encode()).hexdigest()[:16]}"


def remove_worker_folder(mark: str) -> None:
    """Remove the folder of the worker started with ``mark`` (gone, or being killed), if
    it left one."""
    shutil.rmtree(worker_folder(mark), ignore_errors=True)


def private_dir(folder: Path) -> Path:
    """Make ``folder`` (and parents) and insist it is ours and 0700."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = folder.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{folder} belongs to another user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


def resolve_paths(env: Mapping[str, str] | None = None) -> Paths:
    """The paths for this process, from ``ROOST_HOME`` or platformdirs."""
    env = os.environ if env is None else env
    config_override = env.get("ROOST_CONFIG")
    home = env.get("ROOST_HOME")
    if home:
        root = Path(home).expanduser().absolute()
        check_home(root)
        return Paths(
            home=root,
            runtime_dir=root,
            state_dir=root / "state",
            config_file=Path(config_override) if config_override else root / "roost.json",
        )
    import warnings

    import platformdirs

    agent_dir = env.get("PI_CODING_AGENT_DIR")
    default_config = Path(agent_dir) if agent_dir else Path.home() / ".pi" / "agent"
    return Paths(
        home=Path(platformdirs.user_state_dir("roost")),
        runtime_dir=_runtime_dir(platformdirs, warnings),
        state_dir=Path(platformdirs.user_state_dir("roost")),
        config_file=Path(config_override) if config_override else default_config / "roost.json",
    )


def check_home(root: Path) -> None:
    """Raise :class:`HomeError` when ``ROOST_HOME`` names a file or a path under one:
    nothing could be kept there, and every command would fail on its own error."""
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                what = "is a file" if folder == root else f"is under {folder}, which is a file"
                raise HomeError(f"ROOST_HOME={str(root)!r} {what}, not a folder")
            return


def _runtime_dir(platformdirs: ModuleType, warnings: ModuleType) -> Path:
    # Without XDG_RUNTIME_DIR platformdirs falls back to a per-user temp dir, and says so
    # on every call; the fallback is what we want, the warning is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir("roost"))
