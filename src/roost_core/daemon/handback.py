"""Hand-back: a settled run of a spawned child becomes a report when the handback plugin
says so, and goes where the plugin routes it; a report that cannot go anywhere yet is kept
on the child and retried; a child that ends without a report sends a synthetic one."""

from __future__ import annotations

import logging
from typing import Any

import attrs

from roost_core import faults, identity, policy
from roost_core.daemon.connection import Connection
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import KeyedIds
from roost_core.daemon.registry import Registry
from roost_core.daemon.sending import SendDesk, deliver_to
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.tasks import Clock, Tasks
from roost_core.daemon.watches import Watches
from roost_core.daemon.workspaces import Workspaces
from roost_core.protocol import (
    BAD_ARGS,
    NOT_STORED,
    PLUGIN_ERROR,
    QUEUE_FULL,
    TOO_LARGE,
    ProtocolError,
)
from roost_core.records import (
    OutgoingItem,
    Report,
    ReportCandidates,
    RunCause,
    RunRecord,
)

log = logging.getLogger("roost.daemon")

REPORT_CHARS = 6000


class Handback:
    """Reports of spawned children to their parents (see the module docstring). It is
    the workers' :class:`~roost_core.daemon.workers.ExitListener`: a run a worker's exit
    cut short reports too."""

    def __init__(
        self, pm: Any, registry: Registry, tables: PeerTables, desk: SendDesk, watches: Watches, clock: Clock, tasks: Tasks, workspaces: Workspaces
    ) -> None:
        self.pm = pm
        self.registry = registry
        self.jobs = registry.jobs
        self.foreground = registry.foreground
        self.tables = tables
        self.desk = desk
        self.watches = watches
        self.clock = clock
        self.tasks = tasks
        #: What a child's own workspace holds, for its reports.
        self.workspaces = workspaces
        #: Reports kept because the journal or the parent's queue could not take them:
        #: routed again by the monitor (once the journal writes again).
        self.reports_to_retry = False
        #: Children whose kept report is being routed again: a second retry (two
        #: registrations of the parent, one after the other) leaves it to the first, which
        #: may still wait for its push's record, so the parent gets one copy.
        self.retrying: set[str] = set()

    def run_restarted(self, job: Job) -> None:
        """The worker of ``job`` died in a run and was started again: the run that died is
        not run again, and its parent hears of it now, if that run reports."""
        self.tasks.soon(self.report_crashed_run, job)

    def run_lost(self, job: Job, reason: str) -> None:
        """The worker of ``job`` died in a run (``crashed``) or was given up on
        (``gave_up``): a parent must not wait for a report that cannot come."""
        self.tasks.soon(self.report_ended, job, reason)
        # Not "ended": a watcher, too, must not take a crashed job for a gone one.
        self.watches.fire(job, "crashed")

    async def op_handback(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """A worker's run settled: decide (handback plugin) whether it reports, and route it."""
        job = conn.job
        assert job is not None
        causes = []
        for raw in args["causes"]:
            if not isinstance(raw, dict) or not isinstance(raw.get("seq"), int) or not isinstance(raw.get("kind"), str):
                raise ProtocolError(BAD_ARGS, "handback: each cause needs an integer seq and a kind")
            causes.append(RunCause(seq=raw["seq"], kind=raw["kind"], sender=raw.get("sender"), joined=bool(raw.get("joined"))))
        run = RunRecord(
            causes=tuple(causes),
            state=args["state"],
            result=(args.get("result") or "")[:REPORT_CHARS],
            question=args.get("question"),
            error=args.get("error"),
        )
        run_key = args.get("run")
        self.settle_run(job, run)
        if run_key is not None and run_key <= job.handback_run:
            return {"reported": False, "reason": "already handed back"}
        if job.parent_session is None and job.parent_peer is None:
            self.mark_handed_back(job, run_key)
            return {"reported": False, "reason": "no parent"}
        child = job.peer_info()
        decision = policy.decide_report(self.pm, child, run, job.parent_streak)
        job.parent_streak = decision.streak
        if not decision.report:
            self.mark_handed_back(job, run_key)
            return {"reported": False, "reason": decision.reason}
        report = Report(
            child=child, state=run.state, result=run.result, question=run.question, error=run.error, id=report_id(self.desk.ids, job, run_key),
            workspace=await self.workspaces.state(job),
        )
        faults.point("daemon.during_handback")
        route = await self.route_report(job, report)
        # Marked only once routed: a handback resent after a crash before this point is
        # routed again; one that was routed is dropped.
        self.mark_handed_back(job, run_key)
        return {"reported": True, "route": route}

    async def report_crashed_run(self, job: Job) -> None:
        """A report-worthy run whose worker died reports as failed (once)."""
        causes = tuple(
            RunCause(seq=c["seq"], kind=str(c.get("kind")), sender=c.get("sender"), joined=bool(c.get("joined"))) for c in job.run_causes
        )
        if not causes or causes[0].seq <= job.handback_run or (job.parent_session is None and job.parent_peer is None):
            return
        run = RunRecord(causes=causes, state="failed", error=job.error)
        decision = policy.decide_report(self.pm, job.peer_info(), run, job.parent_streak)
        job.parent_streak = decision.streak
        if decision.report:
            # Its worker is started again for the items waiting (worker_gone): say so.
            await self.route_report(job, Report(
                child=job.peer_info(), state="failed", error=job.error, reason="restarted", id=report_id(self.desk.ids, job, causes[0].seq),
                workspace=await self.workspaces.state(job),
            ))
        self.mark_handed_back(job, causes[0].seq)

    def settle_run(self, job: Job, run: RunRecord) -> None:
        """The run is over, as the settled status after the handback says again: a worker
        that dies in between leaves a settled job, not one 'running'."""
        if job.state != "stopped":
            job.state = run.state
        job.question = run.question
        job.error = run.error
        job.dialog = False
        job.dialog_options = None
        # The summary the settled status will send too, so state and summary change at once.
        job.summary = next((line.strip()[:200] for line in (run.result or run.question or "").splitlines() if line.strip()), None)
        job.crashes = 0
        job.idle_since = self.clock()
        self.registry.save(job)
        self.watches.fire(job, "asks" if run.state == "needs_input" else "settled")

    def mark_handed_back(self, job: Job, run_key: int | None) -> None:
        if run_key is not None:
            job.handback_run = max(job.handback_run, run_key)
        self.registry.save(job)

    def report_candidates(self, job: Job) -> ReportCandidates:
        table = self.tables.peer_table()
        if job.parent_session is not None:
            holder = table.holders.get(job.parent_session)
        else:
            holder = table.holder_of(job.parent_peer or "")
        session_job = self.tables.tree_record(job.parent_session)
        return ReportCandidates(
            parent_session=job.parent_session,
            parent_peer=job.parent_peer,
            live_holder=holder if holder is not None and holder.live else None,
            session_job=session_job.peer_info() if session_job is not None and session_job.id != job.id else None,
        )

    async def route_report(self, job: Job, report: Report) -> str:
        """Send a report where the handback plugin says; keep it on the child otherwise."""
        if report.id is None:
            report = attrs.evolve(report, id=identity.new_message_id())
        route = policy.route_report(self.pm, report, self.report_candidates(job))
        if route.action in ("deliver", "queue") and route.target is not None:
            table = self.tables.peer_table()
            target = table.holder_of(route.target) if route.action == "deliver" else None
            if route.action == "queue" and route.target in self.jobs:
                target = self.jobs[route.target].peer_info()
            if target is not None:
                faults.point("daemon.report_routing")
                item = OutgoingItem(
                    sender=report.child,
                    target=target,
                    text=policy.format_report(self.pm, report),
                    kind="report",
                    relation="child",
                    hops=job.run_hops + 1,
                    id=report.id,
                    broadcast_chain=job.run_broadcast_chain,
                )
                try:
                    result = await deliver_to(self.desk, target, item, policy.frame_item(self.pm, item), trace=job.run_trace, wake=route.wake)
                except ProtocolError as exc:
                    if exc.code == TOO_LARGE:
                        # Only a plugin's report format makes one this large (a result is
                        # cut to REPORT_CHARS): it could never arrive, so it is not kept.
                        log.error("the report of %s is dropped, it can never reach %s: %s", job.id, target.id, exc.message)
                        return "dropped"
                    if exc.code == PLUGIN_ERROR:
                        # The framing plugin broke the envelope's rules (its log line is
                        # written): the report stays on the child, not routed again.
                        return self.keep_report(job, report)
                    if exc.code not in (NOT_STORED, QUEUE_FULL):
                        raise
                    # The disk is full or the parent's queue is: the report is kept on the
                    # child, as for a parent not running, and routed again soon (monitor).
                    result = {"result": "not running"}
                    self.reports_to_retry = True
                if result["result"] == "delivered" and target.kind == "foreground":
                    peer = self.foreground.get(target.id)
                    if peer is not None and "seq" in result:
                        peer.reports_in_flight[result["seq"]] = (job.id, kept_report(report))
                if result["result"] != "not running":
                    if job.undelivered_report is not None:
                        job.undelivered_report = None
                        self.registry.kept_reports.pop(job.id, None)
                        self.registry.save(job)
                    outcome: str = result["result"]
                    return outcome
        if route.action == "drop":
            return "dropped"
        return self.keep_report(job, report)

    def keep_report(self, job: Job, report: Report) -> str:
        """Keep ``report`` on ``job`` (the child) until it can be routed."""
        job.undelivered_report = kept_report(report)
        self.registry.kept_reports[job.id] = None
        self.registry.save(job)
        return "kept"

    async def retry_undelivered(self, *, session: str | None = None, peer_id: str | None = None) -> None:
        """A peer for ``session`` registered, or a job for it started: retry kept reports."""
        for job in self.registry.jobs_keeping_reports():
            kept = job.undelivered_report
            if kept is None:
                continue
            if (session is not None and job.parent_session == session) or (
                peer_id is not None and job.parent_session is None and job.parent_peer == peer_id
            ):
                await self.route_kept(job, kept)

    async def retry_all_undelivered(self) -> None:
        """Route again every kept report (after the disk or a parent's queue had no room)."""
        for job in self.registry.jobs_keeping_reports():
            kept = job.undelivered_report
            if kept is not None and job.id in self.jobs:
                await self.route_kept(job, kept)

    async def route_kept(self, job: Job, kept: dict[str, Any]) -> None:
        """Route the report ``job`` keeps, unless a retry routes it already."""
        if job.id in self.retrying:
            return
        self.retrying.add(job.id)
        try:
            await self.route_report(job, Report(child=job.peer_info(), **kept))
        finally:
            self.retrying.discard(job.id)

    async def report_ended(self, job: Job, reason: str) -> None:
        """The synthetic report of a spawned child whose run will not report: stopped or
        removed by the user (once, until a user reply starts it again), or its worker
        crashed (``crashed``, ``gave_up``: each time; a message starts it again, so it is
        not marked as ended). The report carries the facts (error, crashes) that say
        what the child does next."""
        crash = reason in ("crashed", "gave_up")
        if not job.spawned or (job.ended_reported and not crash):
            return
        report = policy.report_on_end(self.pm, job.peer_info(), reason)
        if report is None:
            return
        if crash:
            report = attrs.evolve(report, error=report.error or job.error, crashes=report.crashes or job.crashes)
        else:
            job.ended_reported = True
        if reason != "removed" and report.workspace is None:
            # A stop or a crash keeps the workspace: the parent hears what it holds.
            report = attrs.evolve(report, workspace=await self.workspaces.state(job))
        await self.route_report(job, report)


def kept_report(report: Report) -> dict[str, Any]:
    """A report as its child keeps it (``undelivered_report``) until it can go: every
    field but the child (``Report(child=..., **kept)`` makes it again), so a field
    added to :class:`Report` is kept with no change here."""
    kept = {name: value for name, value in attrs.asdict(report, recurse=False).items() if name != "child"}
    if report.workspace is not None:
        kept["workspace"] = report.workspace.to_json()  # the job record is JSON
    return kept


def report_id(ids: KeyedIds, job: Job, run: int | None) -> str | None:
    """The message id of the report of ``job``'s run ``run``: the same each time that run
    is handed back (a worker sends its handback again until it is answered, and a daemon
    that died before it marked the run handed back routes it again), so the parent's side
    drops a second copy by its id. None (a new id) for a run with no key."""
    return None if run is None else ids.message_id(job.id, f"report:{run}")
