"""Default hand-back policy: which settled runs report to the parent, what a report
says, where it goes, and the reports the daemon makes for a stop, a removal or a crash.

Report-worthy: a run that a user reply, the spawn task or CLI input started or joined; a
run started by a report from one's own child (so results climb the tree, which is
acyclic and at most ``agentMaxDepth`` deep); a run started by the parent's own message,
at most :data:`MAX_PARENT_STREAK` such runs in a row. Runs started by any other agent's
message never report, so sessions cannot wake each other forever.
"""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.records import (
    PeerInfo,
    Report,
    ReportCandidates,
    ReportDecision,
    ReportRoute,
    RunRecord,
    WorkspaceState,
)

MAX_PARENT_STREAK = 3


@hookimpl(trylast=True)
def roost_decide_report(child: PeerInfo, run: RunRecord, streak: int) -> ReportDecision | None:
    """User input (started or joined) always reports; the parent's messages up to 3 in a row."""
    if child.parent_session is None and child.parent_peer is None:
        return ReportDecision(False, streak, "no parent")
    kinds = {cause.kind for cause in run.causes}
    if "reply" in kinds:
        return ReportDecision(True, 0, "user input")
    if "report" in kinds:
        return ReportDecision(True, streak, "a child's report")
    from_parent = any(cause.kind == "message" and cause.sender == child.parent_peer for cause in run.causes)
    if from_parent:
        if streak < MAX_PARENT_STREAK:
            return ReportDecision(True, streak + 1, "the parent's message")
        return ReportDecision(False, streak, f"{MAX_PARENT_STREAK} runs in a row were started by the parent's messages")
    return ReportDecision(False, streak, "started by another agent's message")


@hookimpl(trylast=True)
def roost_format_report(report: Report) -> str | None:
    """``state: STATE`` and the question or error, then the child's final text; a failed
    run's report and a report the daemon made (a stop, a removal, a crash) say with
    ``next:`` what the child does next, as it is (a parent that believed a failed or
    crashed child gone would spawn a second)."""
    if report.synthetic:
        return "\n".join([*_synthetic_lines(report), *_workspace_lines(report.workspace)])
    lines = [f"state: {report.state}"]
    if report.question:
        lines.append(f"question: {report.question}")
    if report.error:
        lines.append(f"error: {report.error}")
    if report.reason == "restarted":
        lines.append("next: its worker was started again for the messages waiting for it; it reports again as usual")
    elif report.state == "failed":
        lines.append(f"next: {_FAILED_RUN}")
    lines.extend(_workspace_lines(report.workspace))
    if report.result and report.result != report.question:
        lines.append("")
        lines.append(report.result)
    return "\n".join(lines)


#: A child whose run failed (its agent exited, its model refused, its session file could
#: not be written...): the job stays, and the daemon's rule (a message or user reply
#: wakes a failed job) holds for every host.
_FAILED_RUN = "its run failed, the job stays; a message to it starts it again on the same session, and it reports again as usual"


def _workspace_lines(state: WorkspaceState | None) -> list[str]:
    """What a child's own workspace holds: its branch, its commits and the diffstat
    against the base, what it left uncommitted, and how to take it (the parent's own git)."""
    if state is None:
        return []
    workspace = state.workspace
    lines = [f"branch: {workspace.branch} (base {workspace.base[:12]}, worktree {workspace.path}{'' if state.exists else ', removed'})"]
    if state.head is None:
        lines.append("commits: none (the branch is gone)")
        return lines
    lines.append(f"commits: {state.commit_count} since the base" + (f", {state.unmerged} on no other branch" if state.unmerged != state.commit_count else ""))
    lines.extend(f"  {commit.id} {commit.subject}" for commit in state.commits)
    if state.commit_count > len(state.commits):
        lines.append(f"  ... {state.commit_count - len(state.commits)} more")
    if state.diffstat:
        lines.append("diffstat:")
        lines.extend(f"  {line}" for line in state.diffstat.splitlines())
    if state.uncommitted:
        lines.append(f"uncommitted: {len(state.uncommitted)} change(s) not committed in the worktree")
        lines.extend(f"  {line}" for line in state.uncommitted)
    if state.unmerged:
        lines.append(f"merge: git merge {workspace.branch} (from your checkout)")
    return lines


#: A crashed child that is not running: what starts it again (the daemon's rule: any
#: message or user reply wakes a failed job, and its next run reports as usual).
_RESTARTABLE = "not running now; a message to it starts it again, and it reports again as usual"


def _synthetic_lines(report: Report) -> list[str]:
    """The lines of a report the daemon made for ``report.reason``."""
    if report.reason == "stopped":
        return ["state: ended (stopped by the user)", "next: it runs and reports again only if the user restarts it; a message does not wake it"]
    if report.reason == "removed":
        return ["state: ended (removed by the user)", "next: it is gone and will not report again"]
    if report.reason == "crashed":
        lines = [f"state: {report.state} (its worker crashed during a run)"]
    elif report.reason == "gave_up":
        times = f"{report.crashes} times in a row" if report.crashes else "again and again"
        lines = [f"state: {report.state} (its worker crashed {times} while work waited for it; roost stopped restarting it)"]
    else:
        return [f"state: {report.state} ({report.reason or 'ended'})"]
    if report.error:
        lines.append(f"error: {report.error}")
    lines.append(f"next: {_RESTARTABLE}")
    return lines


@hookimpl(trylast=True)
def roost_route_report(report: Report, candidates: ReportCandidates) -> ReportRoute | None:
    """The live holder of the parent session; else that session's job (not woken when
    stopped); else keep it on the child until the parent comes back."""
    if candidates.live_holder is not None:
        return ReportRoute("deliver", candidates.live_holder.id)
    job = candidates.session_job
    if job is not None:
        return ReportRoute("queue", job.id, wake=job.state != "stopped")
    return ReportRoute("keep")


@hookimpl(trylast=True)
def roost_report_on_end(child: PeerInfo, reason: str) -> Report | None:
    """One report, so a parent never waits forever for a run that will not report:
    ``ended`` for a stop or a removal, ``failed`` for a crash (the job's state then)."""
    if child.parent_session is None and child.parent_peer is None:
        return None
    state = "failed" if reason in ("crashed", "gave_up") else "ended"
    return Report(child=child, state=state, synthetic=True, reason=reason)
