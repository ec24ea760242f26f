"""A workspace of its own per child (issue 51): children spawned with ``workspace:
"worktree"`` work in git worktrees on branches of their own, report their branch, commits
and diffstat, and ``roost rm`` never drops their work unasked. Real daemon, real workers,
the scripted host running real git commands; the CLI, the ``spawn`` op and the
``roost_spawn`` tool."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clikit import Cli, stop_live_jobs
from conftest import agent_items, wait_until
from fg import in_thread, kill_worker, run_async, spawn

from roost_core.foreground import ForegroundSession
from roost_core.protocol import ProtocolError
from roost_plugins.envelope import parse_envelopes


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit, and an uncommitted change of the spawner's own."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "Tester")
    (path / "notes.txt").write_text("one\ntwo\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    (path / "mine.txt").write_text("the spawner's own work, uncommitted\n")
    return path


def checkout(repo: Path) -> tuple[str, str, str, bytes]:
    """The spawner's checkout as its user sees it: HEAD, status, the file, the index."""
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "notes.txt").read_text(), (repo / ".git" / "index").read_bytes()


def editor(letter: str) -> dict:
    """A child's scenario: write its own line into notes.txt and commit it."""
    command = f"printf 'one\\n{letter}\\n' > notes.txt && git commit -qam 'kid-{letter} writes {letter}'"
    return {"default": {"steps": [{"shell": command}, {"say": f"wrote {letter}"}]}}


def session(daemon, tmp_path: Path, cwd: Path) -> ForegroundSession:
    """A foreground parent working in ``cwd``."""
    return ForegroundSession(tmp_path / "lead.jsonl", name="lead", paths=daemon.paths, cwd=str(cwd))


def reports(entries) -> dict[str, str]:
    out = {}
    for entry in agent_items(entries):
        if entry["details"]["kind"] == "report":
            (envelope,) = parse_envelopes(entry["content"])
            out[entry["details"]["fromName"]] = envelope["body"]
    return out


@pytest.fixture
def cli(daemon, tmp_path):
    run = Cli(daemon.env, tmp_path)
    yield run
    stop_live_jobs(daemon)


@pytest.mark.smoke
def test_four_children_in_worktrees_report_four_branches_and_diffstats_and_the_parents_checkout_is_untouched(daemon, repo) -> None:
    before = checkout(repo)
    letters = "abcd"
    parent_scenario = {
        "run": [{"steps": [
            *({"spawn": {"task": f"write {x}", "name": f"kid-{x}", "model": x, "workspace": "worktree"}} for x in letters),
            {"say": "spawned four"},
        ]}],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {x: editor(x) for x in letters},
    }
    lead = daemon.start_job("delegate", scenario=parent_scenario, name="lead", cwd=str(repo))
    wait_until(lambda: len(reports(daemon.entries(lead))) == 4, timeout=120, what="four reports")
    got = reports(daemon.entries(lead))
    rows = {row["name"]: row for row in daemon.call("jobs")["jobs"]}
    base = before[0]
    for x in letters:
        kid = rows[f"kid-{x}"]
        workspace = kid["workspace"]
        assert workspace["branch"] == f"roost/kid-{x}" and workspace["base"] == base and kid["cwd"] == workspace["path"]
        body = got[f"kid-{x}"]
        assert f"branch: roost/kid-{x} (base {base[:12]}, worktree {workspace['path']})" in body
        sha = git(repo, "rev-parse", "--short", f"roost/kid-{x}")
        assert f"commits: 1 since the base\n  {sha} kid-{x} writes {x}" in body
        assert "diffstat:\n  notes.txt | 2 +-\n  1 file changed, 1 insertion(+), 1 deletion(-)" in body
        assert f"merge: git merge roost/kid-{x}" in body and body.endswith(f"wrote {x}")
        assert git(repo, "show", f"roost/kid-{x}:notes.txt") == f"one\n{x}"
    assert git(repo, "branch", "--list", "--format=%(refname:short)", "roost/*").split() == [f"roost/kid-{x}" for x in letters]
    assert len(git(repo, "worktree", "list").splitlines()) == 5
    assert checkout(repo) == before


def test_the_spawn_op_refuses_what_it_cannot_make_and_the_config_default_makes_worktrees(daemon, write_config, repo, tmp_path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    hold = {"default": {"steps": [{"say": "ok"}]}}

    async def story():
        async with session(daemon, tmp_path, plain) as lead:
            with pytest.raises(ProtocolError) as refused:
                await spawn(lead, "t", "kid", scenario=hold, workspace="worktree")
            assert refused.value.code == "not_a_repo"
            with pytest.raises(ProtocolError) as refused:
                await spawn(lead, "t", "kid", scenario=hold, base="carry")
            assert refused.value.code == "bad_args"
            git(repo, "branch", "roost/taken")
            with pytest.raises(ProtocolError) as refused:
                await spawn(lead, "t", "taken", scenario=hold, workspace="worktree", cwd=str(repo))
            assert refused.value.code == "workspace_taken" and "roost/taken" in refused.value.message
            made = await lead.call("spawn", task="t", name="carrier", scenario=hold, workspace="worktree", base="carry", cwd=str(repo))
            path = Path(made["workspace"]["path"])
            assert made["workspace"]["carried"] and (path / "mine.txt").is_file()
            # agentWorkspace: a spawn that does not say gets a worktree; the tool says where.
            write_config({"agentWorkspace": "worktree"})
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "t", "name": "by-default", "cwd": str(repo)})
            assert ok and "it works in the worktree" in text and "on branch roost/by-default" in text
            assert 'note: your 1 uncommitted change(s) are not in it' in text
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "t", "name": "shared-one", "cwd": str(repo), "workspace": "shared"})
            assert ok and "worktree" not in text
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "t", "name": "tool-carrier", "cwd": str(repo), "workspace": "worktree+carry"})
            assert ok and "were carried in" in text
        rows = {row["name"]: row for row in daemon.call("jobs")["jobs"]}
        assert rows["by-default"]["workspace"]["branch"] == "roost/by-default"
        assert rows["shared-one"]["workspace"] is None and rows["shared-one"]["cwd"] == str(repo)
        assert "kid" not in rows  # nothing was made for a refused spawn
        assert rows["tool-carrier"]["workspace"]["carried"] and Path(rows["tool-carrier"]["cwd"], "mine.txt").is_file()

    run_async(story)


def test_roost_rm_refuses_unmerged_work_and_keeps_or_drops_it_as_told(daemon, cli, repo, tmp_path) -> None:
    scenario = tmp_path / "edit.toml"
    scenario.write_text("[default]\nsteps = [{ shell = \"printf 'x\\\\n' >> notes.txt && git commit -qam 'edit notes'\" }, { say = \"edited\" }]\n")

    def started(name: str) -> dict:
        out = cli("start", "edit", "--host", "scripted", "--scenario", str(scenario), "--name", name, "--worktree", "--cwd", str(repo))
        assert f"on branch roost/{name}" in out.stdout
        # Said while the spawner has uncommitted changes of its own (until the stash below).
        assert ("base \"carry\" brings them" in out.stdout) == bool(git(repo, "status", "--porcelain"))
        cli("wait", name, "--state", "done")
        return {row["name"]: row for row in cli.json("jobs")}[name]["workspace"]

    one = started("one")
    assert "roost: bad_args:" in cli("rm", "one", "--force", "--keep-workspace", expect=1).stderr
    refused = cli("rm", "one", expect=1)
    assert "roost: unmerged_work:" in refused.stderr and "1 commit(s) on roost/one that no other branch holds" in refused.stderr
    assert "roost rm --keep-workspace" in refused.stderr and "roost rm --force" in refused.stderr and "git merge roost/one" in refused.stderr
    assert [row["name"] for row in cli.json("jobs")] == ["one"] and Path(one["path"]).is_dir()
    # Uncommitted changes refuse it too, after a merge.
    git(repo, "stash", "-q", "-u")
    git(repo, "merge", "-q", "roost/one")
    Path(one["path"], "scratch.txt").write_text("draft")
    refused = cli("rm", "one", expect=1)
    assert "1 uncommitted change(s) in" in refused.stderr
    Path(one["path"], "scratch.txt").unlink()
    removed = cli("rm", "one").stdout
    assert f"worktree {one['path']}: removed; branch roost/one deleted" in removed
    assert not Path(one["path"]).exists() and not git(repo, "branch", "--list", "roost/one")

    two = started("two")
    kept = cli.json("rm", "two", "--keep-workspace")
    assert kept["workspace"]["removed"] is False and Path(two["path"]).is_dir() and git(repo, "branch", "--list", "roost/two")
    three = started("three")
    tip = git(repo, "rev-parse", "roost/three")
    dropped = cli("rm", "three", "--force").stdout
    assert f"branch roost/three deleted (it was at {tip[:12]}: git branch roost/three {tip} brings it back)" in dropped
    assert not Path(three["path"]).exists() and not git(repo, "branch", "--list", "roost/three")
    assert cli("start", "x", "--host", "scripted", "--worktree", "--cwd", str(tmp_path), expect=1).stderr.startswith("roost: not_a_repo:")


def test_stop_and_a_crash_keep_the_worktree_and_the_parent_hears_what_it_holds(daemon, repo, tmp_path) -> None:
    gate = tmp_path / "gate"
    slow = {"default": {"steps": [{"shell": "echo more >> notes.txt && git commit -qam 'started'"}, {"wait_for": str(gate)}, {"say": "done"}]}}

    def committed(name: str) -> bool:
        return git(repo, "rev-list", "--count", f"main..roost/{name}") != "0"

    async def story():
        async with session(daemon, tmp_path, repo) as lead:
            kid = await spawn(lead, "t", "stopper", scenario=slow, workspace="worktree")
            crasher = await spawn(lead, "t", "crasher", scenario=slow, workspace="worktree")
            for name in ("stopper", "crasher"):
                await in_thread(wait_until, lambda name=name: committed(name), what=f"{name}'s commit")
            await in_thread(daemon.call, "stop", job=kid)
            await in_thread(kill_worker, daemon, crasher)
            await lead.wait_for_delivery(2, timeout=60)
            bodies = {d["fromName"]: parse_envelopes(d["content"])[0]["body"] for d in lead.delivered if d["kind"] == "report"}
            assert bodies["stopper"].startswith("state: ended (stopped by the user)") and "branch: roost/stopper" in bodies["stopper"]
            assert "commits: 1 since the base" in bodies["stopper"]
            assert "its worker" in bodies["crasher"] and "branch: roost/crasher" in bodies["crasher"]
            for job in (kid, crasher):
                assert Path(daemon.job(job)["workspace"]["path"]).is_dir()
            gate.write_text("go")

    run_async(story)
