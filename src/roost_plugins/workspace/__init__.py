"""Default workspaces: a child asked to work in a ``worktree`` gets a git worktree of the
spawner's repository on a branch of its own (:mod:`roost_plugins.workspace.git` says
where and how). A team on another version control blocks this plugin (``workspace``) or
installs its own: a decide hook's default runs last, and each hook here answers only for
workspaces it made (``vcs`` ``git``).
"""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.records import (
    Workspace,
    WorkspaceMade,
    WorkspaceRemoval,
    WorkspaceRequest,
    WorkspaceState,
)

# The git module (subprocess, tempfile...) is imported by the hooks that use it: every
# roost process loads this plugin, few of them ever make a workspace.
VCS = "git"


@hookimpl(trylast=True)
def roost_make_workspace(request: WorkspaceRequest) -> WorkspaceMade | None:
    """A new git worktree on the branch ``roost/NAME`` from the spawner's HEAD (its
    uncommitted changes too with base ``carry``), or the refusal that says why not."""
    from roost_plugins.workspace import git

    return git.make(request)


@hookimpl(trylast=True)
def roost_describe_workspace(workspace: Workspace) -> WorkspaceState | None:
    """The branch's commits since the base, the ones no other branch holds, the diffstat,
    the worktree's uncommitted changes."""
    if workspace.vcs != VCS:
        return None
    from roost_plugins.workspace import git

    return git.describe(workspace)


@hookimpl(trylast=True)
def roost_remove_workspace(workspace: Workspace, force: bool) -> WorkspaceRemoval | None:
    """``git worktree remove`` and ``git branch -D``: without ``force`` only a worktree with
    nothing uncommitted and a branch with nothing no other branch holds."""
    if workspace.vcs != VCS:
        return None
    from roost_plugins.workspace import git

    return git.remove(workspace, force=force)
