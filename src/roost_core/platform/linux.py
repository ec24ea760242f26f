"""The Linux implementation: each facility on the kernel's own interface.

* peer credentials: ``SO_PEERCRED`` (pid, uid, gid of the process that connected, as the
  kernel saw it at ``connect``);
* the process table: ``/proc/PID/stat`` (state, parent, process group) and
  ``/proc/PID/environ`` (the environment a process was *started* with: changing its own
  ``environ`` later does not change it);
* this process's fds: ``/proc/self/fd``;
* owning descendants: ``PR_SET_CHILD_SUBREAPER`` (an orphan among them is re-parented to
  this process, not to init, whatever it does: ``setsid``, double fork, its parent dying);
* exit watches: a pidfd (Linux 5.3 on), readable once its process exits;
* durable writes: ``pwritev2`` with ``RWF_DSYNC`` (Linux 4.7 on; the range written is on
  the disk when the call returns), ``fdatasync`` where a filesystem refuses it, ``fsync``.

Process start times are psutil's value, read from ``/proc`` as psutil reads it (a hook's
relay finds its session's socket by one, and must not pay for importing psutil).
"""

from __future__ import annotations

import errno
import os

from roost_core.platform.common import NoExitWatch, write_at

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Iterable

__all__ = [
    "ADOPTS_ORPHANS",
    "CAN_WATCH_EXITS",
    "NAME",
    "ExitFd",
    "Family",
    "close_inherited_fds",
    "command_line",
    "is_running",
    "parent_links",
    "parent_of",
    "peer_credentials",
    "pids",
    "process_start_time",
    "processes_with_env",
    "sync_data",
    "sync_file",
    "watch_exit",
    "write_synced",
    "zombie_children",
]

NAME = "linux"
#: Orphans of a job come back to its worker (``PR_SET_CHILD_SUBREAPER``).
ADOPTS_ORPHANS = True

# ---------------------------------------------------------------------- peer credentials


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of Unix socket ``sock``, as the kernel
    saw it at connect; (0, -1) when it cannot say."""
    # Here, not at the top: a hook's relay imports this module for the process table.
    import socket
    import struct

    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return 0, -1
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


# ---------------------------------------------------------------------- the process table


def pids() -> list[int]:
    """Every process id the system shows this user."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3, ``state``, is
    index 0), or None when the process is gone. The name may hold spaces and ``)``, so
    the split is at the last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].decode("ascii", "replace").split()


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch: psutil's value (its
    ``create_time``, the start in clock ticks after boot plus the boot time), read the way
    psutil reads it so the two are equal to the last bit; None when there is no such
    process."""
    fields = _stat_fields(pid) if pid > 0 else None
    if fields is None or len(fields) < 20:
        return None
    try:
        with open("/proc/stat", "rb") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith(b"btime"))
        return float(fields[19]) / os.sysconf("SC_CLK_TCK") + boot
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def parent_links() -> dict[int, int]:
    """pid -> parent pid for every live (not zombie) process."""
    links = {}
    for pid in pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] != "Z":
            links[pid] = int(fields[1])
    return links


def parent_of(pid: int) -> int | None:
    """``pid``'s parent pid, or None when it is gone (or a zombie)."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None and fields[0] != "Z" else None


def is_running(pid: int) -> bool:
    """True when ``pid`` is a process that has not exited (a zombie has)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def command_line(pid: int) -> str | None:
    """The command line of ``pid``, its arguments joined by spaces (``/proc/PID/cmdline``);
    None when it is gone or cannot be read, "" for a process that shows none (a kernel
    thread, a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def zombie_children(parent: int) -> list[int]:
    """The exited, uncollected children of process ``parent``."""
    found = []
    for pid in pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] == "Z" and int(fields[1]) == parent:
            found.append(pid)
    return found


def processes_with_env(entry: str, *, skip: Iterable[int] = ()) -> list[int]:
    """Live processes (not in ``skip``) whose starting environment holds ``entry``
    (``NAME=value``). Processes of other users cannot be read, and are not found."""
    needle = entry.encode()
    skipped = set(skip)
    found = []
    for pid in pids():
        if pid in skipped:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        # A zombie's environ reads empty: only the living match.
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


# ---------------------------------------------------------------------- this process's fds


def close_inherited_fds() -> None:
    """Close every fd of this process above 2 (a forked child drops what its parent held)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        return
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own fd, already closed


# ---------------------------------------------------------------------- owning descendants

#: ``prctl`` option numbers (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, *args: object) -> int:
    import ctypes  # here: only a worker needs it, and a hook's relay imports this module

    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, *args))


class Family:
    """The processes this one (a worker) owns: all its descendants. It becomes their child
    subreaper, so an orphan among them is its child from then on and :meth:`links` alone
    finds it; ``mark`` is not needed here (the daemon uses it once the worker is dead)."""

    def __init__(self, mark: str | None = None) -> None:
        #: False when the kernel refused (then orphans go to init, as on the portable path
        #: without its tracking: say so in the log).
        self.adopts_orphans = _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0

    def links(self) -> dict[int, int]:
        """pid -> parent for every live process (orphans of this one's descendants have it
        for their parent)."""
        return parent_links()

    def track(self) -> None:
        """Nothing to track: the kernel keeps the family together."""


# ---------------------------------------------------------------------- exit watches

#: What ``pidfd_open`` answers where the kernel has no pidfds (or forbids them).
_NO_PIDFDS = frozenset({errno.ENOSYS, errno.EPERM, errno.EACCES})
#: This Python can open pidfds (the kernel may still refuse: :class:`NoExitWatch`).
CAN_WATCH_EXITS = hasattr(os, "pidfd_open")


class ExitFd:
    """A pidfd: readable once its process has exited."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        os.close(self.fd)


def watch_exit(pid: int) -> ExitFd:
    """An fd that becomes readable when process ``pid`` exits (it names whichever process
    had ``pid`` now, even once the pid is reused). Raises ProcessLookupError when there is
    no such process, :class:`NoExitWatch` where pidfds are not to be had, OSError for a
    passing failure (no fds left)."""
    try:
        return ExitFd(os.pidfd_open(pid))
    except ProcessLookupError:
        raise
    except AttributeError:
        raise NoExitWatch(errno.ENOSYS, "this Python has no pidfd_open") from None
    except OSError as exc:
        if exc.errno in _NO_PIDFDS:
            raise NoExitWatch(exc.errno, f"no pidfds here ({exc.strerror})") from exc
        raise


# ---------------------------------------------------------------------- durable writes

#: ``os.pwritev``'s flag for a write that is durable once it returns (Linux 4.7 on); None
#: where this Python has none, or once a filesystem has refused it (:func:`write_synced`).
_DSYNC: int | None = getattr(os, "RWF_DSYNC", None)
#: What a kernel or filesystem without per-write sync answers ``RWF_DSYNC`` with.
_NO_DSYNC = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


def sync_file(fd: int) -> None:
    """Make the file (or folder) open on ``fd`` durable, data and metadata: ``fsync``."""
    os.fsync(fd)


def sync_data(fd: int) -> None:
    """Make the data written to ``fd`` durable, and the metadata needed to read it back
    (not its times): ``fdatasync``."""
    os.fdatasync(fd)


def write_synced(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``, durable once it returns, as ``fdatasync``
    after it would make it: each ``pwritev2`` carries ``RWF_DSYNC`` (the range it writes
    is synced before it returns). One syscall instead of two, so the journal's thread
    takes the GIL back once per commit, not twice, from a loop that holds it. Where the
    kernel or filesystem has no ``RWF_DSYNC`` (refused before a byte is written): write
    then ``fdatasync``, from then on."""
    global _DSYNC
    view = memoryview(data)
    if _DSYNC is not None:
        try:
            while view:
                written = os.pwritev(fd, [view], offset, _DSYNC)
                view, offset = view[written:], offset + written
            return
        except OSError as exc:
            if exc.errno not in _NO_DSYNC:
                raise
            import logging

            logging.getLogger("roost.platform").info("this filesystem refuses per-write sync (%s): the journal writes, then fdatasyncs", exc.strerror)
            _DSYNC = None
    write_at(fd, view, offset)
    sync_data(fd)
