"""Git worktrees as job workspaces: make one, say what it holds, remove it. Plain ``git``
commands; nothing here writes to the spawner's checkout (its files, index or stash).

Where a worktree lives: ``STATE/worktrees/REPO-HASH/SLUG`` under roost's state folder
(``REPO`` the repository's folder name, ``HASH`` 8 hex of its git folder's path, so two
repositories of one name never share a folder; ``SLUG`` the branch's last part). An
ordinary absolute path, outside every checkout (a parent's ``git status``, search and
build never see a child's files), and ``git worktree list`` shows it. The branch is
``roost/SLUG``, from the job's name.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from roost_core.records import (
    Refusal,
    Workspace,
    WorkspaceCommit,
    WorkspaceMade,
    WorkspaceRemoval,
    WorkspaceRequest,
    WorkspaceState,
)

#: The prefix of every branch roost makes: ``git branch --list 'roost/*'`` lists them.
BRANCH_PREFIX = "roost/"
#: How many commits and diffstat lines a description carries (a report stays short).
SHOWN_COMMITS = 10
SHOWN_FILES = 20
SHOWN_UNCOMMITTED = 20
#: The codes a refusal carries (also the protocol's: docs/protocol.md).
NOT_A_REPO = "not_a_repo"
WORKSPACE_TAKEN = "workspace_taken"
WORKSPACE_FAILED = "workspace_failed"


class GitError(Exception):
    """A git command failed: ``message`` is git's own words."""


def git(cwd: str | Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run ``git -C cwd ARGS`` and return its stdout, stripped of the final newline.

    ``GIT_OPTIONAL_LOCKS=0``: a ``status`` never refreshes the index of the checkout it
    looks at (git's own rule for commands run in the background of a user's work)."""
    full_env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, env=full_env, check=False)
    if check and done.returncode != 0:
        raise GitError((done.stderr or done.stdout).strip() or f"git {args[0]} exited {done.returncode}")
    return done.stdout.rstrip("\n")


def succeeds(cwd: str | Path, *args: str) -> bool:
    """Whether ``git -C cwd ARGS`` exits 0."""
    try:
        git(cwd, *args)
    except GitError:
        return False
    return True


def branch_slug(name: str) -> str:
    """The last part of a job's branch: its name with every run of characters other than
    ``A-Z a-z 0-9 . _ -`` made one ``-``, no leading or trailing ``.``/``-``, no ``..``
    and no ``.lock`` ending (git's rules for a ref), at most 60 characters; ``child``
    when nothing is left."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
    slug = re.sub(r"\.{2,}", ".", slug)[:60].strip(".-")
    if slug.endswith(".lock"):
        slug = slug[: -len(".lock")].rstrip(".-")
    return slug or "child"


def make(request: WorkspaceRequest) -> WorkspaceMade:
    """A new worktree for ``request`` (see the module docstring), or the refusal that says
    why none can be made."""
    try:
        top = git(request.cwd, "rev-parse", "--show-toplevel")
    except GitError as exc:
        return refused(NOT_A_REPO, f"{request.cwd} is not in a git repository with a working tree ({exc}); a worktree needs one: "
                       'spawn with workspace "shared" to work in the folder as it is')
    if not top:
        return refused(NOT_A_REPO, f"{request.cwd} is not in a git repository with a working tree")
    base = git(top, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    if not base:
        return refused(WORKSPACE_FAILED, f"the repository at {top} has no commit yet: commit once, then a worktree can start from it")
    common = Path(git(top, "rev-parse", "--git-common-dir"))
    common = common if common.is_absolute() else Path(top, common)
    slug = branch_slug(request.name)
    branch = BRANCH_PREFIX + slug
    if not succeeds(top, "check-ref-format", "--branch", branch):
        return refused(WORKSPACE_TAKEN, f"{branch!r} is not a branch name git takes: choose another name for the child")
    home = Path(request.state_dir or tempfile.gettempdir(), "worktrees", f"{Path(top).name}-{hashlib.sha256(str(common.resolve()).encode()).hexdigest()[:8]}")
    path = home / slug
    if succeeds(top, "show-ref", "--verify", "-q", f"refs/heads/{branch}"):
        where = worktree_of(top, branch)
        held = f", checked out at {where}" if where else ""
        return refused(
            WORKSPACE_TAKEN,
            f"branch {branch} exists already in {top}{held} (a job's kept workspace, or your own): give the child another name, "
            f"or delete the branch (git branch -D {branch}) if it holds nothing you need",
        )
    if path.exists() or os.path.lexists(path):
        return refused(
            WORKSPACE_TAKEN,
            f"the worktree folder {path} exists already (a kept workspace): give the child another name, or remove it "
            f"(git worktree remove {path})",
        )
    subdir = os.path.relpath(os.path.realpath(request.cwd), os.path.realpath(top))
    notes: list[str] = []
    if not succeeds(top, "symbolic-ref", "-q", "HEAD"):
        notes.append(f"your HEAD is detached: the branch {branch} starts from its commit {base[:12]}")
    superproject = git(top, "rev-parse", "--show-superproject-working-tree", check=False)
    if superproject:
        notes.append(f"your folder is in a submodule of {superproject}: the worktree is of the submodule's repository ({top})")
    changes = status_lines(top)
    carried = request.base == "carry" and bool(changes)
    try:
        snapshot = snapshot_tree(top) if carried else None
        home.mkdir(parents=True, exist_ok=True)
        git(top, "worktree", "add", "--quiet", "-b", branch, str(path), base)
    except GitError as exc:
        return refused(WORKSPACE_FAILED, f"git could not make the worktree {path} on {branch}: {exc}")
    try:
        if snapshot is not None:
            # The snapshot's files into the new worktree (its HEAD stays the base), then the
            # index back to the base: the carried changes are the child's uncommitted ones.
            git(path, "read-tree", "-m", "-u", "HEAD", snapshot)
            git(path, "reset", "-q")
    except GitError as exc:
        remove_worktree(top, str(path), branch, force=True)
        return refused(WORKSPACE_FAILED, f"git could not carry your uncommitted changes into {path}: {exc}")
    if changes and not carried:
        notes.append(
            f"your {len(changes)} uncommitted change(s) are not in it (it starts from your last commit {base[:12]}); "
            'base "carry" brings them'
        )
    if carried:
        notes.append(f"your {len(changes)} uncommitted change(s) were carried in, uncommitted (your checkout keeps them as they are)")
    if Path(path, ".gitmodules").is_file():
        notes.append("submodules are not checked out in the worktree (git worktree add leaves them empty): git submodule update --init in it if needed")
    cwd = path if subdir in (".", "") else path / subdir
    workspace = Workspace(
        path=str(path), cwd=str(cwd if cwd.is_dir() else path), branch=branch, base=base, repo=top, vcs="git", carried=carried, notes=tuple(notes)
    )
    return WorkspaceMade(workspace=workspace)


def refused(code: str, message: str) -> WorkspaceMade:
    return WorkspaceMade(refusal=Refusal(code, message))


def worktree_of(top: str, branch: str) -> str | None:
    """The worktree that has ``branch`` checked out, if any."""
    path = None
    for line in git(top, "worktree", "list", "--porcelain", check=False).splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


def status_lines(cwd: str | Path) -> list[str]:
    """The uncommitted changes of the checkout at ``cwd``, one short status line each
    (``M notes.txt``, ``?? new.txt``), untracked files one by one; the index is not
    refreshed (``GIT_OPTIONAL_LOCKS=0``)."""
    out = git(cwd, "status", "--porcelain=v1", "--untracked-files=all", check=False)
    return [line.strip() for line in out.splitlines() if line.strip()]


def snapshot_tree(top: str) -> str:
    """A tree of the checkout at ``top`` as it is on disk (tracked changes, staged or not,
    and untracked files that are not ignored), written through a copy of its index: the
    checkout's own index is never written."""
    index = Path(git(top, "rev-parse", "--git-path", "index"))
    index = index if index.is_absolute() else Path(top, index)
    with tempfile.TemporaryDirectory(prefix="roost-carry-") as folder:
        scratch = Path(folder, "index")
        if index.is_file():
            shutil.copyfile(index, scratch)
        env = {"GIT_INDEX_FILE": str(scratch)}
        git(top, "add", "-A", "--", ".", env=env)
        return git(top, "write-tree", env=env)


def git_dir_of(workspace: Workspace) -> str | None:
    """A folder to run git in for ``workspace``: the worktree, else the repository."""
    for folder in (workspace.path, workspace.repo):
        if Path(folder).is_dir() and succeeds(folder, "rev-parse", "--git-dir"):
            return folder
    return None


def describe(workspace: Workspace) -> WorkspaceState:
    """What ``workspace`` holds now (see :class:`~roost_core.records.WorkspaceState`)."""
    exists = Path(workspace.path).is_dir()
    where = git_dir_of(workspace)
    if where is None:
        return WorkspaceState(workspace=workspace, exists=exists)
    ref = f"refs/heads/{workspace.branch}"
    head = git(where, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False) or None
    commits: tuple[WorkspaceCommit, ...] = ()
    count = unmerged = 0
    diffstat = ""
    if head is not None:
        span = f"{workspace.base}..{ref}"
        log = git(where, "log", f"-n{SHOWN_COMMITS}", "--format=%h%x00%s", span, check=False)
        commits = tuple(WorkspaceCommit(*line.split("\0", 1)) for line in log.splitlines() if "\0" in line)
        count = int(git(where, "rev-list", "--count", span, check=False) or 0)
        # Commits of this branch that neither the base nor any other branch holds (an
        # --exclude before --branches names a branch without its refs/heads/).
        unmerged = int(git(where, "rev-list", "--count", ref, "--not", workspace.base, f"--exclude={workspace.branch}", "--branches", check=False) or 0)
        diffstat = short_diffstat(git(where, "diff", "--stat=100", workspace.base, ref, check=False))
    uncommitted = tuple(status_lines(workspace.path)[:SHOWN_UNCOMMITTED]) if exists else ()
    return WorkspaceState(
        workspace=workspace, exists=exists, head=head, commits=commits, commit_count=count, unmerged=unmerged, diffstat=diffstat, uncommitted=uncommitted
    )


def short_diffstat(stat: str) -> str:
    """``git diff --stat`` with at most :data:`SHOWN_FILES` file lines, the summary last."""
    lines = [line.strip() for line in stat.splitlines() if line.strip()]
    if len(lines) <= SHOWN_FILES + 1:
        return "\n".join(lines)
    return "\n".join([*lines[:SHOWN_FILES], f"... {len(lines) - 1 - SHOWN_FILES} more file(s)", lines[-1]])


def remove(workspace: Workspace, *, force: bool) -> WorkspaceRemoval:
    """Remove ``workspace``'s worktree and branch; without ``force`` only what holds no
    work (see ``roost_remove_workspace``)."""
    state = describe(workspace)
    if not force and state.uncommitted:
        return WorkspaceRemoval(removed=False, kept=f"{workspace.path} has uncommitted changes ({len(state.uncommitted)})")
    return remove_worktree(workspace.repo, workspace.path, workspace.branch, force=force, state=state)


def remove_worktree(repo: str, path: str, branch: str, *, force: bool, state: WorkspaceState | None = None) -> WorkspaceRemoval:
    """``git worktree remove`` (``--force`` twice with ``force``: a dirty or locked one too),
    then the branch when ``force`` or when it holds no commit of its own."""
    where = path if Path(path).is_dir() else repo
    kept: list[str] = []
    removed = not Path(path).exists()
    if not removed:
        try:
            git(repo if Path(repo).is_dir() else path, "worktree", "remove", *(("--force", "--force") if force else ()), path)
            removed = True
        except GitError as exc:
            kept.append(f"git kept the worktree {path}: {exc}")
    ref = f"refs/heads/{branch}"
    tip = git(repo if Path(repo).is_dir() else where, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False) or None
    deleted = False
    if tip is not None:
        if force or (state is not None and state.unmerged == 0):
            deleted = succeeds(repo if Path(repo).is_dir() else where, "branch", "-D", branch)
            if not deleted:
                kept.append(f"git kept the branch {branch}")
        else:
            kept.append(f"the branch {branch} holds {state.unmerged if state else 'its'} commit(s) no other branch holds")
    return WorkspaceRemoval(removed=removed, branch_deleted=deleted, tip=tip, kept="; ".join(kept) or None)
