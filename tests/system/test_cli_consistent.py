"""One consistent ``roost`` command line (issue 12, point 4), each point through the real
command in a subprocess against a real daemon: one name resolution for every command,
``wait --state`` checked at once, every error as ``roost: CODE: message``, names that stay
usable, what ``start`` and ``reply`` say, the ``jobs`` table and ``view --once``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clikit import Cli, stop_live_jobs
from conftest import agent_items, wait_until

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}
#: Every error line: ``roost: CODE: message``, the code in lower case with underscores.
ERROR_LINE = re.compile(r"roost: [a-z_]+: \S.*")


@pytest.fixture
def cli(daemon, tmp_path):
    run = Cli(daemon.env, tmp_path)
    yield run
    stop_live_jobs(daemon)


def error_of(result: subprocess.CompletedProcess, status: int = 1) -> str:
    """The one line a failed command printed: ``roost: CODE: message`` (exit status 1,
    124 for a timeout)."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and ERROR_LINE.fullmatch(lines[0]), result.stderr
    return lines[0]


def twins(daemon) -> tuple[str, list[str]]:
    """A lead that spawned two children, then both named ``kid``: no way of naming a job
    lets two share a name now (issue 39 point 6), so the second is renamed in its record
    while the daemon is down, as a record from before that rule would be. Returns the
    lead's id and the kids' ids, all settled."""
    scenario = {
        "run": [{"steps": [{"spawn": {"task": "one", "name": "kid", "model": "quick"}}, {"spawn": {"task": "two", "name": "kid two", "model": "quick"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {"quick": QUIET},
    }
    lead = daemon.start_job("delegate", name="lead", scenario=scenario)
    kids = wait_until(lambda: (ids := sorted(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] in ("kid", "kid two"))) and len(ids) == 2 and ids, what="two kids")
    for kid in kids:
        daemon.wait_job(kid)

    def lead_heard_both() -> bool:
        reports = [e for e in agent_items(daemon.entries(lead)) if e["details"]["kind"] == "report"]
        row = daemon.job(lead)
        return len(reports) == 2 and row["state"] == "done" and row["pending"] == 0

    # Settled for good: both reports are in the lead's transcript and it answered them.
    wait_until(lead_heard_both, what="the lead to note both reports")
    assert daemon.terminate() == 0
    second = next(kid for kid in kids if daemon.record(kid)["name"] == "kid two")
    record = daemon.record(second)
    record["name"] = "kid"
    (daemon.paths.jobs_dir / f"{second}.json").write_text(json.dumps(record))
    daemon.restart()
    return lead, kids


def test_every_command_resolves_a_name_the_same_way(cli, daemon):
    lead, kids = twins(daemon)
    # A unique name: every command finds the same job.
    assert cli("wait", "lead").stdout.strip() == f"{lead}: done"
    assert cli.json("log", "lead")["id"] == lead
    assert cli("reply", "lead", "carry on").stdout.startswith(f"{lead}: reply is item ")
    assert cli.json("wait", "lead")["id"] == lead
    assert cli("stop", "lead").stdout.strip().startswith(f"{lead}: stopped")
    assert cli("rm", "lead").stdout.strip() == f"{lead}: removed"
    # A name two jobs have: every command says so, in the same words, and names both.
    ambiguous = {error_of(cli(*args, expect=None)) for args in (("wait", "kid"), ("log", "kid"), ("reply", "kid", "hi"), ("stop", "kid"), ("rm", "kid"))}
    assert ambiguous == {f"roost: ambiguous: several jobs are named 'kid' ({kids[0]}, {kids[1]}); use an id"}
    # No such job: the same not_found everywhere.
    missing = {error_of(cli(*args, expect=None)) for args in (("wait", "nosuch"), ("log", "nosuch"), ("reply", "nosuch", "hi"), ("stop", "nosuch"), ("rm", "nosuch"))}
    assert missing == {"roost: not_found: no job with id or exact name 'nosuch'"}
    # Nothing was queued, stopped or removed by the refused commands.
    rows = {row["id"]: row for row in cli.json("jobs")}
    assert set(rows) == set(kids) and all(rows[kid]["state"] == "done" for kid in kids)
    # The view's --select takes the same rule, over the agents it shows.
    assert error_of(cli("view", "--once", "--select", "kid", expect=None)) == f"roost: ambiguous: several agents are named 'kid' ({kids[0]}, {kids[1]}); use an id"
    assert f"kid ({kids[0]})" in cli("view", "--once", "--select", kids[0]).stdout


def test_wait_refuses_an_unknown_state_before_it_waits(roost_env, tmp_path):
    run = Cli(roost_env, tmp_path)
    line = error_of(run("wait", "anyjob", "--state", "done", "--state", "bogus", expect=None), status=2)
    assert line == "roost: bad_args: 'bogus' is not a job state (one of: running, idle, needs_input, done, failed, stopped)"
    # Refused before it asked the daemon anything: none was started for it.
    home = Path(roost_env["ROOST_HOME"])
    assert not list(home.rglob("*.sock")) and not list(home.rglob("daemon.pid"))


def test_every_error_reads_roost_code_message(cli, daemon, tmp_path):
    unknown = error_of(cli("start", "x", "--host", "scripted", "--scenario", "nosuch", expect=None))
    assert unknown == "roost: bad_args: no scenario 'nosuch': not a file, and not a bundled scenario (bundled: demo-review, demo-team)"
    gate = tmp_path / "never"
    job = cli.json("start", "hang", "--host", "scripted", "--scenario", f'[[run]]\nsteps = [{{ wait_for = "{gate}" }}]\n')["id"]
    timeout = error_of(cli("wait", job, "--timeout", "0.2", expect=None), 124)
    assert timeout.startswith(f"roost: timeout: job {job} (hang) still running after 0.2s")
    assert error_of(cli("start", "x", "--host", "nosuchhost", expect=None)).startswith("roost: bad_args: start: unknown host 'nosuchhost'")
    assert error_of(cli("start", " ", "--host", "scripted", expect=None)) == "roost: bad_args: start: task is empty"
    # A config the CLI cannot read.
    config = Path(daemon.env["ROOST_HOME"]) / "roost.json"
    config.write_text("{not json")
    assert error_of(cli("plugins", expect=None)).startswith(f"roost: bad_config: {config}: ")
    config.unlink()
    # argparse's own errors come in the same shape, after the usage (exit status 2).
    usage = cli("wait", expect=2)
    assert usage.stderr.splitlines()[0].startswith("usage: roost wait")
    assert usage.stderr.splitlines()[-1] == "roost: bad_args: the following arguments are required: id"


def test_a_job_name_stays_usable(cli):
    first = cli.json("start", "first", "--name", "a", "--host", "scripted", "--scenario", json.dumps(QUIET))["id"]
    cli("wait", "a")
    # A finished job keeps its name: a second "a" would make `a` mean nothing.
    taken = error_of(cli("start", "second", "--name", "a", "--host", "scripted", expect=None))
    assert taken == f"roost: name_taken: 'a' is already the name of job {first} (done); choose another name (such as 'a-2'), leave the name out, or remove that job first (roost rm {first})"
    assert [row["name"] for row in cli.json("jobs")] == ["a"]
    assert cli.json("wait", "a")["id"] == first
    # Nor may a name be another job's id (the id would always win).
    assert error_of(cli("start", "third", "--name", first, "--host", "scripted", expect=None)).startswith(f"roost: name_taken: '{first}' is already the id of job {first}")
    # Once the job is removed its name is free again.
    cli("rm", "a")
    again = cli.json("start", "second", "--name", "a", "--host", "scripted", "--scenario", json.dumps(QUIET))
    assert again["name"] == "a" and again["id"] != first
    # A name nobody chose (derived from the task) is made unique instead of refused.
    names = [cli.json("start", "same task", "--host", "scripted", "--scenario", json.dumps(QUIET))["name"] for _ in range(3)]
    assert names == ["same task", "same task-2", "same task-3"]
    assert cli("wait", "same task-2").stdout.endswith(": done\n")


def test_start_says_what_happened_and_how_to_follow(cli):
    out = cli("start", "tidy the docs", "--name", "tidy", "--host", "scripted", "--scenario", json.dumps(QUIET)).stdout
    job = re.match(r"started job ([0-9a-f]{8}) ", out)[1]
    assert out.splitlines() == [
        f"started job {job} (tidy) on host scripted; it runs in the background",
        "  follow it:   roost log tidy --follow",
        "  wait for it: roost wait tidy",
    ]
    # The commands it names work as printed.
    assert cli("wait", "tidy").stdout.strip() == f"{job}: done"
    assert cli.json("start", "json too", "--host", "scripted", "--scenario", json.dumps(QUIET)) == {"id": cli.json("jobs")[-1]["id"], "name": "json too", "host": "scripted", "workspace": None}


def test_jobs_table_has_a_header_cuts_at_words_and_finished_jobs_are_not_live(cli, daemon):
    long_name = "refactor the session store and its journal replay"
    summary = "Reviewed every module of the login flow and replaced the hash comparison with a constant time one"
    done = daemon.start_job("x", name=long_name, scenario={"default": {"steps": [{"say": summary}]}})
    daemon.wait_job(done, "done")
    asking = daemon.start_job("y", name="asker", scenario={"run": [{"steps": [{"ask": "Which branch?"}]}]})
    daemon.wait_job(asking, "needs_input")
    rows = {row["id"]: row for row in cli.json("jobs")}
    assert rows[done]["live"] is True  # its worker waits (until reaped) in case a reply comes
    table = Cli({**daemon.env, "COLUMNS": "100"}, cli.cwd)("jobs").stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "LIVE", "HOST", "NAME", "DETAIL"]
    line = {row_id: next(text for text in table if text.startswith(row_id)) for row_id in (done, asking)}
    assert line[done].split()[:4] == [done, "done", "-", "scripted"]
    assert line[asking].split()[:4] == [asking, "needs_input", "live", "scripted"]
    assert line[asking].endswith("  Which branch?")
    # Cut to the terminal, each cut text ending in … after a whole word.
    assert all(len(text) <= 100 for text in table)
    assert "refactor the session store…" in line[done]
    detail = line[done].split("  ")[-1]
    assert detail.endswith("…") and summary.startswith(detail[:-1]) and summary[len(detail) - 1] == " "


def test_reply_says_what_its_number_is(cli, daemon):
    job = daemon.start_job("ask", name="asker", scenario={"run": [{"steps": [{"ask": "Which branch?"}]}], "default": {"steps": [{"say": "ok: {input}"}]}})
    daemon.wait_job(job, "needs_input")
    text = cli("reply", "asker", "main").stdout.strip()
    assert re.fullmatch(rf"{job}: reply is item 2 of the job's queue \(its seq\); (delivered to its running worker|queued; its worker takes it when it connects|a worker was started for it)", text), text
    assert cli.json("reply", "asker", "again")["seq"] == 3


def test_view_once_shows_relations_only_from_a_selected_peer(cli, daemon):
    lead, kids = twins(daemon)
    plain = cli("view", "--once").stdout
    for word in ("self", "external", "parent", "child", "sibling"):
        assert not re.search(rf"  {word}  ", plain), plain
    assert re.search(rf"lead \({lead}\) \[scripted\]  done  queued 0  last ", plain), plain
    seen = cli("view", "--once", "--select", "lead").stdout
    assert re.search(rf"lead \({lead}\) \[scripted\]  done  self  queued 0", seen), seen
    assert re.search(rf"kid \({kids[0]}\) \[scripted\]  done  child  queued 0", seen), seen


def test_roost_view_module_has_the_same_error_boundary(daemon):
    result = subprocess.run([sys.executable, "-m", "roost_core.view", "--once", "--select", "nosuch"], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert error_of(result) == "roost: not_found: no agent with id or exact name 'nosuch'"
