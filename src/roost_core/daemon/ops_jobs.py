"""Ops for jobs and the daemon itself: start, jobs, agents, watch, reply, stop, remove,
log, dead letters, and the worker's own ops (hello, status, ack)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from pathlib import Path
from typing import Any

import anyio

from roost_core import identity, locks, names, policy
from roost_core.config import read_project_config
from roost_core.daemon import changes
from roost_core.daemon.base import (
    MONITOR_INTERVAL,
    STOP_GRACE_SECONDS,
    DaemonBase,
    check_scenario,
    check_session_path,
    default_name,
)
from roost_core.daemon.budgets import tree_of
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Pending, not_stored, settle
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import message_id_for
from roost_core.hosts import session_seqs
from roost_core.protocol import (
    BAD_ARGS,
    CONFLICT,
    JOB_STOPPED,
    NAME_TAKEN,
    NO_HOST,
    UNAUTHORIZED,
    ProtocolError,
)
from roost_core.store import JournalError
from roost_core.transcript import read_entries

log = logging.getLogger("roost.daemon")



class JobOps(DaemonBase):
    async def op_daemon_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "loop": loop_name(),
            "uptime": round(time.time() - self.started, 3),
            "socket": str(self.paths.socket),
            "home": str(self.paths.home),
            "jobs": len(self.jobs),
            "live_workers": sum(1 for job in self.jobs.values() if job.worker_pid is not None),
            "foreground": sum(1 for peer in self.foreground.values() if peer.connected),
            "pool": self.pool.status(),
            "connections": len(self.connections),
            "refused_connections": self.refuser.refused,
            "unsent": sum(conn.unsent for conn in self.connections),
            "journal": {
                "commits": self.journal.commits if self.journal else 0,
                "records": self.journal.records if self.journal else 0,
            },
        }

    async def op_plugins(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The plugin set this daemon runs (``roost plugins``): fixed at its start."""
        from roost_core.plugins import plugin_notes, plugin_set

        shown = plugin_set(self.pm)
        return {
            "plugins": shown["plugins"],
            "blocked": shown["blocked"],
            "unknown_blocked": shown["unknown_blocked"],
            "notes": plugin_notes(self.pm, self.config, self.paths.config_file),
            "pid": os.getpid(),
        }

    async def op_daemon_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Stop the daemon. Workers keep running (they wait for the next daemon, up to
        ``ROOST_WORKER_ORPHAN_SECONDS``) unless ``jobs`` is true: then every worker, and
        everything it started, is ended first (:meth:`end_all_workers`)."""
        result: dict[str, Any] = {"stopping": True}
        if args.get("jobs"):
            result.update(await self.end_all_workers(conn))
        self.stopping.set()
        return result

    async def end_all_workers(self, conn: Connection) -> dict[str, Any]:
        """End every job's worker and warm worker before the daemon stops, and start none
        again: a running job is stopped as ``stop`` does (its run is cut short; its
        parent hears it), a settled one is reaped (its state kept: the next item wakes it
        from its session file, under the next daemon). Waits until they are gone, each
        killed with what it started if it outstays :data:`STOP_GRACE_SECONDS`. Returns
        the ids stopped and reaped, and the workers still alive (none, normally)."""
        self.ending_all = True
        stopped, reaped = [], []
        for job in list(self.jobs.values()):
            if job.worker_pid is None:
                continue
            if job.state == "running":
                await self.op_stop(conn, {"job": job.id})
                stopped.append(job.id)
                continue
            job.reaping = True
            if job.conn is not None:
                job.conn.send({"event": "shutdown", "reason": "daemon stopped"})
            else:
                self.kill_worker(job)
            self._kill_at[job.id] = self.clock() + STOP_GRACE_SECONDS
            reaped.append(job.id)
        for slot in list(self.pool.slots.values()):
            self.end_slot(slot)
        # The monitor notices each exit (and kills an outstaying worker at its deadline).
        with anyio.move_on_after(2 * STOP_GRACE_SECONDS + 2):
            while any(job.worker_pid is not None for job in self.jobs.values()) or self._ending_slots:  # noqa: ASYNC110 - the monitor polls exits; no event to wait on
                await anyio.sleep(MONITOR_INTERVAL)
        left = sorted(job.id for job in self.jobs.values() if job.worker_pid is not None)
        if left:
            log.warning("daemon_stop: the workers of %s did not end", ", ".join(left))
        return {"stoppedJobs": stopped, "reapedJobs": reaped, "liveWorkers": left}

    async def op_test_clock(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Stop the daemon's clock (at the first call) and move it forward by ``advance``
        seconds — only with ROOST_TEST_HOOKS=1."""
        if os.environ.get("ROOST_TEST_HOOKS") != "1":
            raise ProtocolError("unknown_op", "unknown op 'test_clock'")
        if self.clock_frozen is None:
            self.clock_frozen = time.monotonic()
        self.clock_frozen += args["advance"]
        return {"clock": self.clock_frozen}

    async def op_start(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        request_key = self.request_key(conn, args)
        made = await self.job_of_request(request_key)
        if made is not None:
            return {"id": made.id, "name": made.name, "host": made.host}
        task = args["task"]
        if not task.strip():
            raise ProtocolError(BAD_ARGS, "start: task is empty")
        cwd = args.get("cwd") or str(self.paths.home)
        if not os.path.isabs(cwd) or not Path(cwd).is_dir():
            raise ProtocolError(BAD_ARGS, f"start: cwd {cwd!r} is not an existing absolute directory")
        project, warning = read_project_config(cwd)
        if warning:
            log.warning("start in %s: %s", cwd, warning)
        host = args.get("host") or self.default_host(project)
        self.check_host(host, "start")
        check_scenario(host, args.get("scenario"), cwd)
        session = args.get("session")
        if session is not None:
            session = self.adoptable_session(session)
        model = args.get("model") or project.get("defaultModel")
        thinking = args.get("thinking") or project.get("defaultThinking")
        job = self.create_job(
            task=task,
            name=self.job_name(args.get("name"), task, chosen=session is None),
            cwd=cwd,
            host=host,
            scenario=args.get("scenario"),
            model=model,
            thinking=thinking,
            # A job that continues a session file is never warm: a slot has its own.
            slot=self.take_slot(host, cwd, model, thinking) if session is None else None,
        )
        if session is not None:
            # A foreground session moving to the background (the spec's "←"): the job
            # continues its file, its tree links and its seqs.
            job.session = session
            previous = self.tree_record(session)
            if previous is not None and previous is not job:
                job.parent_session, job.parent_peer = previous.parent_session, previous.parent_peer
                job.root_session, job.depth, job.spawned = previous.root_session, previous.depth, previous.spawned
            job.queue.reply_seq = max(session_seqs(self.hosts.get(host), session), default=0)
            job.queue.durable = job.queue.reply_seq
        job.request_key = request_key
        with self.slot_released_on_error(job):
            self.add_job(job)
            await self.enqueue_task(job, task, trace=args.get("trace") or f"t-{job.id}-1")
        result: dict[str, Any] = {"id": job.id, "name": job.name, "host": job.host}
        if warning:
            # The CLI prints them on stderr: a broken project config must not pass unseen.
            result["warnings"] = [warning]
        return result

    def default_host(self, project: dict[str, Any]) -> str:
        """The host of a ``start`` that names none: the project's ``defaultHost``, else the
        user's, else ``pi`` when a pi binary is found (``ROOST_PI_BIN``, else ``pi`` on
        PATH, as the pi host looks for it: in this daemon's environment, which its
        workers inherit). Otherwise ``no_host``: a user who asked for an agent must never
        get the scripted stand-in without naming it."""
        configured = project.get("defaultHost") or self.config.default_host
        if configured:
            return configured
        from roost_core.hosts.pi import PiError, pi_binary

        try:
            pi_binary()
        except PiError:
            raise ProtocolError(
                NO_HOST,
                f"no host for this job: no defaultHost in {self.paths.config_file}, and no pi found "
                "(ROOST_PI_BIN, or pi on the daemon's PATH). Install pi, set defaultHost, or start "
                "it with host 'scripted' (roost start --host scripted) to run without a model.",
            ) from None
        return "pi"

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
            job_id = identity.new_job_id(set(self.jobs) | set(self.foreground) | self.pool.reserved)
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

    def new_session_file(self, host: str, job_id: str, cwd: str) -> str:
        """A new job's session path: where its host's agent will write it, else roost's."""
        spec = self.hosts.get(host)
        if spec is not None and spec.session_file is not None:
            return str(spec.session_file(cwd))
        return str(self.paths.sessions_dir / f"{job_id}.jsonl")

    def add_job(self, job: Job) -> None:
        """Save a new job's record, then make it known (a failed save leaves no ghost:
        the op is refused ``not_stored``)."""
        self.save_new(job)
        self.jobs[job.id] = job
        changes.changed()
        self.budgets.usage_changed()

    async def enqueue_task(self, job: Job, task: str, **fields: Any) -> None:
        """Queue a new job's task; if it cannot be stored, the job is taken back whole
        (record and all) and the op refused, so no job waits for a task it never got."""
        try:
            # No text beside the content: the task is carried once (``Item.text``).
            await self.enqueue(job, "reply", task, **fields)
        except ProtocolError:
            if job.worker_pid is None:
                self.jobs.pop(job.id, None)
                self.unsaved.discard(job.id)
                changes.changed()
                try:
                    self.job_files.delete(job.id)
                except OSError as exc:
                    log.warning("cannot delete the record of %s, whose task was not stored (%s)", job.id, exc)
                self.watch.touch()
            raise

    async def op_jobs(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for job in sorted(self.jobs.values(), key=lambda j: j.created):
            row = job.row()
            parent = self.live_parent(job)
            row["parent"] = parent.id if parent else None
            rows.append(row)
        return {"jobs": rows}

    async def op_agents(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Every peer (collapsed by session) with its tree links, for views."""
        return {"agents": self.agent_rows()}

    async def op_watch(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The agent table now; then an ``agents`` event whenever it changes."""
        self.watch.add(conn)
        return {"agents": self.agent_rows()}

    async def op_dead(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {"dead": list(self.receipts.dead)}

    def agent_rows(self) -> list[dict[str, Any]]:
        table = self.peer_table()
        names = {peer.id: peer.name for peer in table.holders.values()}
        trees: dict[str, dict[str, Any]] = {}
        rows = []
        for peer in table.holders.values():
            job = self.jobs.get(peer.id) if peer.kind == "job" else None
            fg = self.foreground.get(peer.id) if peer.kind == "foreground" else None
            parent = self.parent_holder(peer, table)
            tree = tree_of(peer)
            if tree not in trees:
                usage = self.budgets.usage(tree)
                refusal = self.budgets.refusal(tree)
                trees[tree] = {"tokens": usage.tokens, "cost": usage.cost, "spent": refusal is not None, "reason": refusal.message if refusal else None}
            rows.append(
                {
                    "id": peer.id,
                    "name": peer.name,
                    "framedName": peer.framed_name or peer.name,
                    "kind": peer.kind,
                    # A foreground session says which agent it runs (pi, claude), for display.
                    "host": (fg.host if fg is not None and fg.host else peer.host),
                    "state": peer.state,
                    "live": peer.live,
                    "cwd": peer.cwd,
                    "session": peer.session,
                    "status": peer.status,
                    "summary": peer.summary,
                    "question": peer.question,
                    "dialog": bool(job and job.dialog),
                    "parentSession": peer.parent_session,
                    "rootSession": peer.root_session,
                    "parent": parent.id if parent is not None else None,
                    "parentName": names.get(parent.id) if parent is not None else None,
                    "pending": len(job.queue.items) if job else len(fg.in_flight) if fg else 0,
                    "lastMessage": (job.last_message if job else fg.last_message if fg else None),
                    "created": job.created if job else fg.registered if fg else None,
                    "usage": job.usage if job else None,
                    "treeUsage": trees[tree],
                }
            )
        rows.sort(key=lambda row: (row["created"] or 0, row["id"]))
        return rows

    async def op_reply(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        text = args["text"]
        if not text.strip():
            raise ProtocolError(BAD_ARGS, "reply: text is empty")
        if job.state == "stopped" and not self.host_takes_messages(job) and not args.get("restart"):
            # A shell job runs each reply as a command: a job the user stopped runs
            # nothing until the user says, in so many words, to start it again.
            raise ProtocolError(
                JOB_STOPPED,
                f"job {job.id} is a stopped {job.host} job: a reply to it runs as a command, and a stopped job "
                f"runs nothing unless you restart it (roost reply --restart {job.id} ...)",
            )
        key = args.get("key")
        # No text beside the content: a reply is carried once (``Item.text``).
        if key is None:
            item, outcome = await self.enqueue(job, "reply", text, trace=f"t-{job.id}-{job.queue.next_seq()}")
            return {"id": job.id, "seq": item.seq, "result": outcome}
        # A keyed reply has an id made from its key: asked again after a daemon died before
        # answering, it is found in the queue (or its worker drops the second copy by id).
        msg_id = message_id_for(self.caller_of(conn), key)
        held = job.queue.holding(msg_id)
        if held is not None:
            return {"id": job.id, "seq": held.seq, "result": "queued"}
        item, outcome = await self.enqueue(job, "reply", text, trace=f"t-{job.id}-{job.queue.next_seq()}", msg_id=msg_id)
        return {"id": job.id, "seq": item.seq, "result": outcome}

    async def op_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        was = job.state
        if was != "stopped":
            # Kept, with its error, so a failed job stays visibly failed once stopped.
            job.stopped_from = was
        job.state = "stopped"
        job.dialog = False
        self.save(job)
        if job.worker_pid is not None:
            if job.conn is not None:
                job.conn.send({"event": "shutdown", "reason": "stopped"})
            else:
                self.kill_worker(job)
            self._kill_at[job.id] = self.clock() + STOP_GRACE_SECONDS
        await self.report_ended(job, "stopped")
        self.fire_watches(job, "ended")
        self.drop_watches_of(job.id)
        return {"id": job.id, "was": was, "state": job.state, "stoppedFrom": job.stopped_from, "error": job.error}

    async def op_remove(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        if job.state != "stopped":
            await self.report_ended(job, "removed")
        job.state = "stopped"
        if job.worker_pid is not None:
            self.kill_worker(job)
            # No exit of this worker will be handled (the job is gone): what it started
            # goes now, with it.
            self.kill_leftovers(job)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        self.exits.forget(job.id)
        self.jobs.pop(job.id, None)
        changes.changed()
        self.budgets.usage_changed()
        self.fire_watches(job, "ended")
        self.drop_watches_of(job.id)
        self._kill_at.pop(job.id, None)
        dropped = job.queue.clear()
        for item in dropped:
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, "dead", "target removed")
        self.watch.touch()
        assert self.journal is not None
        self.unsaved.discard(job.id)
        self.unstarted.discard(job.id)
        try:
            await self.journal.append({"op": "drop", "job": job.id})
        except JournalError as exc:
            # Replay skips the items of a job with no record, so deleting it is enough.
            log.warning("remove %s: the journal took no drop record (%s); its record goes anyway", job.id, exc)
        try:
            self.job_files.delete(job.id)
        except OSError as exc:
            raise not_stored(exc, "the removal") from exc
        return {"id": job.id, "removed": True, "dropped": len(dropped)}

    async def op_log(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        return {
            "id": job.id,
            "session": job.session,
            # The reader of the session file is the host's (HostSpec.transcript_entries).
            "host": job.host,
            "entries": read_entries(job.session) if args.get("entries") else None,
            "sent": self.receipts.sent_by(job.id),
        }

    async def op_worker_hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(args["job"])
        if job is None or not hmac.compare_digest(job.token.encode(), args["token"].encode()):
            raise ProtocolError(UNAUTHORIZED, "bad job token")
        if conn.bound:
            raise ProtocolError(CONFLICT, "connection is already bound")
        if job.worker_pid is None or conn.pid != job.worker_pid:
            # With the job's token, this is a worker started for the job that the job no
            # longer has (its daemon died before the record named it): refused, it ends
            # at once with what it started.
            log.warning("refused worker process %s of %s (the job's worker is %s); it ends", conn.pid, job.id, job.worker_pid)
            raise ProtocolError(UNAUTHORIZED, "only the job's own worker process may say hello")
        if job.conn is not None and job.conn is not conn:
            job.conn.job = None
            job.conn.close()
        conn.job = job
        job.conn = conn
        if args.get("held") is not None:
            # A worker that outlived a daemon crash: seqs go on after what it holds.
            self.settle_numbering(job, args["held"])
        # Everything unacked is pushed again; the worker drops what its transcript holds.
        job.sent = job.queue.acked
        return {
            "job": {
                "id": job.id,
                "name": job.name,
                "host": job.host,
                "cwd": job.cwd,
                "session": job.session,
                "task": job.task,
                "scenario": job.scenario,
                "model": job.model,
                "thinking": job.thinking,
                "state": job.state,
                "parentSession": job.parent_session,
                "parentPeer": job.parent_peer,
            },
            "acked": job.queue.acked,
            "tools": self.tool_list(),
        }

    async def op_warm_hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """A warm worker (``roost_core.daemon.pool``) checks in: the job it will be, and
        the tools its pi will have."""
        if conn.bound or conn.warm is not None:
            raise ProtocolError(CONFLICT, "connection is already bound")
        slot = self.pool.hello(conn, args["job"], args["token"], conn.pid)
        if slot is None:
            raise ProtocolError(UNAUTHORIZED, "no such warm slot for this process")
        conn.warm = slot
        return {"job": slot.info(), "tools": self.tool_list()}

    async def op_warm_ready(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The warm worker's host is up: the slot may be taken."""
        if conn.warm is None:
            raise ProtocolError(UNAUTHORIZED, "warm_ready is for a warm worker (warm_hello first)")
        self.pool.mark_ready(conn.warm)
        return {"ready": True}

    def after_hello(self, conn: Connection) -> None:
        """Once the hello answer is queued: push everything not yet in the transcript, and
        retry reports kept for this job's session (a job for it has started)."""
        if conn.job is not None:
            self.push_pending(conn.job)
            self.soon(lambda session=conn.job.session: self.retry_undelivered(session=session))

    async def op_job_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = conn.job
        assert job is not None
        if job.state == "stopped":
            # The user's stop wins over a status the worker sent before it heard of it;
            # a job stopped when it had failed keeps that failure's error.
            held = ("state", "dialog", "error") if job.stopped_from == "failed" else ("state", "dialog")
            args = {key: value for key, value in args.items() if key not in held}
        for key in ("state", "status", "summary", "question", "error"):
            if key in args:
                setattr(job, key, args[key])
        if "dialog" in args:
            asking = bool(args["dialog"]) and not job.dialog
            job.dialog = bool(args["dialog"])
            if asking:
                self.fire_watches(job, "asks")
        if "trace" in args:
            job.run_trace = args["trace"]
        if "hops" in args:
            job.run_hops = args["hops"]
        if "broadcastChain" in args:
            job.run_broadcast_chain = args["broadcastChain"]
        if "causes" in args:
            job.run_causes = [c for c in args["causes"] if isinstance(c, dict) and isinstance(c.get("seq"), int)]
        if "hostPid" in args:
            job.host_pid = args["hostPid"]
        if "state" in args and args["state"] != "failed" and "error" not in args:
            job.error = None
        if args.get("settled"):
            job.crashes = 0
        if job.state != "running" and "state" in args:
            job.idle_since = self.clock()
        if "usage" in args:
            self.note_usage(job, args["usage"])
        self.save(job)
        return {"state": job.state}

    async def op_ack(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return await settle(self.accept_ack(conn, args))

    def accept_ack(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any] | Pending:
        """``ack`` with no wait: a worker's ack is answered once its record is durable."""
        if conn.job is not None:
            answer = self.mailroom.ack_job(conn.job, args["seq"])
            if isinstance(answer, Pending):
                self.watch.touch()
            return answer
        if conn.peer is not None:
            return self.mailroom.ack_peer(conn.peer, args["seq"])
        raise ProtocolError(UNAUTHORIZED, "ack needs a bound connection")


def loop_name() -> str:
    """The event loop the daemon runs on: ``uvloop`` or ``asyncio`` (see
    ``daemon.loop_options``)."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
