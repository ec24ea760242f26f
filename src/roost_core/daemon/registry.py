"""The daemon's records: every job and foreground peer it knows, and the writing of job
records (changes of one loop pass share one write, before any byte of that pass leaves)."""

from __future__ import annotations

import logging
import time
from typing import Any

from roost_core import routing
from roost_core.daemon import dialognotices
from roost_core.daemon.delivery import not_stored
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.tasks import call_soon
from roost_core.daemon.watch import Watchers
from roost_core.protocol import NOT_FOUND, ProtocolError
from roost_core.store import JobFiles

log = logging.getLogger("roost.daemon")


class Registry:
    """The jobs and foreground peers by id (``jobs`` and ``foreground``: the dicts every
    service reads; the peer tables read them as they are), and their records on disk.
    ``watchers`` hear of every change (a view shows it)."""

    def __init__(self, jobs: dict[str, Job], foreground: dict[str, ForegroundPeer], job_files: JobFiles, watchers: Watchers) -> None:
        self.jobs = jobs
        self.foreground = foreground
        self.job_files = job_files
        self.watchers = watchers
        #: Jobs whose record could not be written (disk full, I/O error): written again
        #: by the monitor; the record in memory is the truth meanwhile.
        self.unsaved: set[str] = set()
        #: Jobs whose record changed and is not written yet (``save``), in change order.
        self.dirty: dict[str, Job] = {}
        self._records_due = False
        #: The ids of jobs that keep a report their parent has not taken (a dict for its
        #: order), so that a peer's registration looks at these, not at every job record.
        self.kept_reports: dict[str, None] = {}

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

    def jobs_keeping_reports(self) -> list[Job]:
        """The jobs that keep a report, in the order they were loaded or kept it."""
        for job_id in [job_id for job_id in self.kept_reports if job_id not in self.jobs]:
            del self.kept_reports[job_id]  # removed since
        return [self.jobs[job_id] for job_id in self.kept_reports]

    def save(self, job: Job) -> None:
        """Note that ``job``'s record changed. The op logic does no I/O: the record is
        written by :meth:`write_records`, which the wire layer has called (through
        ``Daemon.before_output``) before any byte leaves the daemon (``Flusher``), so no
        client ever sees a state a crash would take back; and at the loop's next pass at
        the latest, for a change nobody is told of. Changes made in one pass share one
        write."""
        job.updated = time.time()
        self.watchers.touch()
        if job.dialog is not job.dialog_told:
            # A dialog opened or closed (whatever closed it: an answer, a stop, a crash):
            # the person at the tree's foreground session is told.
            job.dialog_told = job.dialog
            dialognotices.tell(self.jobs, self.foreground, job.tree)
        self.dirty[job.id] = job
        if not self._records_due:
            self._records_due = True
            try:
                call_soon(self.write_records)
            except RuntimeError:  # no loop (loading, a test of the records): write now
                self.write_records()

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
        self.watchers.touch()

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
