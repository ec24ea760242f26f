"""Worker processes: starting them (from a warm slot, the fork server, or a fresh
interpreter), noticing their exits, killing what a dead one left, reaping idle ones, and
the pool of warm workers.

A worker that ends is the one event other services hear of from here: the
:class:`ExitListener` (the hand-back service) reports a run the exit cut short.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from roost_core import faults, locks
from roost_core.config import Config
from roost_core.daemon.delivery import MAX_CRASH_RESTARTS
from roost_core.daemon.exits import ExitWatches
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobs import Job
from roost_core.daemon.persistence import Persistence, transcript_max_seq
from roost_core.daemon.pool import WarmKey, WarmPool, WarmSlot
from roost_core.daemon.registry import Registry
from roost_core.daemon.tasks import Clock
from roost_core.paths import Paths, remove_worker_folder
from roost_core.worker import proctree
from roost_core.worker.spawner import Spawner, popen_worker

log = logging.getLogger("roost.daemon")

#: How long a stopped worker gets to exit before its process group is killed.
STOP_GRACE_SECONDS = 3.0
MONITOR_INTERVAL = 0.1


class ExitListener(Protocol):
    """Told when a worker's exit cut a run short."""

    def run_restarted(self, job: Job) -> None:
        """The worker died in a run and is started again for the items waiting."""

    def run_lost(self, job: Job, reason: str) -> None:
        """The worker died (``crashed``) or was given up on (``gave_up``), and no new one
        runs the run."""


class Workers:
    """Every job's worker process and the warm slots (see the module docstring).
    ``listener`` is set when the daemon is assembled (it is built after this). Long: a
    worker's start, its exit and the warm slots share one bookkeeping of processes."""

    #: Starts workers through the warm fork server; ``serve`` sets it (None: ``Popen``).
    spawner: Spawner | None = None

    def __init__(self, paths: Paths, config: Config, registry: Registry, persistence: Persistence, hosts: HostSet, clock: Clock) -> None:
        self.paths = paths
        self.hosts = hosts
        self.config = config
        self.registry = registry
        self.jobs = registry.jobs
        self.persistence = persistence
        self.clock = clock
        self.listener: ExitListener | None = None
        self.pool = WarmPool(
            enabled=config.pi_pool,
            size=config.pi_pool_size,
            cap=config.pi_pool_max,
            idle_seconds=config.reap_after_seconds,
            sessions_dir=paths.sessions_dir,
            hosts=hosts.warm_pooled(),
        )
        #: Warm slots told to end, until their worker is gone: slot -> kill deadline.
        self.ending_slots: dict[WarmSlot, float] = {}
        #: ``daemon_stop`` with ``jobs`` is ending every worker: none is started again
        #: (what waits is in the journal; the next daemon starts it).
        self.ending_all = False
        #: Workers told to end: job id -> when their process group is killed.
        self.kill_at: dict[str, float] = {}
        #: Jobs whose worker could not be started (no fds, no processes): tried again.
        self.unstarted: set[str] = set()
        self._monitor_errors: set[str] = set()
        #: Exit notices for adopted workers (the daemon did not start them): a pidfd each
        #: where the kernel has them, so the monitor need not check their liveness.
        self.exits = ExitWatches(self.adopted_worker_exited)

    def reconcile(self) -> None:
        """After a (re)start: a recorded worker that is gone is handled as an exit; a job with
        items and no worker is started, unless stopped or given up on (:func:`given_up`)."""
        for job in list(self.jobs.values()):
            if job.worker_pid is not None and not locks.is_alive(job.worker_pid, job.worker_create_time):
                self.worker_gone(job, None)
            elif job.worker_pid is None and job.queue.items and job.state != "stopped" and not given_up(job):
                if job.state == "running":
                    job.state = "idle"
                self.try_start_worker(job)
            elif job.worker_pid is None and job.state == "running":
                # Made, but the daemon died before its task was stored: nothing will run it.
                job.state = "failed"
                job.error = "the daemon stopped before this job's task was stored; reply to start it"
                self.registry.save(job)

    def check_all(self, now: float) -> None:
        """The monitor's round over every job: exits, stop deadlines, reaping, and
        workers that could not be started."""
        for job in list(self.jobs.values()):
            # One job's trouble (no fds to look at its process...) must not end the
            # monitor, and with it the daemon.
            try:
                self.check_worker(job, now)
                if job.id in self.unstarted:
                    self.retry_start(job)
            except Exception:  # the monitor's error boundary
                if job.id not in self._monitor_errors:
                    log.exception("monitor: checking job %s failed; trying again", job.id)
                    self._monitor_errors.add(job.id)
            else:
                self._monitor_errors.discard(job.id)

    def check_worker(self, job: Job, now: float) -> None:
        if job.worker_pid is None:
            return
        if job.process is not None:
            code = job.process.poll()
            if code is not None:
                self.worker_gone(job, code)
                return
            if job.process.orphaned:
                # Its fork server died before reporting its exit: only liveness tells now.
                job.process = None
        if job.process is None:
            watched = self.exits.watch(job.id, job.worker_pid, job.worker_create_time)
            if watched is False or (watched is None and not locks.is_alive(job.worker_pid, job.worker_create_time)):
                self.worker_gone(job, None)
                return
        deadline = self.kill_at.get(job.id)
        if deadline is not None and now >= deadline:
            self.kill_worker(job)
            self.kill_at[job.id] = now + STOP_GRACE_SECONDS
        if job.conn is None or job.reaping or job.state == "running" or job.dialog or not job.queue.reapable():
            return
        grace, reason = self.idle_grace(job)
        if now - job.idle_since >= grace:
            job.reaping = True
            job.conn.send({"event": "shutdown", "reason": reason})
            self.kill_at[job.id] = now + STOP_GRACE_SECONDS

    def adopted_worker_exited(self, job_id: str, pid: int) -> None:
        """An adopted worker's pidfd says it exited (:class:`ExitWatches`): handled as
        the monitor handles a worker found gone, if the job still has that worker."""
        job = self.jobs.get(job_id)
        if job is None or job.worker_pid != pid or job.process is not None:
            return
        try:
            self.worker_gone(job, None)
        except Exception:  # a loop callback: the monitor's error boundary
            log.exception("handling the exit of the worker of %s failed; the monitor tries again", job_id)

    def idle_grace(self, job: Job) -> tuple[float, str]:
        """How long ``job``'s worker may sit idle with nothing pending, and what ending it
        then is called: a spawned child is *hibernated* after ``hibernateAfterSeconds``
        (a parent's answer or a message wakes it soon, or never), any other job is
        *reaped* after ``reapAfterSeconds``. Either way the next item wakes it from its
        session file, as if it had never slept. A child that keeps processes running on
        purpose (``background``) is not hibernated while they run (that would end them):
        it is reaped as any other job, and hibernated once they have exited."""
        if job.spawned and not job.background and self.config.hibernate_after_seconds < self.config.reap_after_seconds:
            return self.config.hibernate_after_seconds, "hibernated"
        return self.config.reap_after_seconds, "reaped"

    def shut_down(self, job: Job, reason: str) -> None:
        """Tell ``job``'s worker to end (``reason``), or kill it when it is not connected;
        killed with its process group if it outstays :data:`STOP_GRACE_SECONDS`."""
        if job.conn is not None:
            job.conn.send({"event": "shutdown", "reason": reason})
        else:
            self.kill_worker(job)
        self.kill_at[job.id] = self.clock() + STOP_GRACE_SECONDS

    def forget(self, job: Job) -> None:
        """A removed job: no exit of its worker is handled any more."""
        self.exits.forget(job.id)
        self.kill_at.pop(job.id, None)
        self.unstarted.discard(job.id)

    def retry_start(self, job: Job) -> None:
        """Start the worker a job waits for, if it still needs one."""
        if job.worker_pid is not None or job.state == "stopped" or not job.queue.items:
            self.unstarted.discard(job.id)
            return
        self.try_start_worker(job)

    def try_start_worker(self, job: Job) -> bool:
        """:meth:`start_worker`, or, when no process can be made now (no fds, no
        processes), a log line and another try from the monitor; its items wait. None
        while the daemon is ending every worker to stop."""
        if self.ending_all or job.attach is not None:  # attached: the session is the terminal's
            return False
        try:
            self.start_worker(job)
        except OSError as exc:
            if job.id not in self.unstarted:
                log.warning("cannot start the worker of %s (%s); its items wait, trying again", job.id, exc)
            self.unstarted.add(job.id)
            # A new item reset its crash count: on record, so a restart starts it too.
            self.registry.save(job)
            return False
        if self.unstarted:
            self.unstarted.discard(job.id)
        return True

    def kill_worker(self, job: Job) -> None:
        if job.worker_pid is None:
            return
        try:
            os.killpg(job.worker_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(job.worker_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_leftovers(self, job: Job) -> list[int]:
        """Kill every process the job's (dead or dying) worker started, found by the mark
        of that worker start in their environment: the worker's own bookkeeping died with
        it, and pi's tools run in sessions of their own; and its folder. The pids killed."""
        if not job.worker_mark:
            return []
        killed = proctree.kill_marked(job.worker_mark, spare=self.spared_pids())
        remove_worker_folder(job.worker_mark)
        if killed:
            log.warning("killed %d process(es) left behind by the worker of %s: %s", len(killed), job.id, killed)
        return killed

    def spared_pids(self) -> set[int]:
        """Never killed by a mark: this daemon (``kill_marked`` skips it), its fork server
        and every live worker (a forked worker's /proc/PID/environ is the fork server's,
        and a daemon started by a job's tool could carry that job's mark in its own)."""
        spare = {other.worker_pid for other in self.jobs.values() if other.worker_pid is not None}
        spare.update(slot.pid for slot in self.pool.slots.values() if slot.pid is not None)
        if self.spawner is not None and self.spawner.server is not None:
            spare.add(self.spawner.server.pid)
        return spare

    def worker_gone(self, job: Job, code: int | None) -> None:
        """A worker exited: clean (reaped, stopped) or a crash. Whatever it started and
        left behind is killed before anything else (a new worker may start below)."""
        clean = job.reaping or job.state == "stopped" or (code == 0 and job.state != "running")
        self.exits.forget(job.id)
        in_a_run = job.state == "running"
        self.kill_at.pop(job.id, None)
        self.kill_leftovers(job)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        job.conn = None
        job.process = None
        if job.queue.unsure:
            # A worker that outlived the last daemon ended before it said which seqs it
            # holds: its transcript, final now, says.
            written = transcript_max_seq(job, self.hosts)
            if written is not None:
                self.persistence.settle_numbering(job, written)
        job.worker_pid = None
        job.worker_create_time = None
        job.worker_mark = None
        job.host_pid = None
        job.reaping = False
        job.dialog = False
        job.dialog_options = None
        job.background = 0
        job.background_shown = []
        if job.attach is not None:  # the session file is free for roost attach's CLI
            job.attach.released.set()
        # Why it died, in its own log's words: the log line, and the error of a job given
        # up on (and so its report), say what to fix (every start appends to one log).
        why = last_line(self.paths.jobs_dir / f"{job.id}.log") if not clean else ""
        if not clean:
            job.crashes += 1
            if job.state == "running":
                job.state = "failed"
                job.error = f"worker died during a run ({describe_exit(code)})"
            log.warning("worker of %s died (%s)%s", job.id, describe_exit(code), why)
        self.registry.save(job)
        gave_up = False
        if job.queue.items and job.state != "stopped":
            if job.crashes <= MAX_CRASH_RESTARTS:
                self.try_start_worker(job)
                if in_a_run and self.listener is not None:
                    # The run that died is not run again (its items are in the transcript):
                    # its parent hears of it now, if that run reports.
                    self.listener.run_restarted(job)
                return
            job.state = "failed"
            job.error = f"worker crashed {job.crashes} times; giving up{why}"
            self.registry.save(job)
            gave_up = True
        if not clean and (in_a_run or gave_up) and self.listener is not None:
            # A run died and is not started again: a parent must not wait for a report
            # that cannot come. (A worker that died idle had reported; a message wakes it.)
            # The job is failed, not gone: a message starts it again, as the report says.
            self.listener.run_lost(job, "gave_up" if gave_up else "crashed")

    def launch_worker(self, job_id: str, token: str, cwd: str, **extra_env: str) -> tuple[Any, str]:
        """Start a worker process in its own session (it survives a daemon restart):
        forked by the daemon's fork server, or a fresh interpreter when there is none.
        Returns the process and the mark of this start (see ``kill_leftovers``)."""
        # A fresh mark per worker start: everything this worker starts inherits it, so
        # what a dead worker left can be found (kill_leftovers) and never confused with
        # what the next worker of the same job starts.
        mark = f"{job_id}.{secrets.token_hex(6)}"
        env = dict(os.environ, PI_JOB_TOKEN=token, ROOST_JOB=job_id, ROOST_SOCKET=str(self.paths.socket), **extra_env)
        env[proctree.MARK_VARIABLE] = mark
        if "ROOST_HOME" in env:
            env["ROOST_HOME"] = str(self.paths.home)  # absolute: the worker runs in the job's cwd
        cwd = cwd if Path(cwd).is_dir() else str(self.paths.home)
        log_path = str(self.paths.jobs_dir / f"{job_id}.log")
        if self.spawner is not None:
            process = self.spawner.start_worker(env, cwd, log_path)
        else:
            process = popen_worker(env, cwd, log_path)
        return process, mark

    def start_worker(self, job: Job) -> None:
        """Start the worker of ``job``: the warm slot it was made from, if any and still
        there; for a job that continues its session file (a wake), a ready warm slot of
        its host, cwd, model and thinking level, whose pi switches to that file; else a
        new worker process (a cold start, which the job's log says for a pooled host)."""
        slot, job.slot = job.slot, None
        if slot is not None and self.adopt_slot(job, slot):
            return
        cold: dict[str, str] = {}
        if self.pool.key_for(job.host, job.cwd, job.model, job.thinking) is not None:
            if slot is None and Path(job.session).is_file():
                woken = self.take_slot(job.host, job.cwd, job.model, job.thinking, wake=True)
                if woken is not None and self.adopt_slot(job, woken):
                    return
            # Said in the job's log by its worker (read and dropped there: pi never sees it).
            cold["ROOST_COLD_START"] = "no warm pi was free for this job's cwd, model and thinking level"
        process, mark = self.launch_worker(job.id, job.token, job.cwd, **cold)
        faults.point("daemon.after_worker_start")
        job.process = process
        job.worker_pid = process.pid
        job.worker_create_time = process.create_time
        job.worker_mark = mark
        job.host_pid = None
        job.reaping = False
        self.registry.save(job)

    # ------------------------------------------------------------------ warm pi processes

    def take_slot(self, host: str, cwd: str, model: str | None, thinking: str | None, *, wake: bool = False) -> WarmSlot | None:
        """A ready warm slot for a job started with these, or None; either way the pool
        warms the next one for them. ``wake``: the job continues its session file."""
        key = self.pool.key_for(host, cwd, model, thinking)
        return self.pool.take(key, wake=wake) if key is not None else None

    @contextlib.contextmanager
    def slot_released_on_error(self, job: Job) -> Iterator[None]:
        """A job that fails to be made before its worker starts ends the warm slot it
        took (nobody else may take it: it has that job's id and token)."""
        try:
            yield
        except BaseException:
            if job.slot is not None:
                self.end_slot(job.slot)
                job.slot = None
            raise

    def adopt_slot(self, job: Job, slot: WarmSlot) -> bool:
        """Make the slot's warm worker the worker of ``job``: it hears ``adopt`` and says
        its ordinary ``worker_hello``. A job made from the slot has the slot's id, token
        and session; any other (a wake) is named in the event with its token and log,
        and the worker switches its pi to the job's session file."""
        conn = slot.conn
        if conn is None or conn.closed or slot.process is None or slot.process.poll() is not None:
            self.end_slot(slot)
            return False
        conn.warm = None
        job.process = slot.process
        job.worker_pid = slot.pid
        job.worker_create_time = slot.create_time
        job.worker_mark = slot.mark
        job.host_pid = None
        job.reaping = False
        self.registry.save(job)
        if job.id == slot.id:
            conn.send({"event": "adopt", "job": job.id})
        else:
            logs = self.paths.jobs_dir
            conn.send({"event": "adopt", "job": job.id, "token": job.token, "log": str(logs / f"{job.id}.log"), "slotLog": str(logs / f"{slot.id}.log")})
        return True

    def start_slot(self, key: WarmKey) -> None:
        slot = self.pool.new_slot(key, set(self.jobs) | set(self.registry.foreground))
        try:
            process, mark = self.launch_worker(slot.id, slot.token, key.cwd, ROOST_WARM="1")
        except OSError as exc:
            log.warning("cannot start a warm %s worker: %s", key.host, exc)
            self.pool.drop(slot)
            return
        slot.process, slot.pid, slot.create_time, slot.mark = process, process.pid, process.create_time, mark

    def end_slot(self, slot: WarmSlot) -> None:
        """Tell a slot's worker to end (it closes its pi); killed if it outstays."""
        self.pool.slots.pop(slot.id, None)
        if slot.conn is not None and not slot.conn.closed:
            slot.conn.send({"event": "shutdown", "reason": "pool"})
            self.ending_slots[slot] = time.monotonic() + STOP_GRACE_SECONDS
        else:
            self.ending_slots[slot] = time.monotonic()

    def slot_gone(self, slot: WarmSlot) -> bool:
        if slot.process is None:
            return True
        if slot.process.poll() is not None:
            return True
        if getattr(slot.process, "orphaned", False):
            return not locks.is_alive(slot.pid, slot.create_time)
        return False

    def check_pool(self) -> None:
        """Warm slots: notice the ones whose worker exited, end what the pool no longer
        wants (or that waited too long), start what it wants."""
        now = time.monotonic()
        for slot in list(self.pool.slots.values()):
            if self.slot_gone(slot):
                log.warning("warm %s worker %s exited before a job took it%s", slot.key.host, slot.pid, last_line(self.paths.jobs_dir / f"{slot.id}.log"))
                self.forget_slot(slot)
                self.pool.drop(slot)
        for slot, deadline in list(self.ending_slots.items()):
            if self.slot_gone(slot):
                self.ending_slots.pop(slot)
                self.forget_slot(slot)
            elif now >= deadline and slot.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(slot.pid, signal.SIGKILL)
                self.ending_slots[slot] = now + STOP_GRACE_SECONDS
        ending, starting = self.pool.plan(now)
        for slot in ending:
            self.end_slot(slot)
        if self.ending_all:
            return
        for key in starting:
            self.start_slot(key)

    def forget_slot(self, slot: WarmSlot) -> None:
        """A slot's worker is gone: kill what it left, and its log (it never was a job)."""
        if slot.mark:
            proctree.kill_marked(slot.mark, spare=self.spared_pids())
        with contextlib.suppress(OSError):
            (self.paths.jobs_dir / f"{slot.id}.log").unlink()


def given_up(job: Job) -> bool:
    """``job``'s worker crashed more often than roost restarts it, and nobody has sent it
    anything since (a new item resets the count): it is failed and stays so, its items
    waiting, until a user or an agent asks again."""
    return job.crashes > MAX_CRASH_RESTARTS


#: How much of a worker's log's end is read for why it ended (a job's log grows with
#: every start; what the last one said is at its end).
LAST_LINE_BYTES = 16384


def last_line(path: Path) -> str:
    """``: <why a worker's log says it ended>`` (its last ``...Error: ...`` line, else its
    last line, among the last :data:`LAST_LINE_BYTES` of the log), or nothing."""
    try:
        with path.open("rb") as log_file:
            log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - LAST_LINE_BYTES))
            tail = log_file.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip(" |+-") for line in tail.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "Error: " in line]
    chosen = errors[-1] if errors else lines[-1] if lines else ""
    return f": {chosen[-300:]}" if chosen else ""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
