"""A job's own workspace: made before the job (``spawn``/``start`` with ``workspace:
"worktree"``), described for its reports, checked and removed with it (``remove``).

Every decision and every git command is the workspace plugin's (``roost_make_workspace``,
``roost_describe_workspace``, ``roost_remove_workspace``; git worktrees by default); the
daemon calls the hooks off its event loop, one at a time, and keeps the answer on the job
record. A stop or a crash keeps the workspace; only ``remove`` takes it, and never work
that no other branch holds unless the user says ``force``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from roost_core.protocol import BAD_ARGS, NOT_A_REPO, UNMERGED_WORK, ProtocolError
from roost_core.records import (
    Workspace,
    WorkspaceMade,
    WorkspaceRemoval,
    WorkspaceRequest,
    WorkspaceState,
)

if TYPE_CHECKING:
    from roost_core.daemon.jobs import Job
    from roost_core.paths import Paths

log = logging.getLogger("roost.daemon")


class Workspaces:
    """Jobs' own workspaces (see the module docstring)."""

    def __init__(self, paths: Paths, pm: Any) -> None:
        self.paths = paths
        self.pm = pm
        # One workspace hook at a time: two worktrees of one repository made at once race
        # on its refs and admin folders.
        self.lock = anyio.Lock()

    async def make(self, kind: str | None, base: str | None, cwd: str, name: str) -> Workspace | None:
        """The workspace of a new job named ``name`` that would work in ``cwd``: None for
        ``shared`` (it works in ``cwd`` itself); refused with the plugin's code otherwise."""
        if kind in (None, "shared"):
            if base is not None:
                raise ProtocolError(BAD_ARGS, 'base is for workspace "worktree": a shared workspace is the folder as it is')
            return None
        request = WorkspaceRequest(cwd=cwd, name=name, base=base or "head", state_dir=str(self.paths.state_dir))
        async with self.lock:
            made = await anyio.to_thread.run_sync(lambda: self.pm.hook.roost_make_workspace(request=request))
        if not isinstance(made, WorkspaceMade) or (made.workspace is None and made.refusal is None):
            raise ProtocolError(NOT_A_REPO, "no workspace plugin can make a workspace here (the default, 'workspace', is blocked?)")
        if made.refusal is not None:
            raise ProtocolError(made.refusal.code, made.refusal.message)
        assert made.workspace is not None
        log.info("made workspace %s on %s for %s", made.workspace.path, made.workspace.branch, name)
        return made.workspace

    def drop(self, workspace: Workspace) -> None:
        """Remove a workspace made for a job that was then not made (nothing was done in
        it). On that error path only, so the loop waits for git here rarely and briefly."""
        try:
            self.pm.hook.roost_remove_workspace(workspace=workspace, force=True)
        except Exception:
            log.exception("cannot remove the workspace %s of a job that was not made", workspace.path)

    async def state(self, job: Job) -> WorkspaceState | None:
        """What ``job``'s workspace holds now; None for a job without one, or when no
        plugin describes it."""
        workspace = workspace_of(job)
        if workspace is None:
            return None
        async with self.lock:
            state = await anyio.to_thread.run_sync(lambda: self.pm.hook.roost_describe_workspace(workspace=workspace))
        return state if isinstance(state, WorkspaceState) else None

    async def check_removal(self, job: Job, *, force: bool, keep: bool) -> None:
        """Refuse ``remove`` of a job whose workspace holds work no other branch holds
        (``unmerged_work``), unless the user said what becomes of it."""
        if force or keep or job.workspace is None:
            return
        state = await self.state(job)
        if state is None:
            return  # no plugin vouches for it: ``remove`` then keeps it (``removal``)
        if state.holds_work:
            workspace = state.workspace
            raise ProtocolError(
                UNMERGED_WORK,
                f"job {job.id} ({job.name}) has work that is not merged anywhere: {work_text(state)}. "
                f"Keep it: merge it (git merge {workspace.branch}, from your checkout) then roost rm {job.id}, "
                f"or roost rm --keep-workspace {job.id} (the job goes, the worktree {workspace.path} and the branch stay); "
                f"drop it: roost rm --force {job.id}",
                workspace=state.to_json(),
            )

    async def removal(self, job: Job, *, force: bool, keep: bool) -> dict[str, Any] | None:
        """Remove ``job``'s workspace with it (what ``remove`` answers of it): kept whole
        with ``keep``; without ``force`` only what holds no work goes."""
        workspace = workspace_of(job)
        if workspace is None:
            return None
        shown = {"path": workspace.path, "branch": workspace.branch}
        if keep:
            return {**shown, "removed": False, "branchDeleted": False, "kept": "kept, as asked (--keep-workspace)"}
        async with self.lock:
            removal = await anyio.to_thread.run_sync(lambda: self.pm.hook.roost_remove_workspace(workspace=workspace, force=force))
        if not isinstance(removal, WorkspaceRemoval):
            return {**shown, "removed": False, "branchDeleted": False, "kept": "no workspace plugin removes it"}
        if removal.kept:
            log.info("remove %s: kept of its workspace: %s", job.id, removal.kept)
        return {**shown, "removed": removal.removed, "branchDeleted": removal.branch_deleted, "tip": removal.tip, "kept": removal.kept}


def workspace_of(job: Job) -> Workspace | None:
    """``job``'s workspace as its record keeps it."""
    return Workspace.from_json(job.workspace) if job.workspace is not None else None


def work_text(state: WorkspaceState) -> str:
    """What a workspace holds that nothing else does, in words."""
    parts = []
    if state.unmerged:
        parts.append(f"{state.unmerged} commit(s) on {state.workspace.branch} that no other branch holds")
    if state.uncommitted:
        parts.append(f"{len(state.uncommitted)} uncommitted change(s) in {state.workspace.path}")
    return " and ".join(parts)
