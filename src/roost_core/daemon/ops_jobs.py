"""Ops on jobs, for the user's CLI and views: start, jobs, agents, watch, dead, reply, stop,
remove, log."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from roost_core.config import read_project_config
from roost_core.daemon import changes
from roost_core.daemon.agentrows import AgentRows
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.callers import caller_of
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom, not_stored
from roost_core.daemon.handback import Handback
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobmaker import JobMaker
from roost_core.daemon.persistence import Persistence
from roost_core.daemon.persons import check_a_person
from roost_core.daemon.receipts import Receipts
from roost_core.daemon.registry import Registry
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.watch import Watchers, newest_receipts
from roost_core.daemon.watches import Watches
from roost_core.daemon.workers import Workers
from roost_core.dialogs import choice_of, options_text
from roost_core.hosts import session_lines, session_seqs
from roost_core.paths import Paths
from roost_core.protocol import (
    BAD_ARGS,
    JOB_STOPPED,
    NO_DIALOG,
    NO_SESSION,
    NOT_AN_OPTION,
    ProtocolError,
)
from roost_core.store import JournalError

log = logging.getLogger("roost.daemon")


class JobOps:
    """The user's ops on jobs (see the module docstring)."""

    def __init__(
        self,
        paths: Paths,
        *,
        registry: Registry,
        persistence: Persistence,
        tables: PeerTables,
        budgets: Budgets,
        hosts: HostSet,
        maker: JobMaker,
        workers: Workers,
        receipts: Receipts,
        mailroom: Mailroom,
        agents: AgentRows,
        watchers: Watchers,
        watches: Watches,
        handback: Handback,
    ) -> None:
        self.paths = paths
        self.registry = registry
        self.jobs = registry.jobs
        self.persistence = persistence
        self.tables = tables
        self.budgets = budgets
        self.hosts = hosts
        self.maker = maker
        self.workers = workers
        self.receipts = receipts
        self.mailroom = mailroom
        self.agents = agents
        self.watchers = watchers
        self.watches = watches
        self.handback = handback

    async def op_start(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        request_key = self.maker.request_key(conn, args)
        made = await self.maker.job_of_request(request_key)
        if made is not None:
            return {"id": made.id, "name": made.name, "host": made.host, "workspace": made.workspace}
        task = args["task"]
        if not task.strip():
            raise ProtocolError(BAD_ARGS, "start: task is empty")
        cwd = args.get("cwd") or str(self.paths.home)
        if not os.path.isabs(cwd) or not Path(cwd).is_dir():
            raise ProtocolError(BAD_ARGS, f"start: cwd {cwd!r} is not an existing absolute directory")
        project, warning = read_project_config(cwd)
        if warning:
            log.warning("start in %s: %s", cwd, warning)
        host = args.get("host") or self.maker.default_host(project)
        self.hosts.check(host, "start")
        scenario = self.hosts.scenario(host, args.get("scenario"), cwd, None)
        session = args.get("session")
        if session is not None:
            session = self.maker.adoptable_session(session)
        model = args.get("model") or project.get("defaultModel")
        thinking = args.get("thinking") or project.get("defaultThinking")
        name = self.maker.job_name(args.get("name"), task, chosen=session is None)
        workspace = await self.maker.workspaces.make(args.get("workspace"), args.get("base"), cwd, name)
        job = self.maker.create_job(
            task=task,
            name=name,
            cwd=workspace.cwd if workspace is not None else cwd,
            host=host,
            scenario=scenario,
            model=model,
            thinking=thinking,
            # A job that continues a session file is never warm: a slot has its own; nor is
            # one in a new workspace: a warm worker is made for a folder.
            slot=self.workers.take_slot(host, cwd, model, thinking) if session is None and workspace is None else None,
        )
        job.workspace = workspace.to_json() if workspace is not None else None
        if session is not None:
            # A foreground session moving to the background (the spec's "←"): the job
            # continues its file, its tree links and its seqs.
            job.session = session
            previous = self.tables.tree_record(session)
            if previous is not None and previous is not job:
                job.parent_session, job.parent_peer = previous.parent_session, previous.parent_peer
                job.root_session, job.depth, job.spawned = previous.root_session, previous.depth, previous.spawned
            job.queue.reply_seq = max(session_seqs(self.hosts.get(host), session), default=0)
            job.queue.durable = job.queue.reply_seq
        job.request_key = request_key
        with self.workers.slot_released_on_error(job), self.maker.workspace_dropped_on_error(job, workspace):
            self.maker.add_job(job)
            await self.maker.enqueue_task(job, task, trace=args.get("trace") or f"t-{job.id}-1")
        result: dict[str, Any] = {"id": job.id, "name": job.name, "host": job.host, "workspace": job.workspace}
        if warning:
            # The CLI prints them on stderr: a broken project config must not pass unseen.
            result["warnings"] = [warning]
        return result

    async def op_jobs(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for job in sorted(self.jobs.values(), key=lambda j: j.created):
            row = job.row()
            parent = self.tables.live_parent(job)
            row["parent"] = parent.id if parent else None
            rows.append(row)
        return {"jobs": rows}

    async def op_agents(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Every peer (collapsed by session) with its tree links, for views."""
        return {"agents": self.agents.rows()}

    async def op_watch(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The agent table now; then an ``agents`` event whenever it changes. With
        ``receipts``: every kept receipt now too, then a ``receipts`` event with those
        made or moved."""
        if not args.get("receipts"):
            self.watchers.add(conn)
            return {"agents": self.agents.rows()}
        self.watchers.add(conn, receipts=True)
        rows, left_out = newest_receipts(self.receipts.every())
        return {"agents": self.agents.rows(), "receipts": rows, "receiptsLeftOut": left_out}

    async def op_dead(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {"dead": list(self.receipts.dead)}

    async def op_reply(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.job_by_ref(args["job"])
        check_a_person(conn.pid, self.jobs.values(), "reply")
        text = args["text"]
        if not text.strip():
            raise ProtocolError(BAD_ARGS, "reply: text is empty")
        if job.state == "stopped" and not self.hosts.takes_messages(job) and not args.get("restart"):
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
            item, outcome = await self.maker.enqueue(job, "reply", text, trace=f"t-{job.id}-{job.queue.next_seq()}")
            return {"id": job.id, "seq": item.seq, "result": outcome}
        # A keyed reply has an id made from its key: asked again after a daemon died before
        # answering, it is found in the queue (or its worker drops the second copy by id).
        msg_id = self.persistence.ledger.ids.message_id(caller_of(conn), key)
        held = job.queue.holding(msg_id)
        if held is not None:
            return {"id": job.id, "seq": held.seq, "result": "queued"}
        # Asked again (``again``) with no answer on record: the first ask had room and may
        # have reached the worker before the daemon died; refused now, the user would be
        # told "not sent" of a reply the job may hold (a copy it holds is dropped by id).
        item, outcome = await self.maker.enqueue(
            job, "reply", text, trace=f"t-{job.id}-{job.queue.next_seq()}", msg_id=msg_id, past_cap=bool(args.get("again"))
        )
        return {"id": job.id, "seq": item.seq, "result": outcome}

    async def op_answer(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The user answers a job's open dialog (``roost answer``); without ``text``, the
        dialog is only shown. A choice takes one of its options (or its number), written
        as the dialog lists it; any other text answers an open question."""
        job = self.registry.job_by_ref(args["job"])
        if not job.dialog:
            raise ProtocolError(NO_DIALOG, no_dialog_message(job))
        options = job.dialog_options or []
        shown = {"id": job.id, "name": job.name, "question": job.question, "options": options or None}
        text = args.get("text")
        if text is None:
            return shown
        check_a_person(conn.pid, self.jobs.values(), "answer")
        if options:
            choice = choice_of(text, options)
            if choice is None:
                raise ProtocolError(NOT_AN_OPTION, f"{text.strip()!r} is not one of the dialog's options: {options_text(options)}", options=options)
        elif not text.strip():
            raise ProtocolError(BAD_ARGS, "answer: text is empty")
        else:
            choice = text
        answer = await self.op_reply(conn, {"job": job.id, "text": choice, **({"key": args["key"]} if "key" in args else {})})
        # Answered: a second answer before the worker closes the dialog is refused
        # (it would start a run of its own), and the views stop asking at once.
        job.dialog = False
        job.dialog_options = None
        self.registry.save(job)
        return {**shown, **answer, "answer": choice}

    async def op_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.job_by_ref(args["job"])
        was = job.state
        if was != "stopped":
            # Kept, with its error, so a failed job stays visibly failed once stopped.
            job.stopped_from = was
        job.state = "stopped"
        job.dialog = False
        job.dialog_options = None
        self.registry.save(job)
        if job.worker_pid is not None:
            self.workers.shut_down(job, "stopped")
        await self.handback.report_ended(job, "stopped")
        self.watches.ended(job)
        return {"id": job.id, "was": was, "state": job.state, "stoppedFrom": job.stopped_from, "error": job.error}

    async def op_remove(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.job_by_ref(args["job"])
        force, keep = bool(args.get("force")), bool(args.get("keepWorkspace"))
        if force and keep:
            raise ProtocolError(BAD_ARGS, "remove: force drops the job's workspace and keepWorkspace keeps it: say one")
        # Before anything goes: work in its workspace that no other branch holds refuses it.
        await self.maker.workspaces.check_removal(job, force=force, keep=keep)
        if job.state != "stopped":
            await self.handback.report_ended(job, "removed")
        job.state = "stopped"
        if job.worker_pid is not None:
            self.workers.kill_worker(job)
            # No exit of this worker will be handled (the job is gone): what it started
            # goes now, with it.
            self.workers.kill_leftovers(job)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        self.workers.forget(job)
        self.jobs.pop(job.id, None)
        changes.changed()
        self.budgets.usage_changed()
        self.watches.ended(job)
        dropped = self.mailroom.drop_all(job)
        self.watchers.touch()
        journal = self.persistence.journal
        assert journal is not None
        self.registry.unsaved.discard(job.id)
        try:
            await journal.append({"op": "drop", "job": job.id})
        except JournalError as exc:
            # Replay skips the items of a job with no record, so deleting it is enough.
            log.warning("remove %s: the journal took no drop record (%s); its record goes anyway", job.id, exc)
        try:
            self.registry.job_files.delete(job.id)
        except OSError as exc:
            raise not_stored(exc, "the removal") from exc
        workspace = await self.maker.workspaces.removal(job, force=force, keep=keep)
        return {"id": job.id, "removed": True, "dropped": len(dropped), "workspace": workspace}

    async def op_log(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Where a job's transcript is, or a foreground peer's (by its id: a thread is
        seen from both ends), with the receipts of what it sent and received."""
        peer = self.registry.foreground.get(args["job"])
        if peer is not None and args["job"] not in self.registry.jobs:
            if not peer.session:
                raise ProtocolError(NO_SESSION, f"{peer.id} ({peer.name}) is a foreground peer with no session file: it has no transcript to show")
            return {
                "id": peer.id,
                "session": peer.session,
                "host": peer.host,
                "task": None,
                "state": None,
                "error": None,
                "entries": session_lines(self.hosts.get(peer.host or ""), peer.session) if args.get("entries") else None,
                "sent": self.receipts.sent_by(peer.id),
                "received": self.receipts.received_by(peer.id),
            }
        job = self.registry.job_by_ref(args["job"])
        return {
            "id": job.id,
            "session": job.session,
            # The reader of the session file is the host's (HostSpec.transcript_entries).
            "host": job.host,
            # What ``roost log`` shows when the transcript has nothing yet (an agent that
            # failed before its first answer wrote none), and why a failed job failed.
            "task": job.task,
            "state": job.state,
            "error": job.error,
            "entries": session_lines(self.hosts.get(job.host), job.session) if args.get("entries") else None,
            "sent": self.receipts.sent_by(job.id),
            "received": self.receipts.received_by(job.id),
        }


def no_dialog_message(job: Any) -> str:
    """``no_dialog``'s message: a job that asks a plain question (``needs_input``, no
    dialog) is answered with a reply, and the message says how."""
    text = f"job {job.id} ({job.name}) has no dialog open: nothing to answer"
    if job.state == "needs_input" and job.question:
        text += f"; it asks a plain question, which a reply answers: roost reply {job.id} TEXT"
    return text
