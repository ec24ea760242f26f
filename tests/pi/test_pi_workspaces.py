"""Issue 51 part 2 on the pinned real pi with the fake model: one pi parent spawns four
children with ``workspace: "worktree"`` in one turn (four ``roost_spawn`` calls of one
run); each child's model edits the same file its own way with pi's bash tool and commits.
Four branches, four diffstats in four reports, the parent's checkout untouched; ``roost
rm`` refuses the unmerged work and ``--force`` drops it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import wait_until
from pikit import reports_to

from roost_plugins.envelope import parse_envelopes


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_four_pi_children_in_worktrees_report_branches_commits_and_diffstats(pi_kit, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "Tester")
    (repo / "notes.txt").write_text("one\ntwo\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "init")
    (repo / "mine.txt").write_text("the parent's own work, uncommitted\n")
    before = (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "notes.txt").read_text(), (repo / ".git" / "index").read_bytes())
    letters = "abcd"
    scenario = {
        "run": [{"match": "^delegate", "steps": [
            *({"spawn": {"task": f"write {x}", "name": f"kid-{x}", "model": x, "workspace": "worktree"}} for x in letters),
            {"say": "spawned four"},
        ]}],
        "default": {"steps": [{"say": "noted"}]},
        "models": {
            x: {"default": {"steps": [
                {"shell": f"printf 'one\\n{x}\\n' > notes.txt && git commit -qam 'kid-{x} writes {x}'"},
                {"say": f"wrote {x}"},
            ]}}
            for x in letters
        },
    }
    pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    lead = daemon.start_job("delegate the edits", host="pi", name="lead", cwd=str(repo))
    wait_until(lambda: len(reports_to(daemon, lead)) == 4, 180, what="four reports")
    bodies = {}
    for entry in reports_to(daemon, lead):
        (envelope,) = parse_envelopes(entry["content"])
        bodies[entry["details"]["fromName"]] = envelope["body"]
    rows = {row["name"]: row for row in daemon.call("jobs")["jobs"]}
    for x in letters:
        workspace = rows[f"kid-{x}"]["workspace"]
        assert workspace["branch"] == f"roost/kid-{x}" and workspace["base"] == before[0]
        body = bodies[f"kid-{x}"]
        sha = git(repo, "rev-parse", "--short", f"roost/kid-{x}")
        assert f"branch: roost/kid-{x} (base {before[0][:12]}, worktree {workspace['path']})" in body
        assert f"commits: 1 since the base\n  {sha} kid-{x} writes {x}" in body
        assert "diffstat:\n  notes.txt | 2 +-\n  1 file changed, 1 insertion(+), 1 deletion(-)" in body
        assert git(repo, "show", f"roost/kid-{x}:notes.txt") == f"one\n{x}"
    assert git(repo, "branch", "--list", "--format=%(refname:short)", "roost/*").split() == [f"roost/kid-{x}" for x in letters]
    assert (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "notes.txt").read_text(), (repo / ".git" / "index").read_bytes()) == before
    # roost rm: the unmerged work refuses it; --force drops it, saying where the branch was.
    daemon.wait_job(rows["kid-a"]["id"], timeout=90)
    refused = pi_kit.roost("rm", "kid-a", check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("roost: unmerged_work:")
    assert Path(rows["kid-a"]["workspace"]["path"]).is_dir()
    tip = git(repo, "rev-parse", "roost/kid-a")
    dropped = pi_kit.roost("rm", "kid-a", "--force").stdout
    assert f"branch roost/kid-a deleted (it was at {tip[:12]}" in dropped
    assert not Path(rows["kid-a"]["workspace"]["path"]).exists() and not git(repo, "branch", "--list", "roost/kid-a")
