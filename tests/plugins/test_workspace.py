"""The default workspace plugin (git worktrees) on a fresh manager holding only it: each
outcome of making a workspace, what one holds, and what removing it takes or keeps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from roost_core.records import Workspace, WorkspaceMade, WorkspaceRemoval, WorkspaceState
from roost_core.testing import make_workspace, make_workspace_request
from roost_plugins import workspace as workspace_plugin


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "Tester")
    (path / "notes.txt").write_text("one\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("x = 1\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "repo")


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(("workspace", workspace_plugin))


def make(pm, cwd: Path, name: str, tmp_path: Path, base: str = "head") -> WorkspaceMade:
    return pm.hook.roost_make_workspace(request=make_workspace_request(cwd=str(cwd), name=name, base=base, state_dir=str(tmp_path / "state")))


def snapshot(repo: Path) -> tuple[str, str, bytes, str]:
    """The spawner's checkout as a user sees it: HEAD, status, index bytes, stash list."""
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / ".git" / "index").read_bytes(), git(repo, "stash", "list")


def test_a_worktree_on_its_own_branch_from_head_leaves_the_spawners_uncommitted_changes(pm, repo, tmp_path) -> None:
    (repo / "notes.txt").write_text("mine, uncommitted\n")
    before = snapshot(repo)
    made = make(pm, repo / "src", "fix the bug", tmp_path)
    assert made.refusal is None
    workspace = made.workspace
    assert workspace.branch == "roost/fix-the-bug" and workspace.base == git(repo, "rev-parse", "HEAD")
    path = Path(workspace.path)
    assert path.parent.parent == tmp_path / "state" / "worktrees" and path.name == "fix-the-bug"
    assert workspace.cwd == str(path / "src")  # the spawner's subfolder, in the worktree
    assert (path / "notes.txt").read_text() == "one\n"  # from HEAD: the spawner's change is not in it
    assert any("uncommitted change" in note and '"carry"' in note for note in workspace.notes)
    assert str(path) in git(repo, "worktree", "list")
    assert snapshot(repo) == before


def test_carry_brings_the_uncommitted_changes_in_and_leaves_the_checkout_as_it_was(pm, repo, tmp_path) -> None:
    (repo / "notes.txt").write_text("mine, uncommitted\n")
    (repo / "new.txt").write_text("untracked\n")
    git(repo, "add", "new.txt")
    (repo / "loose.txt").write_text("not added\n")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "build.log").write_text("ignored\n")
    before = snapshot(repo)
    workspace = make(pm, repo, "carrier", tmp_path, base="carry").workspace
    path = Path(workspace.path)
    assert workspace.carried
    assert (path / "notes.txt").read_text() == "mine, uncommitted\n"
    assert (path / "new.txt").read_text() == "untracked\n" and (path / "loose.txt").read_text() == "not added\n"
    assert not (path / "build.log").exists()  # ignored files are not carried
    assert git(path, "rev-parse", "HEAD") == workspace.base  # uncommitted in the child too
    assert "M notes.txt" in git(path, "status", "--porcelain")
    assert snapshot(repo) == before


def test_not_a_repository_refuses_not_a_repo(pm, tmp_path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    made = make(pm, plain, "kid", tmp_path)
    assert made.workspace is None and made.refusal.code == "not_a_repo"
    assert 'workspace "shared"' in made.refusal.message


def test_a_repository_with_no_commit_refuses_workspace_failed(pm, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    made = make(pm, empty, "kid", tmp_path)
    assert made.refusal.code == "workspace_failed" and "no commit yet" in made.refusal.message


def test_a_branch_or_a_folder_taken_refuses_workspace_taken(pm, repo, tmp_path) -> None:
    git(repo, "branch", "roost/kid")
    made = make(pm, repo, "kid", tmp_path)
    assert made.refusal.code == "workspace_taken" and "git branch -D roost/kid" in made.refusal.message
    first = make(pm, repo, "other", tmp_path).workspace
    git(repo, "branch", "-m", "roost/other", "roost/renamed")  # the folder stays, its branch is free
    made = make(pm, repo, "other", tmp_path)
    assert made.refusal.code == "workspace_taken" and first.path in made.refusal.message


def test_a_detached_head_is_the_base_and_said(pm, repo, tmp_path) -> None:
    git(repo, "checkout", "-q", "--detach", "HEAD")
    workspace = make(pm, repo, "kid", tmp_path).workspace
    assert workspace.base == git(repo, "rev-parse", "HEAD")
    assert any("detached" in note for note in workspace.notes)


def test_a_submodule_is_its_own_repository_and_submodules_are_not_checked_out(pm, repo, tmp_path) -> None:
    library = new_repo(tmp_path / "library")
    subprocess.run(["git", "-C", str(repo), "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib"], check=True, capture_output=True)
    git(repo, "commit", "-qm", "add lib")
    inside = make(pm, repo / "lib", "in-sub", tmp_path).workspace
    assert git(Path(inside.path), "rev-parse", "HEAD") == git(library, "rev-parse", "HEAD")
    assert any("submodule of" in note for note in inside.notes)
    outer = make(pm, repo, "outer", tmp_path).workspace
    assert any("submodules are not checked out" in note for note in outer.notes)
    assert not any(Path(outer.path, "lib").iterdir())


def commit_in(workspace: Workspace, text: str) -> None:
    path = Path(workspace.path)
    (path / "notes.txt").write_text(text)
    git(path, "commit", "-qam", f"write {text.strip()}")


def test_describe_gives_commits_unmerged_diffstat_and_uncommitted(pm, repo, tmp_path) -> None:
    workspace = make(pm, repo, "kid", tmp_path).workspace
    fresh = pm.hook.roost_describe_workspace(workspace=workspace)
    assert isinstance(fresh, WorkspaceState) and not fresh.holds_work and fresh.commit_count == 0
    commit_in(workspace, "two\n")
    (Path(workspace.path) / "scratch.txt").write_text("x")
    state = pm.hook.roost_describe_workspace(workspace=workspace)
    assert state.commit_count == 1 and state.unmerged == 1 and state.commits[0].subject == "write two"
    assert "notes.txt | 2 +-" in state.diffstat and state.diffstat.splitlines()[-1].startswith("1 file changed")
    assert state.uncommitted == ("?? scratch.txt",)
    git(repo, "merge", "-q", workspace.branch)
    assert pm.hook.roost_describe_workspace(workspace=workspace).unmerged == 0


def test_describe_answers_only_for_git(pm) -> None:
    assert pm.hook.roost_describe_workspace(workspace=make_workspace(vcs="jj")) is None
    assert pm.hook.roost_remove_workspace(workspace=make_workspace(vcs="jj"), force=True) is None


def test_remove_takes_a_clean_worktree_and_a_branch_with_nothing_new(pm, repo, tmp_path) -> None:
    workspace = make(pm, repo, "kid", tmp_path).workspace
    removal = pm.hook.roost_remove_workspace(workspace=workspace, force=False)
    assert removal == WorkspaceRemoval(removed=True, branch_deleted=True, tip=workspace.base, kept=None)
    assert not Path(workspace.path).exists() and not git(repo, "branch", "--list", "roost/*")


def test_remove_without_force_keeps_work_and_with_force_drops_it(pm, repo, tmp_path) -> None:
    workspace = make(pm, repo, "kid", tmp_path).workspace
    commit_in(workspace, "two\n")
    (Path(workspace.path) / "notes.txt").write_text("three\n")
    kept = pm.hook.roost_remove_workspace(workspace=workspace, force=False)
    assert not kept.removed and not kept.branch_deleted and "uncommitted" in kept.kept
    git(Path(workspace.path), "checkout", "--", "notes.txt")
    kept = pm.hook.roost_remove_workspace(workspace=workspace, force=False)
    assert kept.removed and not kept.branch_deleted and "no other branch holds" in kept.kept  # the commit stays on its branch
    assert git(repo, "branch", "--list", "roost/kid")
    workspace = make(pm, repo, "kid2", tmp_path).workspace
    commit_in(workspace, "four\n")
    tip = git(Path(workspace.path), "rev-parse", "HEAD")
    dropped = pm.hook.roost_remove_workspace(workspace=workspace, force=True)
    assert dropped.removed and dropped.branch_deleted and dropped.tip == tip
    assert not git(repo, "branch", "--list", "roost/kid2")


def test_a_name_becomes_a_branch_git_takes() -> None:
    from roost_plugins.workspace.git import branch_slug

    assert branch_slug("fix the bug!") == "fix-the-bug"
    assert branch_slug("..a..b.lock") == "a.b"
    assert branch_slug("日本") == "child"


def test_a_report_kept_on_its_child_keeps_its_workspace_through_json(pm, repo, tmp_path) -> None:
    import json

    from roost_core.daemon.handback import kept_report
    from roost_core.records import Report
    from roost_core.testing import make_child

    workspace = make(pm, repo, "kid", tmp_path).workspace
    commit_in(workspace, "two\n")
    report = Report(child=make_child(), state="done", result="ok", workspace=pm.hook.roost_describe_workspace(workspace=workspace))
    stored = json.loads(json.dumps(kept_report(report)))  # as the job record holds it
    assert Report(child=report.child, **stored) == report
