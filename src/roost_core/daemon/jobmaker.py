"""Making jobs, the one way ``start``, ``spawn`` and the ``roost_spawn`` tool share: the
host, the name (one rule for every way a job is named), the record, the first item;
and queueing an item on a job, durably."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from roost_core import identity, locks, names, policy
from roost_core.config import Config
from roost_core.daemon import changes
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.callers import caller_of
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom, once_committed
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobs import Job
from roost_core.daemon.registry import Registry
from roost_core.daemon.workers import Workers
from roost_core.daemon.workspaces import Workspaces
from roost_core.names import derived_name
from roost_core.paths import Paths
from roost_core.protocol import BAD_ARGS, CONFLICT, NAME_TAKEN, ProtocolError
from roost_core.queue import Item
from roost_core.records import Workspace

log = logging.getLogger("roost.daemon")


class JobMaker:
    """New jobs and their first items (see the module docstring)."""

    def __init__(
        self,
        paths: Paths,
        config: Config,
        pm: Any,
        registry: Registry,
        hosts: HostSet,
        workers: Workers,
        mailroom: Mailroom,
        budgets: Budgets,
        workspaces: Workspaces,
    ) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        self.registry = registry
        self.jobs = registry.jobs
        self.hosts = hosts
        self.workers = workers
        self.mailroom = mailroom
        self.budgets = budgets
        self.workspaces = workspaces

    def default_host(self, project: dict[str, Any]) -> str:
        """The host of a ``start`` that names none: the project's ``defaultHost``, else the
        user's, else the registered default agent that can run here (roost's pi, found
        where the daemon's workers look: ``HostSet.default_agent``); otherwise
        ``no_host``."""
        configured = project.get("defaultHost") or self.config.default_host
        if configured:
            return str(configured)
        return self.hosts.default_agent(self.paths.config_file)

    def job_name(self, requested: str | None, task: str, *, chosen: bool = True) -> str:
        """The name of a new job, by the one rule of every way a job is named (``start``,
        ``spawn``, the ``roost_spawn`` tool): kept as typed (only a blank name, one too
        long, or one with a line break is refused, ``bad_args``: :func:`names.check_name`),
        and never the name, framed name or id of a job the daemon holds (whatever its
        state, until it is removed), in either of its forms, so a name works in every
        command. A name the caller chose is refused when taken (``name_taken``, naming
        the first free one). A name derived from the task, or one brought by a session
        moving to the background (``chosen`` False: its client derives it from the
        session or folder), gets the first free ``-2``, ``-3``... instead. An empty name
        is no name (a model may pass ``""`` for an argument it leaves out)."""
        if requested and chosen:
            name = names.check_name(requested)
        else:
            name = names.derived_name(requested) if requested else default_name(task)
        taken = self.taken_names()
        if not self.name_clashes(name, taken):
            return name
        free = self.free_name(name, taken)
        if chosen and requested:
            holder = self.name_holder(name)
            framed = policy.sanitize_name(self.pm, name)
            if holder.id in (name, framed):
                what = "the id of"
            elif name in (holder.name, holder.framed_name):
                what = "the name of"
            else:
                what = f"framed as {framed!r}, the name of"  # the forms differ only in what the framing drops
            instead = f"choose another name (such as {free!r}), leave the name out, " if free else "choose another name, "
            raise ProtocolError(
                NAME_TAKEN,
                f"{name!r} is already {what} job {holder.id} ({holder.state}); {instead}or remove that job first (roost rm {holder.id})",
            )
        if free is None:
            raise ProtocolError(NAME_TAKEN, f"{name!r} is taken and the name plugin keeps no suffix; choose a name")
        return free

    def taken_names(self) -> set[str]:
        """Every id, name and framed name of the jobs the daemon holds."""
        taken = set(self.jobs)
        for job in self.jobs.values():
            taken.add(job.name)
            taken.add(job.framed_name)
        return taken

    def name_clashes(self, name: str, taken: set[str]) -> bool:
        """Whether either form of ``name`` (as typed, as framed) is in ``taken``: a lookup
        by it would find another job too."""
        return name in taken or policy.sanitize_name(self.pm, name) in taken

    def free_name(self, name: str, taken: set[str]) -> str | None:
        """The first of ``name-2``, ``name-3``... that clashes with nothing in ``taken``."""
        # 64: the envelope plugin's longest framed name; the suffix must survive the framing.
        # At most len(taken) candidates can clash.
        for number in range(2, len(taken) + 3):
            suffix = f"-{number}"
            candidate = name[: 64 - len(suffix)].rstrip() + suffix
            if not self.name_clashes(candidate, taken):
                return candidate
        return None

    def name_holder(self, name: str) -> Job:
        """The job whose id, name or framed name is either form of ``name``."""
        forms = {name, policy.sanitize_name(self.pm, name)}
        return next(job for job in self.jobs.values() if forms & {job.id, job.name, job.framed_name})

    def adoptable_session(self, session: str) -> str:
        """A session file a new job may continue: no live process holds it."""
        session = check_session_path(session)
        holder = locks.lock_holder(session)
        if holder is not None:
            raise ProtocolError(CONFLICT, f"session is held by the live process {holder}; end it first")
        if any(job.session == session and job.has_worker for job in self.jobs.values()):
            raise ProtocolError(CONFLICT, "a live job already runs that session")
        return session

    def create_job(self, *, task: str, name: str, cwd: str, host: str, slot: Any = None, **fields: Any) -> Job:
        """A new job record named ``name`` (:meth:`job_name`); made from a warm ``slot`` it
        takes the slot's id, token and session file (its worker is already up with them)."""
        if slot is not None:
            job_id, token, session = slot.id, slot.token, slot.session
        else:
            job_id = identity.new_job_id(set(self.jobs) | set(self.registry.foreground) | self.workers.pool.reserved)
            token, session = identity.new_token(), self.new_session_file(host, job_id, cwd)
        job = Job(
            id=job_id,
            name=name,
            host=host,
            cwd=cwd,
            session=session,
            token=token,
            task=task,
            state="running",
            **fields,
        )
        job.framed_name = policy.sanitize_name(self.pm, name)
        job.slot = slot
        return job

    @contextlib.contextmanager
    def workspace_dropped_on_error(self, job: Job, workspace: Workspace | None) -> Iterator[None]:
        """A workspace made for ``job`` goes again when the job is not made after all: the
        save failed, its task was not stored, or another job took its name while the
        workspace was made (the name is checked again here: ``name_taken``)."""
        if workspace is None:
            yield
            return
        try:
            if self.name_clashes(job.name, self.taken_names()):
                raise ProtocolError(NAME_TAKEN, f"another job took the name {job.name!r} while its workspace was made: choose another name")
            yield
        except BaseException:
            if job.id not in self.jobs:  # a job that was made keeps its workspace
                self.workspaces.drop(workspace)
            raise

    def new_session_file(self, host: str, job_id: str, cwd: str) -> str:
        """A new job's session path: where its host's agent will write it, else roost's."""
        spec = self.hosts.get(host)
        if spec is not None and spec.session_file is not None:
            return str(spec.session_file(cwd))
        return str(self.paths.sessions_dir / f"{job_id}.jsonl")

    def add_job(self, job: Job) -> None:
        """Save a new job's record, then make it known (a failed save leaves no ghost:
        the op is refused ``not_stored``)."""
        self.registry.save_new(job)
        self.jobs[job.id] = job
        changes.changed()
        self.budgets.usage_changed()

    async def enqueue(self, job: Job, kind: str, content: str, *, wake: bool = True, past_cap: bool = False, **fields: Any) -> tuple[Item, str]:
        """Queue an item durably and hand it on; returns the item and what happened:
        ``delivered`` (pushed to a connected worker), ``queued`` (kept; the worker is
        starting or reconnecting, or ``wake`` is False), ``started`` (a worker was started
        for it) or ``stopped`` (kept; a stopped job is not woken). ``past_cap``: queued
        even at the queue's cap (a request asked again, ``Mailroom.queue``)."""
        if job.state == "stopped" and kind == "reply" and wake:
            # A user reply un-stops the job (messages never do); a worker still exiting
            # from the stop is then started again for it when it is gone. Stopped again
            # later, its parent hears of that stop too.
            job.state = "idle"
            job.ended_reported = False
            job.stopped_from = None
            self.registry.save(job)
        item = Item(job.queue.next_seq(), kind, content, **fields)
        mailroom = self.mailroom
        commit = mailroom.queue(job, item, past_cap=past_cap)
        return item, await once_committed(commit, lambda: mailroom.outcome(job, item, commit, wake=wake))

    async def enqueue_task(self, job: Job, task: str, **fields: Any) -> None:
        """Queue a new job's task; if it cannot be stored, the job is taken back whole
        (record and all) and the op refused, so no job waits for a task it never got."""
        try:
            # No text beside the content: the task is carried once (``Item.text``).
            await self.enqueue(job, "reply", task, **fields)
        except ProtocolError:
            if job.worker_pid is None:
                self.jobs.pop(job.id, None)
                self.registry.unsaved.discard(job.id)
                changes.changed()
                try:
                    self.registry.job_files.delete(job.id)
                except OSError as exc:
                    log.warning("cannot delete the record of %s, whose task was not stored (%s)", job.id, exc)
                self.registry.watchers.touch()
            raise

    def request_key(self, conn: Connection, args: dict[str, Any]) -> str | None:
        """The caller and key of a keyed request that makes a job (None: not keyed)."""
        key = args.get("key")
        return None if key is None else f"{caller_of(conn)}:{key}"

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
                self.registry.save(job)
            await self.enqueue(job, "reply", job.task, trace=f"t-{job.id}-1")
        return job


def default_name(task: str) -> str:
    """The name of a job started with none: the task's first words (one line)."""
    return derived_name(" ".join(task.split()[:6])[:40])


def check_session_path(session: str) -> str:
    """An absolute, normalised session path that is not a symlink."""
    if "\x00" in session or not os.path.isabs(session):
        raise ProtocolError(BAD_ARGS, "session must be an absolute path")
    if os.path.normpath(session) != session:
        raise ProtocolError(BAD_ARGS, "session path must be normalised (no '..' or '//')")
    if os.path.islink(session):
        raise ProtocolError(BAD_ARGS, "session path must not be a symlink")
    return session
