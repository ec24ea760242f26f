"""The portable implementation: macOS, the BSDs, and any Unix psutil knows (Linux too, when
``ROOST_PLATFORM=portable`` forces it, so that every path here runs in this project's CI).

* peer credentials: the system's own call, by ``sys.platform`` (:data:`PEER_QUERIES`):
  macOS ``LOCAL_PEERCRED`` (a ``struct xucred``: the uid) and ``LOCAL_PEERPID`` (the pid);
  FreeBSD ``LOCAL_PEERCRED`` (its ``xucred`` carries ``cr_pid`` from 13.0 on); OpenBSD
  ``SO_PEERCRED`` (``struct sockpeercred``: uid, gid, pid); NetBSD ``LOCAL_PEEREID``
  (``struct unpcbid``: pid, uid, gid); Linux ``SO_PEERCRED`` (``struct ucred``: pid, uid,
  gid). A system with none of these gives no credentials: (0, -1), which the daemon refuses
  (it never serves a client whose user and process it cannot know);
* the process table: psutil (parents, states, process groups by ``getpgid``, and the
  environment a process was started with: ``KERN_PROCARGS2`` on macOS, ``/proc`` where
  psutil reads it there);
* this process's fds: ``os.closerange`` up to the fd limit;
* owning descendants: no subreaper, so a worker *tracks* its descendants (each one it has
  seen, by pid and start time) and counts as its own, beside those under it, every
  tracked process, every process in a process group one of them is in, and every process
  started with its job's mark (:class:`Family`);
* exit watches: a kqueue with ``EVFILT_PROC``/``NOTE_EXIT`` where the system has kqueue
  (macOS, the BSDs), none elsewhere (the daemon then checks liveness);
* durable writes: ``fcntl(F_FULLFSYNC)`` where it exists (macOS: ``fsync`` there leaves
  the data in the drive's cache), else ``fdatasync`` (data) and ``fsync`` (file).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import select
import socket
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from roost_core.platform.common import NoExitWatch, process_start_time, write_at

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

log = logging.getLogger("roost.platform")

NAME = "portable"
#: No subreaper: a worker tracks its descendants instead (:class:`Family`).
ADOPTS_ORPHANS = False

# ---------------------------------------------------------------------- peer credentials

#: The socket option level of ``LOCAL_*`` options (``SOL_LOCAL`` in sys/un.h).
SOL_LOCAL = 0
#: ``struct xucred`` up to its groups (sys/ucred.h, macOS and FreeBSD): ``cr_version``,
#: ``cr_uid``, ``cr_ngroups``, ``cr_groups[16]``, native alignment.
XUCRED = struct.Struct("@IIh16I")
#: FreeBSD 13 on: a union ``{void *_cr_unused1; pid_t cr_pid}`` follows the groups.
XUCRED_PID_OFFSET = struct.calcsize("@IIh16I0P")
XUCRED_WITH_PID = struct.calcsize("@IIh16IP")
#: ``XUCRED_VERSION``: a ``struct xucred`` of another layout is not read.
XUCRED_VERSION = 0


def parse_xucred(raw: bytes) -> tuple[int, int]:
    """(pid, uid) from a ``struct xucred`` (pid 0 when it carries none: macOS, FreeBSD
    before 13); (0, -1) for one of an unknown version or size."""
    if len(raw) < XUCRED.size:
        return 0, -1
    version, uid = XUCRED.unpack_from(raw)[:2]
    if version != XUCRED_VERSION:
        return 0, -1
    pid = struct.unpack_from("@i", raw, XUCRED_PID_OFFSET)[0] if len(raw) >= XUCRED_WITH_PID else 0
    return pid, uid


def _darwin(sock: socket.socket) -> tuple[int, int]:
    _none, uid = parse_xucred(sock.getsockopt(SOL_LOCAL, getattr(socket, "LOCAL_PEERCRED", 0x001), XUCRED.size))
    (pid,) = struct.unpack("@i", sock.getsockopt(SOL_LOCAL, getattr(socket, "LOCAL_PEERPID", 0x002), 4))
    return pid, uid


def _freebsd(sock: socket.socket) -> tuple[int, int]:
    return parse_xucred(sock.getsockopt(SOL_LOCAL, getattr(socket, "LOCAL_PEERCRED", 0x001), XUCRED_WITH_PID))


def _openbsd(sock: socket.socket) -> tuple[int, int]:
    # struct sockpeercred: uid, gid, pid.
    uid, _gid, pid = struct.unpack("@3i", sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED", 0x1022), 12))
    return pid, uid


def _netbsd(sock: socket.socket) -> tuple[int, int]:
    # LOCAL_PEEREID, struct unpcbid: pid, euid, egid.
    pid, uid, _gid = struct.unpack("@3i", sock.getsockopt(SOL_LOCAL, 0x0003, 12))
    return pid, uid


def _linux(sock: socket.socket) -> tuple[int, int]:
    # struct ucred: pid, uid, gid (the only peer credentials Linux has).
    pid, uid, _gid = struct.unpack("@3i", sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED", 17), 12))
    return pid, uid


#: ``sys.platform`` prefix -> how that system answers "who connected".
PEER_QUERIES: dict[str, Callable[[socket.socket], tuple[int, int]]] = {
    "darwin": _darwin,
    "freebsd": _freebsd,
    "openbsd": _openbsd,
    "netbsd": _netbsd,
    "linux": _linux,
}


def peer_query(system: str) -> Callable[[socket.socket], tuple[int, int]] | None:
    """How system ``system`` (a ``sys.platform`` value) gives peer credentials, or None
    when roost knows no way there."""
    return next((query for prefix, query in PEER_QUERIES.items() if system.startswith(prefix)), None)


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of Unix socket ``sock``, as the kernel
    saw it at connect; (0, -1) when it cannot say (a system roost knows no call for, a
    FreeBSD before 13 that gives no pid): the daemon refuses such a client."""
    query = peer_query(sys.platform)
    if query is None:
        return 0, -1
    try:
        pid, uid = query(sock)
    except (OSError, struct.error):
        return 0, -1
    return (pid, uid) if pid > 0 else (0, -1)


# ---------------------------------------------------------------------- the process table


def pids() -> list[int]:
    """Every process id the system shows this user."""
    return psutil.pids()


def parent_links() -> dict[int, int]:
    """pid -> parent pid for every live (not zombie) process."""
    links = {}
    for process in psutil.process_iter(["ppid", "status"]):
        info = process.info
        if info["ppid"] is not None and info["status"] not in (psutil.STATUS_ZOMBIE, None):
            links[process.pid] = info["ppid"]
    return links


def parent_of(pid: int) -> int | None:
    """``pid``'s parent pid, or None when it is gone (or a zombie)."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.ppid()
    except (psutil.Error, OSError):
        return None


def is_running(pid: int) -> bool:
    """True when ``pid`` is a process that has not exited (a zombie has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError, OverflowError):
        return False


def command_line(pid: int) -> str | None:
    """The command line of ``pid``, its arguments joined by spaces (psutil's); None when it
    is gone or cannot be read, "" for a process that shows none."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, OSError, ValueError, OverflowError):
        return None


def zombie_children(parent: int) -> list[int]:
    """The exited, uncollected children of process ``parent``."""
    try:
        children = psutil.Process(parent).children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def processes_with_env(entry: str, *, skip: Iterable[int] = ()) -> list[int]:
    """Live processes (not in ``skip``) whose starting environment holds ``entry``
    (``NAME=value``). Processes of other users cannot be read, and are not found."""
    name, _, value = entry.partition("=")
    skipped = set(skip)
    found = []
    for process in psutil.process_iter():
        if process.pid in skipped:
            continue
        try:
            if process.environ().get(name) == value and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return found


# ---------------------------------------------------------------------- this process's fds

#: Where fds are closed up to when the fd limit is unlimited.
FD_CEILING = 1 << 20


def close_inherited_fds() -> None:
    """Close every fd of this process above 2 (a forked child drops what its parent held):
    every number up to the fd limit, as no fd can be opened above it."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY and 0 < soft <= FD_CEILING else FD_CEILING
    os.closerange(3, limit)


# ---------------------------------------------------------------------- owning descendants


class Family:
    """The processes this one (a worker) owns, with no subreaper to keep them together.

    A process whose parent dies is re-parented to init (or launchd), not here, so walking
    parent links loses it. So every descendant this process sees is *tracked* (pid and
    start time, and its process group when it leads one), and :meth:`links` gives this
    process as the parent of every process that is not under it any more but is one of:

    * tracked (it was seen under this one before its parent died);
    * in a process group of the family (led by this process or by a process it tracked:
      a daemonising tool that double-forks without ``setsid`` keeps its group);
    * started with this job's ``mark`` in its environment (everything the job starts
      inherits it, ``setsid`` or not).

    Weaker than a subreaper: a process started with a cleared environment (``env -i``)
    that leaves its process group (``setsid``) and loses its parent before any scan saw
    it is not found. The worker scans every
    :data:`roost_core.worker.supervisor.TRACK_SECONDS` while it runs, and at every sweep.
    """

    def __init__(self, mark: str | None = None) -> None:
        self.root = os.getpid()
        #: ``NAME=value`` that the job's processes carry in their environment, if any.
        self.mark = mark
        self.adopts_orphans = False
        #: pid -> start time of each descendant seen (a reused pid is not taken for it).
        self.tracked: dict[int, float] = {}
        #: Process groups led by this process or a tracked one (a group's id is its
        #: leader's pid), kept while any process is in them.
        self.groups: set[int] = {self.root} if _group(self.root) == self.root else set()

    def _under(self, links: dict[int, int]) -> list[int]:
        children: dict[int, list[int]] = {}
        for pid, parent in links.items():
            children.setdefault(parent, []).append(pid)
        found: list[int] = []
        todo = list(children.get(self.root, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def _remember(self, found: Iterable[int]) -> None:
        for pid in found:
            if pid in self.tracked:
                continue
            started = process_start_time(pid)
            if started is not None:
                self.tracked[pid] = started
                if _group(pid) == pid:
                    self.groups.add(pid)

    def track(self) -> None:
        """Remember every descendant there is now (the worker's periodic scan: psutil's
        one read of every parent link, then a start time for each pid not seen before)."""
        try:
            found = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        self._remember(process.pid for process in found)

    def links(self) -> dict[int, int]:
        """pid -> parent for every live process, each orphan of this family given this
        process for its parent (as a subreaper would have it); the family is tracked."""
        links = parent_links()
        under = set(self._under(links))
        self._remember(under)
        ancestors = set()
        parent = links.get(self.root)
        while parent is not None and parent not in ancestors:
            ancestors.add(parent)
            parent = links.get(parent)
        orphans = set()
        for pid, started in list(self.tracked.items()):
            if pid in under:
                continue
            if pid not in links or process_start_time(pid) != started:
                del self.tracked[pid]  # gone (or the pid names another process now)
                continue
            orphans.add(pid)
        live_groups = set()
        for pid in links:
            group = _group(pid)
            if group in self.groups:
                live_groups.add(group)
                orphans.add(pid)
        # An empty group's id is a pid that may be reused, for a group of another's.
        self.groups &= live_groups | {self.root}
        if self.mark:
            orphans.update(pid for pid in processes_with_env(self.mark, skip=(self.root,)) if pid in links)
        for pid in orphans - under - ancestors - {self.root}:
            links[pid] = self.root
        self._remember(self._under(links))
        return links


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# ---------------------------------------------------------------------- exit watches

#: This system has kqueue (macOS, the BSDs): exits are watched on one per process.
CAN_WATCH_EXITS = hasattr(select, "kqueue")
#: ``select`` as the kqueue calls are reached (their stubs exist only for the BSDs and
#: macOS; this module is type-checked, and runs when forced, on Linux too).
_kqueues: Any = select


class ExitFd:
    """A kqueue holding one ``NOTE_EXIT`` event: readable once its process has exited."""

    def __init__(self, pid: int) -> None:
        self.queue = _kqueues.kqueue()
        try:
            flags = _kqueues.KQ_EV_ADD | _kqueues.KQ_EV_ONESHOT
            event = _kqueues.kevent(pid, filter=_kqueues.KQ_FILTER_PROC, flags=flags, fflags=_kqueues.KQ_NOTE_EXIT)
            self.queue.control([event], 0, 0)
        except BaseException:
            self.queue.close()
            raise

    def fileno(self) -> int:
        return int(self.queue.fileno())

    def close(self) -> None:
        self.queue.close()


def watch_exit(pid: int) -> ExitFd:
    """An fd that becomes readable when process ``pid`` exits. Raises ProcessLookupError
    when there is no such process, :class:`NoExitWatch` where the system has no kqueue,
    OSError for a passing failure (no fds left)."""
    if not CAN_WATCH_EXITS:
        raise NoExitWatch(errno.ENOSYS, "no kqueue on this system")
    return ExitFd(pid)


# ---------------------------------------------------------------------- durable writes

#: ``fcntl`` command that flushes a file to the medium, past the drive's own cache (macOS).
_FULLFSYNC: int | None = getattr(fcntl, "F_FULLFSYNC", None)
#: What a filesystem that cannot do a full sync answers (some network filesystems).
_NO_FULLFSYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.ENOTTY, errno.EOPNOTSUPP})


def _full_sync(fd: int) -> bool:
    """``F_FULLFSYNC`` on ``fd``: True when done, False where it is not to be had."""
    if _FULLFSYNC is None:
        return False
    try:
        fcntl.fcntl(fd, _FULLFSYNC)
    except OSError as exc:
        if exc.errno in _NO_FULLFSYNC:
            return False
        raise
    return True


def sync_file(fd: int) -> None:
    """Make the file (or folder) open on ``fd`` durable, data and metadata:
    ``F_FULLFSYNC`` where it exists, else ``fsync``."""
    if not _full_sync(fd):
        os.fsync(fd)


def sync_data(fd: int) -> None:
    """Make the data written to ``fd`` durable: ``F_FULLFSYNC`` where it exists, else
    ``fdatasync`` (``fsync`` where there is none)."""
    if _full_sync(fd):
        return
    datasync = getattr(os, "fdatasync", None)
    if datasync is not None:
        datasync(fd)
    else:
        os.fsync(fd)


def write_synced(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``, then :func:`sync_data`: durable once it returns."""
    write_at(fd, data, offset)
    sync_data(fd)
