"""The daemon's state and the mechanism every op shares: job records and their queues,
worker processes (start, notice exits, reap), foreground peers, and delivery of an item
to whoever holds the target session now. The ops themselves live in the mixins
:mod:`~roost_core.daemon.ops_jobs`, :mod:`~roost_core.daemon.ops_messaging` and
:mod:`~roost_core.daemon.handback`; :class:`roost_core.daemon.core.Daemon` puts them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from roost_core import faults, locks, platform, policy, routing
from roost_core.config import Config
from roost_core.daemon import changes
from roost_core.daemon.accept import Refuser
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import MAX_CRASH_RESTARTS, Mailroom, not_stored, settle
from roost_core.daemon.exits import ExitWatches
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import AnswerLedger
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.pool import WarmKey, WarmPool, WarmSlot
from roost_core.daemon.receipts import MessageQuotes, Receipts
from roost_core.daemon.sending import SendDesk, chain_of
from roost_core.daemon.tables import PeerListing, PeerTables
from roost_core.daemon.tools import offered_tools
from roost_core.daemon.watch import Watchers
from roost_core.hosts import registered_hosts, session_seqs
from roost_core.names import derived_name
from roost_core.paths import Paths
from roost_core.protocol import (
    BAD_ARGS,
    ITEM_RESERVE,
    MAX_FRAME,
    MOST_BYTES_PER_CHAR,
    NO_HOST,
    NOT_FOUND,
    UNAUTHORIZED,
    ProtocolError,
)
from roost_core.queue import Item
from roost_core.records import (
    HostSpec,
    OutgoingItem,
    PeerInfo,
    ReachDecision,
    ToolDef,
)
from roost_core.store import RESERVE_BYTES, Commit, JobFiles, Journal, JournalError, read_journal
from roost_core.worker import proctree
from roost_core.worker.spawner import Spawner, popen_worker

log = logging.getLogger("roost.daemon")

#: After a daemon restart every job's seq counter jumps by this much, so an item that was
#: pushed to a worker but not yet durable when the daemon died can never share a seq with
#: a new one (the queue caps bound such items far below it).
SEQ_RESTART_GAP = 1000
#: Left in the state folder by a daemon whose journal closed with every commit written.
CLEAN_STOP_MARKER = "clean-stop"
#: How long a stopped worker gets to exit before its process group is killed.
STOP_GRACE_SECONDS = 3.0
MONITOR_INTERVAL = 0.1
REPORT_CHARS = 6000
#: How often job records that could not be written (a full disk) are tried again.
SAVE_RETRY_SECONDS = 1.0
#: How long a graceful stop waits for slow clients to take their last answers.
STOP_FLUSH_SECONDS = 1.0


def stop_flush_seconds() -> float:
    """``ROOST_STOP_FLUSH_SECONDS`` when set (a test holds a stop open with it)."""
    return float(os.environ.get("ROOST_STOP_FLUSH_SECONDS", STOP_FLUSH_SECONDS))


def journal_reserve() -> int:
    """``ROOST_JOURNAL_RESERVE_BYTES`` when set (a test of a full disk makes the journal's
    reserve small enough to spend), else :data:`~roost_core.store.RESERVE_BYTES`."""
    return int(os.environ.get("ROOST_JOURNAL_RESERVE_BYTES", RESERVE_BYTES))


class DaemonBase:
    #: Starts workers through the warm fork server; ``serve`` sets it (None: ``Popen``).
    spawner: Spawner | None = None

    if TYPE_CHECKING:
        # Defined by the op classes that Daemon (daemon.core) puts over this base, which
        # call them on each other and from here: declared so that the type checker checks
        # those calls (issue 41 point 1 is to end this arrangement).
        def agent_rows(self) -> list[dict[str, Any]]: ...
        def job_name(self, requested: str | None, task: str, *, chosen: bool = True) -> str: ...
        def create_job(self, *, task: str, name: str, cwd: str, host: str, slot: Any = None, **fields: Any) -> Job: ...
        def add_job(self, job: Job) -> None: ...
        async def enqueue_task(self, job: Job, task: str, **fields: Any) -> None: ...
        async def report_crashed_run(self, job: Job) -> None: ...
        async def report_ended(self, job: Job, reason: str) -> None: ...
        async def retry_undelivered(self, *, session: str | None = None, peer_id: str | None = None) -> None: ...
        async def retry_all_undelivered(self) -> None: ...
        def add_watch(self, conn: Connection, sender: PeerInfo, ref: str) -> dict[str, Any]: ...
        def fire_watches(self, record: Job | ForegroundPeer, event: str) -> None: ...
        def drop_watches_of(self, watcher_id: str) -> None: ...
        def note_usage(self, job: Job, usage: Any) -> None: ...

    def __init__(self, paths: Paths, config: Config, pm: Any, *, durable: bool = True) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        self.durable = durable
        self.started = time.time()
        self.jobs: dict[str, Job] = {}
        self.foreground: dict[str, ForegroundPeer] = {}
        self.connections: set[Connection] = set()
        self.job_files = JobFiles(paths.jobs_dir, durable=durable)
        #: Every host a job can run on: what the plugins register, roost's own included.
        self.hosts: dict[str, HostSpec] = registered_hosts(pm)
        self.pool = WarmPool(
            enabled=config.pi_pool,
            size=config.pi_pool_size,
            idle_seconds=config.reap_after_seconds,
            sessions_dir=paths.sessions_dir,
        )
        #: Warm slots told to end, until their worker is gone: slot -> kill deadline.
        self._ending_slots: dict[WarmSlot, float] = {}
        self.stopping = anyio.Event()
        #: ``daemon_stop`` with ``jobs`` is ending every worker: none is started again
        #: (what waits is in the journal; the next daemon starts it).
        self.ending_all = False
        self._kill_at: dict[str, float] = {}
        self.tg: anyio.abc.TaskGroup | None = None
        self.receipts = Receipts(paths.state_dir / "dead.jsonl", durable=durable, later=call_soon)
        self.refuser = Refuser()
        self.messages = MessageQuotes()
        #: The op logic of every item's path (no I/O): it asks the daemon only to start workers.
        self.mailroom = Mailroom(self.receipts, self.messages, self.try_start_worker)
        self.watch = Watchers(self.agent_rows)
        #: The daemon's clock for rate windows, reaping and stop deadlines. ``test_clock``
        #: stops it (``clock_frozen``) and moves it by hand, so a test of a window never
        #: depends on how long its own steps take.
        self.clock_frozen: float | None = None
        self.clock: Callable[[], float] = lambda: time.monotonic() if self.clock_frozen is None else self.clock_frozen
        #: The peer tables (no I/O): they read ``jobs`` and ``foreground`` as they are now.
        self.tables = PeerTables(self.jobs, self.foreground, pm, config, self.host_takes_messages)
        #: Each tree's spending and budget answer (no I/O).
        self.budgets = Budgets(self.jobs, pm, config)
        #: The send op's logic and every agent item's hand-over (no I/O): over the tables,
        #: the budgets and the mailroom.
        #: The first answers of keyed requests, so a client may ask again after losing an
        #: answer (no I/O: its records go to the journal).
        self.ledger = AnswerLedger(self.write_answer)
        self.mailroom.pushed = self.ledger.pushed
        #: Keyed sends to foreground peers that the last daemon answered ``delivered`` and
        #: no peer acked: peer id -> (ledger slot, deliver event), pushed again when the
        #: peer registers (it drops one it holds by its message id).
        self.unpushed: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
        #: The agent tools as last worked out, with the plugin set's generation then.
        self._tools: tuple[int | None, dict[str, ToolDef]] | None = None
        self.desk = SendDesk(self.tables, self.budgets, self.mailroom, self.receipts, self.jobs, self.foreground, pm, config, self.clock)
        #: Jobs whose record could not be written (disk full, I/O error): written again
        #: by the monitor; the record in memory is the truth meanwhile.
        self.unsaved: set[str] = set()
        #: Jobs whose record changed and is not written yet (``save``), in change order.
        self.dirty: dict[str, Job] = {}
        self._records_due = False
        self._next_retry = 0.0
        #: Jobs whose worker could not be started (no fds, no processes): tried again.
        self.unstarted: set[str] = set()
        #: Reports kept because the journal or the parent's queue could not take them:
        #: routed again by the monitor (once the journal writes again).
        self.reports_to_retry = False
        #: The ids of jobs that keep a report their parent has not taken (a dict for its
        #: order), so that a peer's registration looks at these, not at every job record.
        self.kept_reports: dict[str, None] = {}
        self._monitor_errors: set[str] = set()
        #: Exit notices for adopted workers (the daemon did not start them): a pidfd each
        #: where the kernel has them, so the monitor need not check their liveness.
        self.exits = ExitWatches(self.adopted_worker_exited)

    @property
    def journal(self) -> Journal | None:
        """The journal, once :meth:`load` has read it (the mailroom buffers into it)."""
        return self.mailroom.journal  # type: ignore[return-value]

    @journal.setter
    def journal(self, journal: Journal | None) -> None:
        self.mailroom.journal = journal

    def load(self) -> None:
        """Job records, then the journal's items; then every seq counter jumps a gap.

        A record or a journal line that roost could not have written (damaged, foreign,
        edited by hand) is set aside with a log line, and the rest is served: a bad job
        record is renamed ``<id>.json.bad``; the journal's unreadable lines are kept in
        ``queue.journal.bad`` (the journal itself is written anew from what was read)."""
        for path, data in self.job_files.records():
            try:
                job = Job.from_json(data)
                if job.id != path.stem:
                    raise ValueError(f"its id {job.id!r} is not its file name")
            except (TypeError, ValueError) as exc:
                try:
                    moved = self.job_files.set_aside(path)
                except OSError as move_exc:
                    log.error("job record %s is unreadable (%s) and cannot be set aside (%s); skipped", path.name, exc, move_exc)
                else:
                    log.error("job record %s is unreadable (%s): set aside as %s, the other jobs are served", path.name, exc, moved.name)
                continue
            job.framed_name = policy.sanitize_name(self.pm, job.name)
            self.jobs[job.id] = job
        unreadable: list[int] = []
        torn: list[int] = []
        bad_records = 0
        for record in read_journal(self.paths.journal, unreadable, torn):
            if record.get("op") == "answer":
                try:
                    self.ledger.restore(record)
                except ValueError:
                    bad_records += 1
                continue
            job_id = record.get("job")
            if not isinstance(job_id, str):
                bad_records += 1
                continue
            owner = self.jobs.get(job_id)
            if owner is None:
                continue  # a removed job's (or one whose record was set aside, with its own line)
            try:
                apply_journal_record(owner, record)
            except (TypeError, ValueError):
                bad_records += 1
        if unreadable or bad_records:
            self.set_journal_aside(len(unreadable), bad_records, unreadable[:5], len(torn))
        for slot, peer_id, event in self.ledger.unpushed():
            self.unpushed.setdefault(peer_id, []).append((slot, event))
        clean = self.took_clean_stop()
        for job in self.jobs.values():
            if not clean:
                self.resume_numbering(job)
            job.queue.durable = job.queue.reply_seq
            if job.undelivered_report is not None:
                self.kept_reports[job.id] = None
        changes.changed()
        self.journal = Journal(self.paths.journal, durable=self.durable, snapshot=self.journal_snapshot, reserve=journal_reserve())
        try:
            self.journal.replace_with(self.journal.snapshot_bytes())
        except OSError as exc:
            # A full disk must not keep the daemon from starting: the old journal was
            # replayed and stays valid; the first commit writes it anew.
            log.warning("cannot rewrite the journal at start (%s); the first commit will", exc)
            self.journal.failed_to_rewrite()

    def took_clean_stop(self) -> bool:
        """Whether the last daemon stopped cleanly (its marker, taken: a crash of this one
        must not find it). After a clean stop every item ever pushed was durable, so seqs
        go on from the journal's."""
        marker = self.paths.state_dir / CLEAN_STOP_MARKER
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot take the clean-stop marker (%s): numbering as after a crash", exc)
            return False
        return True

    def resume_numbering(self, job: Job) -> None:
        """After a crash, where ``job``'s seqs go on. The dead daemon may have pushed items
        it never made durable (a push goes before its fsync): the receiver may hold seqs
        past the journal's. A worker still alive says which it holds when it says hello
        (:meth:`JobQueue.settle_seq`), and seqs go on after them; an item queued before
        that jumps :data:`SEQ_RESTART_GAP`. A worker that died with the daemon left what it
        got in its transcript: seqs go on after the transcript's. A job with no worker had
        nothing pushed."""
        if job.worker_pid is None:
            return
        if locks.is_alive(job.worker_pid, job.worker_create_time):
            job.queue.unsure = SEQ_RESTART_GAP
            return
        written = transcript_max_seq(job, self.hosts.get(job.host))
        if written is None:
            job.queue.unsure = SEQ_RESTART_GAP
        else:
            job.queue.reply_seq = max(job.queue.reply_seq, written)

    def settle_numbering(self, job: Job, held: int) -> None:
        """``job``'s receiver holds every seq up to ``held`` (:meth:`resume_numbering`):
        seqs go on after it, and the journal keeps the counter so (not the reservation)."""
        if job.queue.settle_seq(held) and self.journal is not None:
            try:
                self.journal.add({"op": "seq", "job": job.id, "replySeq": job.queue.reply_seq, "acked": job.queue.acked, "settled": True})
            except JournalError as exc:
                log.warning("%s: the settled seq counter was not journaled (%s); a crash now jumps it again", job.id, exc)

    def mark_clean_stop(self) -> None:
        """The journal closed with every commit written: leave the marker that lets the
        next daemon number on with no jump."""
        marker = self.paths.state_dir / CLEAN_STOP_MARKER
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                platform.sync_file(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot leave the clean-stop marker (%s): the next start numbers as after a crash", exc)

    def set_journal_aside(self, unreadable: int, bad: int, first_lines: list[int], torn: int = 0) -> None:
        """Keep a copy of a journal with lines that could not be replayed, before it is
        written anew from what could, and say so in one log line (``torn`` of the
        ``unreadable`` lines were cut short: a record a crash tore in its write, whose
        item is lost if its commit had been answered)."""
        target = self.paths.journal.with_name(self.paths.journal.name + ".bad")
        try:
            shutil.copyfile(self.paths.journal, target)
            os.chmod(target, 0o600)
        except OSError as exc:
            target_text = f"not kept ({exc})"
        else:
            target_text = f"kept in {target.name}"
        torn_text = (
            f" ({torn} of them torn: cut short by zeros or the end of the file, as a crash in a write leaves a record;"
            " an item in one is lost if it was answered as stored)"
            if torn else ""
        )
        log.error(
            "journal: %d lines are not JSON (first at lines %s)%s and %d records are not ones roost writes; "
            "they are skipped, the journal as it was is %s",
            unreadable, first_lines, torn_text, bad, target_text,
        )

    def journal_snapshot(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for job in self.jobs.values():
            records.append({"op": "seq", "job": job.id, "replySeq": job.queue.reserved, "acked": job.queue.acked})
            records.extend({"op": "item", "job": job.id, "deliver": item.to_event()} for item in job.queue.items)
        records.extend(self.ledger.records())
        return records

    def write_answer(self, record: dict[str, Any]) -> Commit | None:
        """Hand a kept answer's record to the journal (its next commit). One the journal
        cannot take stays kept in memory: a repeat after a restart is then done anew,
        and its receiver drops the second copy by its message id."""
        journal = self.journal
        if journal is None:
            return None
        try:
            return journal.add(record)
        except JournalError as exc:
            log.warning("answer record not journaled (%s)", exc)
            return None

    def agent_tools(self) -> dict[str, ToolDef]:
        """The agent tools, by name: every declaration the plugins contribute that can run
        (:func:`~roost_core.daemon.tools.offered_tools`), worked out again when the
        plugin set changes."""
        generation = getattr(self.pm, "generation", None)
        if self._tools is None or self._tools[0] != generation or generation is None:
            self._tools = (generation, {tool.name: tool for tool in offered_tools(self.pm, self.config, tuple(self.hosts))})
        return self._tools[1]

    def tool_list(self) -> list[dict[str, Any]]:
        """The tools as every host shows them to the model (name, description, parameters)."""
        return [tool.to_json() for tool in self.agent_tools().values()]

    def request_key(self, conn: Connection, args: dict[str, Any]) -> str | None:
        """The caller and key of a keyed request that makes a job (None: not keyed)."""
        key = args.get("key")
        return None if key is None else f"{self.caller_of(conn)}:{key}"

    async def job_of_request(self, request_key: str | None) -> Job | None:
        """The job a keyed ``start`` or ``spawn`` asked before made, if any: the ledger
        lost its answer with a crash, but the job record was written first. A job whose
        task the crash took before it was durable gets it now (the request is done
        once, in full)."""
        if request_key is None:
            return None
        job = next((job for job in self.jobs.values() if job.request_key == request_key), None)
        if job is not None and job.queue.reply_seq == 0 and not job.queue.items:
            if job.state == "failed":
                job.state, job.error = "running", None
                self.save(job)
            await self.enqueue(job, "reply", job.task, trace=f"t-{job.id}-1")
        return job

    def caller_of(self, conn: Connection) -> str:
        """Whom a keyed request's answer is kept for: the session the connection speaks
        as, or ``user`` for an unbound one (the CLI: every connection of the daemon's user)."""
        if conn.job is not None:
            return conn.job.id
        if conn.peer is not None:
            return conn.peer.id
        return "user"

    def reconcile_workers(self) -> None:
        """After a (re)start: a recorded worker that is gone is handled as an exit."""
        for job in list(self.jobs.values()):
            if job.worker_pid is not None and not locks.is_alive(job.worker_pid, job.worker_create_time):
                self.worker_gone(job, None)
            elif job.worker_pid is None and job.queue.items and job.state not in ("stopped",):
                if job.state == "running":
                    job.state = "idle"
                self.try_start_worker(job)
            elif job.worker_pid is None and job.state == "running":
                # Made, but the daemon died before its task was stored: nothing will run it.
                job.state = "failed"
                job.error = "the daemon stopped before this job's task was stored; reply to start it"
                self.save(job)

    def save(self, job: Job) -> None:
        """Note that ``job``'s record changed. The op logic does no I/O: the record is
        written by :meth:`write_records`, which the wire layer has called (through
        :meth:`before_output`) before any byte leaves the daemon (``Flusher``), so no
        client ever sees a state a crash would take back; and at the loop's next pass at
        the latest, for a change nobody is told of. Changes made in one pass share one
        write."""
        job.updated = time.time()
        self.watch.touch()
        self.dirty[job.id] = job
        if not self._records_due:
            self._records_due = True
            try:
                call_soon(self.write_records)
            except RuntimeError:  # no loop (loading, a test of the records): write now
                self.write_records()

    def before_output(self) -> None:
        """What must be on disk before any byte of a pass reaches a client (the wire
        layer's ``Flusher`` calls it first): the job records the pass changed and the
        dead letters it buried. A client never reads a state or a refusal that a crash
        right after would take back."""
        self.write_records()
        self.receipts.write_due()

    def write_records(self) -> None:
        """Write the records changed since the last call (see :meth:`save`). One that
        cannot be written (a full disk, an I/O error, no fds) is kept in memory, which
        stays the truth, and written again by the monitor (:meth:`retry_saves`): a state
        change is never refused for want of disk. A job removed meanwhile is not written:
        its record is gone with it."""
        self._records_due = False
        if not self.dirty:
            return
        dirty, self.dirty = self.dirty, {}
        for job in dirty.values():
            if self.jobs.get(job.id) is not job:
                continue
            try:
                self.job_files.save(job.id, job.to_json())
            except OSError as exc:
                if not self.unsaved:
                    log.warning("cannot write job records (%s); kept in memory and written again once the disk takes them", exc)
                self.unsaved.add(job.id)
            else:
                self.unsaved.discard(job.id)

    def save_new(self, job: Job) -> None:
        """Write a new job's record, or refuse the op that makes it (``not_stored``): a job
        the daemon would forget at its next start is not made."""
        job.updated = time.time()
        try:
            self.job_files.save(job.id, job.to_json())
        except OSError as exc:
            raise not_stored(exc, "the job record") from exc
        self.dirty.pop(job.id, None)  # written as it is now
        self.watch.touch()

    def retry_writes(self, now: float) -> None:
        """Once a second at most, write again what the disk refused: job records, dead
        letters, and reports kept for want of room (routed again)."""
        if now < self._next_retry or not (self.unsaved or self.receipts.unwritten or self.reports_to_retry):
            return
        self._next_retry = now + SAVE_RETRY_SECONDS
        if self.receipts.unwritten:
            self.receipts.flush()
        if self.reports_to_retry:
            self.reports_to_retry = False
            self.soon(self.retry_all_undelivered)
        self.retry_saves()

    def retry_saves(self) -> None:
        """Write again the job records that could not be written."""
        written = 0
        for job_id in sorted(self.unsaved):
            job = self.jobs.get(job_id)
            if job is None:
                self.unsaved.discard(job_id)
                continue
            try:
                self.job_files.save(job.id, job.to_json())
            except OSError:
                return  # still failing: the rest waits for the next round
            self.unsaved.discard(job_id)
            written += 1
        if written:
            log.warning("job records: %d kept in memory while the disk refused them are written now", written)

    async def monitor(self) -> None:
        """Notice worker exits, kill workers that outstay a stop, reap idle workers; write
        again what a full disk refused, start workers that could not be started."""
        while True:
            await anyio.sleep(MONITOR_INTERVAL)
            now = self.clock()
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
            self.retry_writes(time.monotonic())
            self.check_pool()

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
        deadline = self._kill_at.get(job.id)
        if deadline is not None and now >= deadline:
            self.kill_worker(job)
            self._kill_at[job.id] = now + STOP_GRACE_SECONDS
        if job.conn is None or job.reaping or job.state == "running" or job.dialog or not job.queue.reapable():
            return
        grace, reason = self.idle_grace(job)
        if now - job.idle_since >= grace:
            job.reaping = True
            job.conn.send({"event": "shutdown", "reason": reason})
            self._kill_at[job.id] = now + STOP_GRACE_SECONDS

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
        session file, as if it had never slept."""
        if job.spawned and self.config.hibernate_after_seconds < self.config.reap_after_seconds:
            return self.config.hibernate_after_seconds, "hibernated"
        return self.config.reap_after_seconds, "reaped"

    def soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` as a task of the daemon (from sync code paths). Its failure is
        logged: a task of the daemon's task group that raised would end the daemon."""
        if self.tg is not None:
            self.tg.start_soon(_logged, fn, *args)

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
        if self.ending_all:
            return False
        try:
            self.start_worker(job)
        except OSError as exc:
            if job.id not in self.unstarted:
                log.warning("cannot start the worker of %s (%s); its items wait, trying again", job.id, exc)
            self.unstarted.add(job.id)
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
        it, and pi's tools run in sessions of their own. Returns the pids killed."""
        if not job.worker_mark:
            return []
        killed = proctree.kill_marked(job.worker_mark, spare=self.spared_pids())
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
        self._kill_at.pop(job.id, None)
        self.kill_leftovers(job)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        job.conn = None
        job.process = None
        if job.queue.unsure:
            # A worker that outlived the last daemon ended before it said which seqs it
            # holds: its transcript, final now, says.
            written = transcript_max_seq(job, self.hosts.get(job.host))
            if written is not None:
                self.settle_numbering(job, written)
        job.worker_pid = None
        job.worker_create_time = None
        job.worker_mark = None
        job.host_pid = None
        job.reaping = False
        job.dialog = False
        if not clean:
            job.crashes += 1
            if job.state == "running":
                job.state = "failed"
                job.error = f"worker died during a run ({describe_exit(code)})"
            log.warning("worker of %s died (%s)", job.id, describe_exit(code))
        self.save(job)
        gave_up = False
        if job.queue.items and job.state != "stopped":
            if job.crashes <= MAX_CRASH_RESTARTS:
                self.try_start_worker(job)
                if in_a_run:
                    # The run that died is not run again (its items are in the transcript):
                    # its parent hears of it now, if that run reports.
                    self.soon(self.report_crashed_run, job)
                return
            job.state = "failed"
            job.error = f"worker crashed {job.crashes} times; giving up"
            self.save(job)
            gave_up = True
        if not clean and (in_a_run or gave_up):
            # A run died and is not started again: a parent must not wait for a report
            # that cannot come. (A worker that died idle had reported; a message wakes it.)
            # The job is failed, not gone: a message starts it again, as the report says.
            self.soon(self.report_ended, job, "gave_up" if gave_up else "crashed")
            # Not "ended": a watcher, too, must not take a crashed job for a gone one.
            self.fire_watches(job, "crashed")

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
        there, else a new worker process."""
        slot, job.slot = job.slot, None
        if slot is not None and self.adopt_slot(job, slot):
            return
        process, mark = self.launch_worker(job.id, job.token, job.cwd)
        faults.point("daemon.after_worker_start")
        job.process = process
        job.worker_pid = process.pid
        job.worker_create_time = process.create_time
        job.worker_mark = mark
        job.host_pid = None
        job.reaping = False
        self.save(job)

    # ------------------------------------------------------------------ warm pi processes

    def take_slot(self, host: str, cwd: str, model: str | None, thinking: str | None) -> WarmSlot | None:
        """A ready warm slot for a new job started with these, or None; either way the
        pool warms the next one for them."""
        key = self.pool.key_for(host, cwd, model, thinking)
        return self.pool.take(key) if key is not None else None

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
        """Make the slot's warm worker the worker of ``job`` (made with the slot's id,
        token and session): it hears ``adopt`` and says its ordinary ``worker_hello``."""
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
        self.save(job)
        conn.send({"event": "adopt", "job": job.id})
        return True

    def start_slot(self, key: WarmKey) -> None:
        slot = self.pool.new_slot(key, set(self.jobs) | set(self.foreground))
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
            self._ending_slots[slot] = time.monotonic() + STOP_GRACE_SECONDS
        else:
            self._ending_slots[slot] = time.monotonic()

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
        for slot, deadline in list(self._ending_slots.items()):
            if self.slot_gone(slot):
                self._ending_slots.pop(slot)
                self.forget_slot(slot)
            elif now >= deadline and slot.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(slot.pid, signal.SIGKILL)
                self._ending_slots[slot] = now + STOP_GRACE_SECONDS
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

    async def shutdown(self) -> None:
        """Close every connection once its last answers are written (a second at most,
        or ``ROOST_STOP_FLUSH_SECONDS``)."""
        self.write_records()
        for conn in list(self.connections):
            conn.close()
        with anyio.move_on_after(stop_flush_seconds()):
            for conn in list(self.connections):
                await conn.flushed.wait()
        for conn in list(self.connections):
            conn.abort()  # a client that does not read its last answers is not waited for
        self.receipts.flush()  # letters buried in the last pass of the loop
        self.write_records()  # records changed since (answers cut short by the stop)
        if self.journal is not None:
            await self.journal.aclose()
            if self.journal.healthy:
                self.mark_clean_stop()
        self.exits.close()
        if self.spawner is not None:
            # Its workers keep running; the next daemon finds them by pid and create time.
            await self.spawner.aclose()

    def job(self, job_id: Any) -> Job:
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise ProtocolError(NOT_FOUND, f"no job {job_id!r}")
        return job

    def job_by_ref(self, ref: str) -> Job:
        """A job by id, or by exact unique name (``routing.resolve_ref``, the rule every
        command shares): ``not_found`` or ``ambiguous`` otherwise."""
        if ref in self.jobs:
            return self.jobs[ref]
        return routing.resolve_ref(
            ref, self.jobs.values(), id_of=lambda job: job.id, name_of=lambda job: job.name, framed_of=lambda job: job.framed_name
        )

    def check_host(self, host: str, op: str) -> None:
        """Refuse a new job on ``host`` when no such host is registered (``bad_args``) or
        it cannot run here (``no_host``: its ``unavailable`` says why, e.g. no pi
        installed), before any job is made."""
        spec = self.hosts.get(host)
        if spec is None:
            raise ProtocolError(BAD_ARGS, f"{op}: unknown host {host!r} (known: {', '.join(sorted(self.hosts))})")
        why = spec.unavailable() if spec.unavailable is not None else None
        if why:
            raise ProtocolError(NO_HOST, f"{op}: host {host!r} cannot run here: {why}")

    def host_takes_messages(self, job: Job) -> bool:
        spec = self.hosts.get(job.host)
        return spec.takes_messages if spec else False

    def push_pending(self, job: Job) -> None:
        """Send every item the current worker connection has not had yet (see
        :meth:`Mailroom.push_pending`)."""
        self.mailroom.push_pending(job)

    async def enqueue(self, job: Job, kind: str, content: str, *, wake: bool = True, **fields: Any) -> tuple[Item, str]:
        """Queue an item durably and hand it on; returns the item and what happened:
        ``delivered`` (pushed to a connected worker), ``queued`` (kept; the worker is
        starting or reconnecting, or ``wake`` is False), ``started`` (a worker was started
        for it) or ``stopped`` (kept; a stopped job is not woken)."""
        if job.state == "stopped" and kind == "reply" and wake:
            # A user reply un-stops the job (messages never do); a worker still exiting
            # from the stop is then started again for it when it is gone. Stopped again
            # later, its parent hears of that stop too.
            job.state = "idle"
            job.ended_reported = False
            job.stopped_from = None
            self.save(job)
        item = Item(job.queue.next_seq(), kind, content, **fields)
        commit = self.mailroom.queue(job, item)
        await commit.wait()
        return item, self.mailroom.outcome(job, item, commit, wake=wake)

    # The peer tables' readers, for the ops (see roost_core.daemon.tables).

    def tree_record(self, session: str | None) -> Job | None:
        """:meth:`PeerTables.tree_record`."""
        return self.tables.tree_record(session)

    def peer_table(self) -> routing.PeerTable:
        """:meth:`PeerTables.peer_table`."""
        return self.tables.peer_table()

    def peer_listing(self) -> PeerListing:
        """:meth:`PeerTables.peer_listing`."""
        return self.tables.peer_listing()

    def sender_info(self, conn: Connection) -> PeerInfo:
        """The calling session as policy sees it: its own record in the peer tables."""
        record: Job | ForegroundPeer | None = conn.job if conn.job is not None else conn.peer
        if record is not None:
            return self.tables.info_of(record)
        raise ProtocolError(UNAUTHORIZED, "this connection is not bound to a session (peer_register or worker hello first)")

    def reach(self, sender: PeerInfo, target: PeerInfo, addressed_by: str) -> ReachDecision:
        """:meth:`PeerTables.reach`."""
        return self.tables.reach(sender, target, addressed_by)

    def peer_row(self, peer: PeerInfo, relation: str) -> dict[str, Any]:
        """:meth:`PeerTables.peer_row`."""
        return self.tables.peer_row(peer, relation)

    def parent_holder(self, peer: PeerInfo, table: routing.PeerTable) -> PeerInfo | None:
        """:meth:`PeerTables.parent_holder`."""
        return self.tables.parent_holder(peer, table)

    def live_parent(self, job: Job) -> PeerInfo | None:
        """:meth:`PeerTables.live_parent`."""
        return self.tables.live_parent(job)

    def chain_of(self, conn: Connection) -> tuple[str | None, int]:
        """The chain the calling session is in: (trace, hops) of what started its run
        (:func:`sending.chain_of`)."""
        trace, hops, _broadcast = chain_of(conn.job)
        return trace, hops

    async def deliver_to(
        self, target: PeerInfo, item: OutgoingItem, content: str, *, trace: str | None = None, wake: bool = True
    ) -> dict[str, Any]:
        """Deliver an agent item to whoever holds ``target``'s session now; the result
        once it is durable (see :meth:`SendDesk.deliver`)."""
        return await settle(self.desk.deliver(target, item, content, trace=trace, wake=wake))


def transcript_max_seq(job: Job, spec: HostSpec | None) -> int | None:
    """The highest queue seq ``job``'s transcript holds (0 for none), read as its host
    (``spec``) writes it, or None when it cannot be told (an unreadable file)."""
    try:
        return max(session_seqs(spec, job.session), default=0)
    except (OSError, ValueError):
        return None


def apply_journal_record(job: Job, record: dict[str, Any]) -> None:
    """Replay one journal record into ``job``'s queue; ``ValueError`` for one roost did
    not write (then nothing of it is applied)."""
    op = record.get("op")
    if op == "item":
        # Written as its deliver event (delivery.item_record); before, as its fields
        # (Item.from_json).
        item = Item.from_event(record["deliver"]) if "deliver" in record else Item.from_json(record.get("item"))
        if item.text and item.text == item.content:
            item.text = ""  # an older roost carried a reply's text twice: carry it once
        if (len(item.content) + len(item.text)) * MOST_BYTES_PER_CHAR + ITEM_RESERVE > MAX_FRAME and len(item.encoded()) - 1 > MAX_FRAME:
            # Only an older roost queued such an item, which its receiver could never
            # read: it is not pushed again (its seq stays used).
            log.error("journal: item %d of job %s is longer than a frame (%d bytes); it can never be delivered and is dropped", item.seq, job.id, MAX_FRAME)
            job.queue.reply_seq = max(job.queue.reply_seq, item.seq)
            return
        job.queue.add(item)
    elif op == "ack":
        seq = record.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"ack of {seq!r}")
        job.queue.ack(seq)
    elif op == "seq":
        reply_seq, acked = record.get("replySeq", 0), record.get("acked", 0)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (reply_seq, acked)):
            raise ValueError(f"seq record {reply_seq!r}/{acked!r}")
        # A settled counter (the receiver said what it holds) is taken as it is: it may be
        # below the reservation a start after a crash wrote.
        job.queue.reply_seq = reply_seq if record.get("settled") is True else max(job.queue.reply_seq, reply_seq)
        job.queue.acked = max(job.queue.acked, acked)
    elif op != "drop":
        raise ValueError(f"unknown journal op {op!r}")


async def _logged(fn: Any, *args: Any) -> None:
    try:
        await fn(*args)
    except Exception:  # a background task's error boundary
        log.exception("daemon task %s failed", getattr(fn, "__qualname__", fn))


def call_soon(fn: Callable[[], None]) -> None:
    """Run ``fn`` at the running loop's next pass."""
    asyncio.get_running_loop().call_soon(fn)


def default_name(task: str) -> str:
    """The name of a job started with none: the task's first words (one line)."""
    return derived_name(" ".join(task.split()[:6])[:40])


def last_line(path: Path) -> str:
    """``: <why a worker's log says it ended>`` (its last ``...Error: ...`` line, else its
    last line), or nothing."""
    try:
        lines = [line.strip(" |+-") for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
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


def check_scenario(host: str, scenario: Any, cwd: str) -> None:
    """Refuse a scenario the scripted host could not load (its worker would die at start,
    again and again); a relative path is read from the job's cwd, as the worker will."""
    if host != "scripted" or scenario is None:
        return
    from roost_core.hosts.scripted import ScenarioError, load_scenario

    if isinstance(scenario, str) and not os.path.isabs(scenario) and (Path(cwd) / scenario).is_file():
        scenario = str(Path(cwd) / scenario)
    try:
        load_scenario(scenario)
    except ScenarioError as exc:
        raise ProtocolError(BAD_ARGS, f"scenario: {exc}") from exc


def check_session_path(session: str) -> str:
    """An absolute, normalised session path that is not a symlink."""
    if "\x00" in session or not os.path.isabs(session):
        raise ProtocolError(BAD_ARGS, "session must be an absolute path")
    if os.path.normpath(session) != session:
        raise ProtocolError(BAD_ARGS, "session path must be normalised (no '..' or '//')")
    if os.path.islink(session):
        raise ProtocolError(BAD_ARGS, "session path must not be a symlink")
    return session
