"""What the hosts that run an agent CLI share (``pi``, ``claude``): one agent process per
job, started and ended through the worker, and a session file read as it grows.

:class:`ProcessHost` holds the scaffolding: the job's writer lock, the agent process (its
start with the job token kept out of its environment, its clean end), the change event
the host's readers wake its waits with, and the session file's tail: an item counts as
delivered (``services.delivered``) only once the agent's own transcript shows its seq,
and a resent item the transcript already holds is settled, not run again. A subclass
says how its transcript reads (:meth:`ProcessHost.scan`, :meth:`ProcessHost.known_seqs`)
and how a run goes, and which versions of its CLI roost was tested with
(:attr:`ProcessHost.tested_versions`): the first start of another version is said in
the worker's log and the job's status line, once.

What the CLI writes on stderr goes to the worker's log; a run that fails when its CLI
exits names the CLI's last lines there in the job's error (the worker does, for every
host: :mod:`roost_core.worker.stderrtail`).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from roost_core import locks
from roost_core.hosts.base import (
    JobInfo,
    RunOutcome,
    WorkerServices,
    end_agent_process,
    until_exited,
)
from roost_core.queue import Item


class SessionTail:
    """A JSONL file read as it grows: each :meth:`read` gives the complete lines appended
    since the last one, as JSON objects (a line still being written waits for its end;
    one that is not a JSON object is skipped). A file that got shorter (the agent rewrote
    it) is read again from its start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.tail = b""

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """``(entries, from_start)``: the new entries, and whether this read began at the
        file's start (the first read, or after a rewrite: totals are counted again)."""
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:
                    self.offset, self.tail = 0, b""
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return [], False
        from_start = self.offset == 0
        self.offset += len(data)
        lines = (self.tail + data).split(b"\n")
        self.tail = lines.pop()
        entries = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
        return entries, from_start


def installed_version(program: str) -> str | None:
    """The version of the npm package that ``program`` (a path, or a name on ``PATH``)
    runs: the ``version`` of the nearest ``package.json`` above the file it resolves to
    (an npm install's ``node_modules/.bin/NAME`` links into its package). None when
    there is none to read (another kind of install): the version is not known."""
    found = program if os.sep in program else shutil.which(program)
    if not found:
        return None
    path = Path(os.path.realpath(found))
    for folder in list(path.parents)[:PACKAGE_DEPTH]:
        try:
            data = json.loads((folder / "package.json").read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return None
        version = data.get("version") if isinstance(data, dict) else None
        return version if isinstance(version, str) else None
    return None


#: How many folders above the program's file are looked in for its ``package.json``.
PACKAGE_DEPTH = 4


def untested_note(agent: str, version: str | None, tested: tuple[str, ...]) -> str | None:
    """What is said when ``agent``'s installed ``version`` is not one of ``tested`` (None
    when it is one, or when either is not known)."""
    if not tested or version is None or version in tested:
        return None
    return f"{agent} {version} is not a version roost was tested with ({', '.join(tested)}); if it fails, its error says why"


class ProcessHost:
    """The base of a host that runs an agent CLI as the job's host process."""

    #: The agent's name in log lines (``starting pi: ...``).
    agent = "agent"
    #: The versions of the CLI roost's tests ran (its plugin's table); empty: not checked.
    tested_versions: tuple[str, ...] = ()
    #: After a run settles, how long to wait for its items to show in the transcript.
    settle_timeout = 5.0
    #: How long the agent has to exit once its stdin is closed, before SIGTERM.
    stop_grace = 5.0

    def __init__(self) -> None:
        self.job: JobInfo | None = None
        self.services: WorkerServices | None = None
        self.lock: locks.WriterLock | None = None
        self.process: Any = None
        self._changed = anyio.Event()
        #: Items put into the agent whose seq its transcript does not show yet.
        self.pending: dict[int, Item] = {}
        #: The usage last told to the worker (which the daemon sums into the tree's budget).
        self._usage_told: tuple[int, float] = (0, 0.0)
        self.log = logging.getLogger(f"roost.{self.agent}")
        self._version_checked = False

    # ------------------------------------------------------------------ the job's session

    def take_lock(self, job: JobInfo) -> None:
        """Hold the session file's writer lock (once) for as long as the host runs."""
        if self.lock is None:
            self.lock = locks.WriterLock(job.session)
            self.lock.acquire()

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()

    # ------------------------------------------------------------------ waiting

    def notify(self) -> None:
        """Something changed (an event from the agent, a bridge call): wake the waits."""
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, predicate: Callable[..., Any]) -> None:
        """Wait until ``predicate()`` holds, looking again at each change."""
        while not predicate():
            await self._changed.wait()

    # ------------------------------------------------------------------ the process

    async def start_process(self, argv: list[str], env: dict[str, str]) -> Any:
        """Start the agent: ``argv``, this process's environment plus ``env`` (the job
        token is never handed on), in the job's folder when it is one. The worker owns
        the process: it reports its pid (``hostPid``) and, once it exits, ends what it
        left behind."""
        assert self.job is not None and self.services is not None
        Path(self.job.session).parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        full_env.pop("PI_JOB_TOKEN", None)  # the worker scrubbed it already; never hand it on
        full_env.update(env)
        cwd = self.job.cwd if Path(self.job.cwd).is_dir() else None
        self.log.info("starting %s: %s", self.agent, " ".join(shlex.quote(a) for a in argv))
        await self.check_version(argv[0])
        self.process = await self.services.start_host_process(argv, env=full_env, cwd=cwd)
        return self.process

    async def check_version(self, program: str) -> None:
        """The first start only: a CLI of a version roost was not tested with is said in
        the worker's log and the job's status line (a flag it rejects then makes sense)."""
        assert self.services is not None
        if self._version_checked:
            return
        self._version_checked = True
        note = untested_note(self.agent, installed_version(program), self.tested_versions)
        if note is not None:
            self.log.warning("%s", note)
            await self.services.status(status=note)

    async def end_process(self) -> bool:
        """End the agent the way it ends cleanly (its stdin closed, then signals); False
        when none runs."""
        process, self.process = self.process, None
        if process is None:
            return False
        await end_agent_process(process, self.stop_grace)
        return True

    # ------------------------------------------------------------------ the transcript

    def scan(self) -> None:
        """Read what the agent appended to its transcript, then :meth:`settle_found` and
        tell the usage (a subclass reads its own format)."""
        raise NotImplementedError

    def known_seqs(self) -> set[int]:
        """The queue seqs the transcript held at the last :meth:`scan`."""
        raise NotImplementedError

    def settle_found(self) -> None:
        """Every pending item the transcript shows is delivered."""
        assert self.services is not None
        known = self.known_seqs()
        for seq in [seq for seq in self.pending if seq in known]:
            self.services.delivered(self.pending.pop(seq))

    def keep_unrecorded(self, *more: Item) -> None:
        """The agent process ended during the run: read what it wrote last, then hand
        what it took and its transcript does not show (and ``more``, taken but never
        handed to it) back to the worker for the next run (``services.unrecorded``).
        Only once the process has exited: a live agent may still write them."""
        assert self.services is not None
        self.scan()
        kept = sorted([*self.pending.values(), *more], key=lambda item: item.seq)
        self.pending.clear()
        if kept:
            self.services.unrecorded(kept)

    async def died_in_run(self, *more: Item) -> RunOutcome:
        """The agent process's output ended during the run (killed, crashed): once it has
        exited, what it wrote is delivered and what it did not (and ``more``, held for
        it) is kept; the run failed."""
        await until_exited(self.process, self.stop_grace)
        self.keep_unrecorded(*more)
        return RunOutcome("failed", error=f"{self.agent} exited during the run")

    def drop_known(self, items: list[Item]) -> list[Item]:
        """Items the transcript already holds (a resend) are settled, not run again."""
        assert self.services is not None
        self.scan()
        known = self.known_seqs()
        fresh = []
        for item in items:
            if item.seq in known:
                self.services.delivered(item)
            else:
                fresh.append(item)
        return fresh

    async def wait_for_pending(self, gone: Callable[[], bool]) -> None:
        """After a run: give its items up to :attr:`settle_timeout` to show in the
        transcript (the agent may write the last lines after it says it is idle)."""
        with anyio.move_on_after(self.settle_timeout):
            while self.pending and not gone():
                self.scan()
                if self.pending:
                    await anyio.sleep(0.02)

    def tell_usage(self, tokens: int, cost: float) -> None:
        """Tell the worker the session's tokens and cost so far, when they changed."""
        assert self.services is not None
        if (tokens, cost) != self._usage_told:
            self._usage_told = (tokens, cost)
            self.services.usage_total(tokens, cost)
