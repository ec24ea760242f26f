"""The worker owns its job's processes: it starts them, watches the host's, and kills
whatever they leave behind.

A worker owns everything its job starts (:class:`roost_core.platform.Family`, made in
:class:`Supervisor`): a tool that runs ``setsid``, double-forks, or whose parent dies,
stays the worker's — on Linux the worker is their child subreaper, so they are re-parented
to it instead of init; elsewhere the worker tracks each descendant it sees (a scan every
:data:`TRACK_SECONDS` while it runs), their process groups and its job's mark — so the
worker finds the whole tree by walking parent links. pi's own bash tool starts every
command in a new session, so process groups and session ids alone would miss most of it.

What is killed when (the daemon's side, for a worker that is itself dead, is
:func:`roost_core.worker.proctree.kill_marked`):

* the host process (pi, claude) exits or is killed: every descendant of the worker that
  is not a live process the worker started is a leftover of it, and is ended; a run that
  process died in settles only once they are (:meth:`Supervisor.settled`);
* the worker ends (stop, reap, hibernation, remove, no daemon): every descendant.

What a settled job keeps running on purpose (a dev server started with ``nohup ... &`` or
``setsid``: a process outside the host's own tree, whose starter has exited) is its
*background* (:meth:`Supervisor.background`): the worker reports it, the daemon does not
hibernate the job while any of it runs (:mod:`roost_core.worker.background`), and it
still ends with the worker, as everything else does.

Leftovers get SIGTERM, :data:`LEFTOVER_GRACE` seconds, then SIGKILL (a process that
ignores SIGTERM cannot outlive its job), and the worker collects the exit of any that
were re-parented to it.

Hosts start processes only through :class:`WorkerServices` (``start_host_process``,
``run_command``), which land here: the supervisor must know which of its children asyncio
is waiting for, so that it never collects one of those itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio
from anyio.abc import Process

from roost_core import platform
from roost_core.worker import proctree
from roost_core.worker.stderrtail import StderrTail

log = logging.getLogger("roost.worker")

#: How long leftovers get between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 1.0
#: How often the end of leftovers is checked while waiting for it.
LEFTOVER_POLL = 0.02
#: How long SIGKILLed processes get to be gone (a process in uninterruptible sleep dies
#: when it wakes), and how many rounds of kills catch what they started meanwhile.
KILL_WAIT = 5.0
KILL_ROUNDS = 10
#: How often a worker that is no subreaper (the portable platform) looks for its
#: descendants while its job runs, to know them once their parent is gone.
TRACK_SECONDS = 0.5
#: After a host process exited and what it left was ended, how long its stderr may take
#: to be read to its end (a process it started elsewhere may still hold the pipe).
STDERR_DRAIN = 2.0


class Supervisor:
    """The processes of one job, owned by its worker (one per worker process)."""

    def __init__(self, on_host_pid: Callable[[int | None], Awaitable[None]] | None = None) -> None:
        mark = os.environ.get(proctree.MARK_VARIABLE)
        self.family = platform.Family(proctree.mark_entry(mark) if mark else None)
        if not self.family.adopts_orphans and platform.ADOPTS_ORPHANS:
            log.warning("cannot become the subreaper of this job's processes; orphans go to init")
        self.on_host_pid = on_host_pid
        self.host: Process | None = None
        #: Children that asyncio waits for (never collected here), by pid.
        self.managed: set[int] = set()
        #: Children whose pid is not known here (a start in flight, a command running):
        #: while there are any, no exit is collected, it could be theirs.
        self.unnamed = 0
        self.sweeping = anyio.Lock()
        #: Host processes being watched, each with the event set once its exit has been
        #: handled (what it left ended).
        self.watched: dict[Process, anyio.Event] = {}
        #: The host processes' stderr: copied to the worker's own (its log), the last
        #: lines kept to say why a run whose host process exited failed.
        self.stderr = StderrTail()
        #: Host processes whose stderr is being read, each with the event set at its end.
        self.draining: dict[Process, anyio.Event] = {}
        #: How many host processes exited with a failure (a non-zero code, a signal).
        self.failed_exits = 0
        self.tg: anyio.abc.TaskGroup | None = None
        self.closed = False

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch the host processes started through :meth:`start_host` (a task of the
        worker for its whole life)."""
        async with anyio.create_task_group() as tg:
            self.tg = tg
            task_status.started()
            if not self.family.adopts_orphans:
                tg.start_soon(self._track)
            await anyio.sleep_forever()

    async def _track(self) -> None:
        """Know the job's processes while their parents live (no subreaper keeps them).
        On the loop, not a thread: :meth:`leftovers` reads the same family."""
        while True:
            self.family.track()
            await anyio.sleep(TRACK_SECONDS)

    # ------------------------------------------------------------------ starts

    async def start_host(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> Process:
        """Start the agent's own process (pi) with pipes on stdin and stdout; its pid is
        reported as the job's host pid, and when it exits what it left is ended."""
        self.unnamed += 1
        try:
            # Not while a sweep ends what the last host process left: a process started
            # now is a live child that is not yet managed, which the sweep would take for
            # a leftover (a Codex resumed right after the run before it was SIGTERMed).
            async with self.sweeping:
                # Its stderr is read here when there is a task group to read it in.
                stderr = subprocess.PIPE if self.tg is not None else None
                process = await anyio.open_process(list(argv), env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
                self.managed.add(process.pid)
        finally:
            self.unnamed -= 1
        self.host = process
        await self._report(process.pid)
        if self.tg is not None:
            self.watched[process] = anyio.Event()
            if process.stderr is not None:
                self.draining[process] = anyio.Event()
                self.tg.start_soon(self._drain_stderr, process)
            self.tg.start_soon(self._watch_host, process)
        return process

    async def _drain_stderr(self, process: Process) -> None:
        """Copy the host process's stderr to the worker's (its log, as it was before it
        was read here) and keep its last lines (:attr:`stderr`), to its end."""
        assert process.stderr is not None
        try:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stderr:
                    self.stderr.feed(chunk)
                    with contextlib.suppress(OSError):
                        write_all(2, chunk)
        finally:
            self.stderr.end()
            done = self.draining.pop(process, None)
            if done is not None:
                done.set()

    async def run_command(self, argv: Sequence[str], *, cwd: str | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run a tool's command to its end, output captured (``anyio.run_process``)."""
        self.unnamed += 1
        try:
            return await anyio.run_process(list(argv), check=False, cwd=cwd)
        finally:
            self.unnamed -= 1

    async def _watch_host(self, process: Process) -> None:
        try:
            with contextlib.suppress(Exception):
                await process.wait()
            self.managed.discard(process.pid)
            if process.returncode != 0:
                self.failed_exits += 1
            if self.host is process:
                self.host = None
                await self._report(None)
            if not self.closed:
                await self.sweep()
            drained = self.draining.get(process)
            if drained is not None:
                with anyio.move_on_after(STDERR_DRAIN):
                    await drained.wait()
        finally:
            done = self.watched.pop(process, None)
            if done is not None:
                done.set()

    async def settled(self) -> None:
        """Wait until what every host process that has exited left behind is ended (the
        worker calls it when a run ends, before the run is settled: a job that says
        ``failed`` because its pi or claude died has nothing of that run still running).
        A host process still running is not waited for."""
        for process, done in list(self.watched.items()):
            if process.returncode is not None:
                await done.wait()

    async def _report(self, pid: int | None) -> None:
        if self.on_host_pid is not None:
            with contextlib.suppress(Exception):
                await self.on_host_pid(pid)

    # ------------------------------------------------------------------ background

    def background(self) -> list[tuple[int, str]]:
        """The job's background processes now: live processes of the job outside every
        live host process's tree (what a tool started and left running: its own shell has
        exited), with their command lines; parents before children. Exits that came back
        to the worker are collected first, so an ended one is not counted."""
        self.collect()
        found = []
        for pid in self.leftovers():
            command = platform.command_line(pid)
            if command is not None:
                found.append((pid, command))
        return found

    async def until_one_exits(self, pids: Sequence[int], timeout: float) -> None:
        """Return once one of ``pids`` has exited (an exit watch each: a pidfd, a kqueue),
        or after ``timeout`` seconds (what they start meanwhile is seen at the next look;
        the timer alone where exits cannot be watched)."""
        watches = []
        try:
            for pid in pids:
                try:
                    watches.append(platform.watch_exit(pid))
                except ProcessLookupError:
                    return  # gone already
                except OSError:
                    continue  # no exit watch here (or no fd now): the timer tells
            with anyio.move_on_after(timeout):
                if not watches:
                    await anyio.sleep_forever()
                async with anyio.create_task_group() as race:

                    async def exited(fd: int) -> None:
                        await anyio.wait_readable(fd)
                        race.cancel_scope.cancel()

                    for watch in watches:
                        race.start_soon(exited, watch.fileno())
        finally:
            for watch in watches:
                with contextlib.suppress(OSError):
                    watch.close()

    # ------------------------------------------------------------------ ending

    def leftovers(self) -> list[int]:
        """Live descendants of the worker that are not a live process it started, nor
        under one (parents before children)."""
        me = os.getpid()
        links = self.family.links()
        spared = {pid for pid in self.managed if pid in links}
        found = []
        for pid in proctree.descendants(me, links):
            parent: int | None = pid
            # Walk up: a process under a live started process is that process's own.
            while parent is not None and parent != me and parent not in spared:
                parent = links.get(parent)
            if parent == me:
                found.append(pid)
        return found

    async def sweep(self) -> list[int]:
        """End every leftover: SIGTERM, a grace, SIGKILL; collect the orphans' exits.
        Returns the pids it ended."""
        async with self.sweeping:
            first = self.leftovers()
            ended = list(first)
            if first:
                log.info("ending %d process(es) left behind: %s", len(first), first)
                proctree.signal_all(first, signal.SIGTERM)
                await self._until_gone(first, LEFTOVER_GRACE)
                # Whatever is left now (and what it started meanwhile) is killed.
                for _ in range(KILL_ROUNDS):
                    rest = self.leftovers()
                    if not rest:
                        break
                    proctree.signal_all(rest, signal.SIGKILL)
                    ended.extend(pid for pid in rest if pid not in ended)
                    await self._until_gone(rest, KILL_WAIT)
            self.collect()
            return ended

    async def _until_gone(self, pids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(proctree.alive(pid) for pid in pids) and time.monotonic() < deadline:
            self.collect()
            await anyio.sleep(LEFTOVER_POLL)

    def collect(self) -> None:
        """Collect the exit of every dead child that asyncio is not waiting for (orphans
        re-parented to this subreaper), so none lingers as a zombie."""
        if self.unnamed:
            return
        for pid in platform.zombie_children(os.getpid()):
            if pid not in self.managed:
                proctree.reap(pid)

    async def close(self) -> list[int]:
        """The job's processes end with the worker: every descendant is ended (the host
        has closed its own process first, gracefully). Returns the pids it ended."""
        self.closed = True
        self.host = None
        self.managed.clear()  # nothing this worker started is spared now
        ended = await self.sweep()
        if self.tg is not None:
            self.tg.cancel_scope.cancel()
        return ended


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
