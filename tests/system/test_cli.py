"""The ``roost`` command line, run as real subprocesses against a real daemon."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from clikit import CLI, Cli, stop_live_jobs
from conftest import BLOCKED_BY_DEFAULT, wait_until

ASK_THEN_FINISH = """
[[run]]
steps = [
  { say = "Looking at {input}" },
  { shell = "echo tool-ran" },
  { ask = "Which branch?" },
]

[[run]]
steps = [{ say = "Merged into {input}." }]

[default]
steps = [{ say = "ok: {input}" }]
"""


@pytest.fixture
def cli(daemon, tmp_path):
    """A CLI runner; at teardown every live job is stopped so its worker exits cleanly."""
    run = Cli(daemon.env, tmp_path)
    yield run
    if daemon.process.poll() is not None:
        return  # the test stopped the daemon itself
    stop_live_jobs(daemon)


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "ask.toml"
    path.write_text(ASK_THEN_FINISH)
    return path


@pytest.mark.smoke
def test_start_wait_reply_log_through_the_cli(cli, scenario_file):
    started = cli.json("start", "fix the bug", "--name", "fixer", "--host", "scripted", "--scenario", str(scenario_file))
    job = started["id"]
    assert started["name"] == "fixer"

    assert cli("wait", "fixer", "--state", "needs_input").stdout.strip() == f"{job}: needs_input"
    rows = cli.json("jobs")
    assert [(r["id"], r["state"], r["question"]) for r in rows] == [(job, "needs_input", "Which branch?")]
    table = cli("jobs").stdout
    assert re.search(rf"^{job}\s+needs_input\s+live\s+scripted\s+fixer\s+Which branch\?$", table, re.M), table

    reply = cli("reply", job, "main").stdout.strip()
    assert re.fullmatch(rf"{job}: reply is item 2 of the job's queue \(its seq\); (delivered to its running worker|queued; .*|a worker was started for it)", reply), reply
    row = cli.json("wait", job)
    assert row["state"] == "done"
    assert row["summary"] == "Merged into main."

    text = cli("log", job).stdout
    assert "› you: fix the bug" in text
    assert "assistant: Looking at fix the bug" in text
    assert "⚙ bash(" in text and "↳ bash: tool-ran" in text
    assert "› you: main" in text
    assert "assistant: Merged into main." in text
    log = cli.json("log", "fixer")
    entries = log["entries"]
    assert log["sent"] == [] and log["session"].endswith(".jsonl")
    assert entries[0]["type"] == "session"
    assert any(e.get("type") == "message" and e["message"]["role"] == "assistant" for e in entries)


def test_start_default_scenario_says_what_happened(cli):
    out = cli("start", "say hello", "--host", "scripted").stdout
    first = out.splitlines()[0]
    job = re.fullmatch(r"started job ([0-9a-f]{8}) \(say hello\) on host scripted; it runs in the background", first)[1]
    assert out.splitlines()[1:] == ["  follow it:   roost log 'say hello' --follow", "  wait for it: roost wait 'say hello'"]
    assert cli.json("wait", "say hello")["state"] == "done"
    assert "assistant: Done: say hello" in cli("log", job).stdout


def test_wait_timeout_then_stop_and_rm(cli, tmp_path):
    gate = tmp_path / "never"
    scenario = f'[[run]]\nsteps = [{{ wait_for = "{gate}" }}]\n'
    job = cli.json("start", "hang", "--host", "scripted", "--scenario", scenario)["id"]

    timed_out = cli("wait", job, "--timeout", "0.3", expect=124)
    assert timed_out.stderr.startswith(f"roost: timeout: job {job} (hang) still running after 0.3s"), timed_out.stderr

    assert cli("stop", job).stdout.strip() == f"{job}: stopped (was running)"
    assert cli("wait", job).stdout.strip() == f"{job}: stopped"
    assert cli("rm", job).stdout.strip() == f"{job}: removed"
    assert cli.json("jobs") == []
    assert cli("jobs").stdout.strip() == "no jobs"


def test_stop_and_rm_json(cli):
    job = cli.json("start", "quick", "--host", "scripted")["id"]
    cli("wait", job)
    stopped = cli.json("stop", job)
    assert stopped["state"] == "stopped"
    assert cli.json("rm", job)["removed"] is True


def test_shell_host_job(cli):
    job = cli.json("start", "echo from-the-cli", "--host", "shell")["id"]
    row = cli.json("wait", job, "--state", "done")
    assert row["host"] == "shell"
    assert row["summary"] == "from-the-cli"
    assert "↳ bash: from-the-cli" in cli("log", job).stdout


def test_a_reply_to_a_stopped_shell_job_runs_nothing_unless_restarted(cli, tmp_path):
    """Issue 39 point 13: a reply to a shell job is a further command; to a stopped one it
    ran as a command all the same. It is refused now (``job_stopped``, nothing queued, no
    worker), and runs only when the user restarts the job in so many words."""
    marker = tmp_path / "ran"
    job = cli.json("start", "echo first", "--host", "shell")["id"]
    cli("wait", job, "--state", "done")
    # Not stopped: a reply is the next command (the shell host's documented rule).
    cli("reply", job, "echo second")
    assert cli.json("wait", job, "--state", "done")["summary"] == "second"
    cli("stop", job)
    refused = cli("reply", job, f"touch {marker}", expect=1)
    assert refused.stderr.startswith("roost: job_stopped: ") and "--restart" in refused.stderr, refused.stderr
    row = next(r for r in cli.json("jobs") if r["id"] == job)
    assert (row["state"], row["pending"], row["live"]) == ("stopped", 0, False)
    assert str(marker) not in cli("log", job).stdout and not marker.exists()
    # The user restarts it explicitly: then the reply runs.
    assert cli.json("reply", job, f"touch {marker}", "--restart")["result"] == "started"
    cli("wait", job, "--state", "done")
    assert marker.exists()


def test_stop_keeps_a_failed_job_visibly_failed(cli):
    """Issue 39 point 13: ``roost stop`` on a failed job wrote ``stopped`` over ``failed``.
    The job is stopped (messages do not wake it) and says it had failed, and why."""
    job = cli.json("start", "echo nope >&2; exit 3", "--host", "shell")["id"]
    cli("wait", job, "--state", "failed")
    said = cli("stop", job).stdout.strip()
    assert said == f"{job}: stopped (was failed); it had failed (command exited 3), as roost jobs still shows"
    (row,) = cli.json("jobs")
    assert (row["state"], row["stoppedFrom"], row["error"]) == ("stopped", "failed", "command exited 3")
    line = cli("jobs").stdout.splitlines()[1]
    assert line.split()[1] == "stopped" and line.endswith("failed, then stopped: command exited 3"), line
    # A second stop changes nothing, and a restart clears the mark.
    assert cli.json("stop", job)["stoppedFrom"] == "failed"
    cli("reply", job, "echo fixed", "--restart")
    row = cli.json("wait", job, "--state", "done")
    assert row["stoppedFrom"] is None and row["error"] is None


def test_plugins_lists_the_defaults_and_blocked_ones(cli):
    text = cli("plugins").stdout
    names = [line.split()[0] for line in text.splitlines() if line.strip()]
    for name in ("reach", "limits", "envelope", "render", "tools"):
        assert name in names, text
    data = cli.json("plugins")
    assert {"reach", "limits", "envelope", "render", "tools"} <= {row["name"] for row in data["plugins"]}
    assert data["blocked"] == sorted(BLOCKED_BY_DEFAULT.split(","))

    # A running daemon's set is what is shown; the flag changes this command's own set
    # only, and that difference is named.
    flagged = cli("--disable-plugin", "envelope", "plugins").stdout
    table = flagged.split("\n\n")[0].splitlines()
    assert "envelope" in [line.split()[0] for line in table[1:]]
    assert "- the daemon runs 'envelope'; this command does not" in flagged
    data = json.loads(cli("--disable-plugin", "envelope", "plugins", "--json").stdout)
    assert data["blocked"] == sorted(BLOCKED_BY_DEFAULT.split(","))
    assert "envelope" in {row["name"] for row in data["plugins"]}
    assert [note.split(";")[0] for note in data["differs"]] == ["the daemon runs 'envelope'"]


def test_errors_exit_1_with_the_code_on_stderr(cli):
    for args in (("reply", "nosuchjob", "hi"), ("stop", "nosuchjob"), ("rm", "nosuchjob"), ("log", "nosuchjob"), ("wait", "nosuchjob")):
        result = cli(*args, expect=1)
        assert "not_found" in result.stderr, (args, result.stderr)
        assert result.stdout == ""
    empty = cli("start", " ", expect=1)
    assert "bad_args" in empty.stderr
    host = cli("start", "x", "--host", "nosuchhost", expect=1)
    assert "unknown host" in host.stderr


def test_daemon_status_and_stop(cli, daemon):
    status = cli("daemon", "status").stdout
    assert status.startswith(f"running: pid {daemon.process.pid},")
    data = cli.json("daemon", "status")
    assert data["running"] is True and data["pid"] == daemon.process.pid
    assert cli("daemon", "stop").stdout.strip() == "stopped"
    assert daemon.process.wait(10) == 0
    assert cli("daemon", "status", expect=1).stdout.strip() == "not running"
    assert cli.json("daemon", "stop") == {"running": False}


def test_the_cli_starts_the_daemon_when_none_runs(roost_env, tmp_path):
    run = Cli(roost_env, tmp_path)
    try:
        assert run("daemon", "status", expect=1).stdout.strip() == "not running"
        assert run("jobs").stdout.strip() == "no jobs"
        assert run("daemon", "status").stdout.startswith("running: pid ")
    finally:
        run("daemon", "stop", expect=None)
    assert run("daemon", "status", expect=1).stdout.strip() == "not running"


def test_roost_demo_runs_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if not (k.startswith("ROOST_") and k != "ROOST_PLATFORM") and k != "PI_JOB_TOKEN"}
    # The default plugin set, whatever is installed beside roost for other tests.
    env["ROOST_DISABLE_PLUGINS"] = BLOCKED_BY_DEFAULT
    result = subprocess.run([*CLI, "demo"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (result.stdout, result.stderr)
    out = result.stdout
    assert "note:" not in out and "not a default" not in out
    # The lines `roost start` and `roost reply` print, the same in the demo.
    assert re.search(r"^started job [0-9a-f]{8} \(reviewer\) on host scripted; it runs in the background$", out, re.M), out
    assert "  follow it:   roost log reviewer --follow\n  wait for it: roost wait reviewer\n" in out
    assert re.search(r"^[0-9a-f]{8}: reply is item 2 of the job's queue \(its seq\); ", out, re.M), out
    assert out.index("ID        STATE") < out.index("== 3. the user replies")
    assert "› you: review the login module" in out
    assert "assistant: check_password compares hashes with ==" in out
    assert "⚙ bash(" in out
    assert "› you: yes, switch it to hmac.compare_digest" in out
    assert "assistant: Review done:" in out
    assert "↳ bash: hello from a shell job" in out
    assert re.search(r"^[0-9a-f]{8}\s+done\s+.*reviewer", out, re.M), out
    home = re.search(r"a throwaway home at (\S+)", out)[1]
    assert not Path(home).exists()


def test_log_takes_a_foreground_peers_id_and_says_when_it_has_no_transcript(cli, daemon, tmp_path):
    """Issue 54 point 4: a thread shows from both ends. ``roost log`` of a foreground
    peer's id renders its session file (here the lead's, holding its child's report), and
    a peer that registered with no session file is a clear ``no_session``."""
    import anyio
    from fg import in_thread, session, spawn
    from reliability.kit import Raw

    from roost_core.transcript import read_entries

    async def story() -> tuple[str, str]:
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "say hello", "kid", scenario={"default": {"steps": [{"say": "hello from the kid"}]}})
            await lead.wait_for_delivery(1, timeout=60)
            await in_thread(wait_until, lambda: any(e.get("type") == "custom_message" for e in read_entries(tmp_path / "lead.jsonl")), 30, what="the report in the lead's file")
            shown = await in_thread(cli, "log", lead.peer_id)
            as_json = json.loads((await in_thread(cli, "log", lead.peer_id, "--json")).stdout)
            assert as_json["id"] == lead.peer_id and as_json["session"] == str(tmp_path / "lead.jsonl")
            assert [r["sender"] for r in as_json["received"]] == [kid]
            return lead.peer_id, shown.stdout

    _peer_id, text = anyio.run(story)
    assert "report from kid" in text and "hello from the kid" in text, text
    with Raw(daemon.paths.socket) as bare:
        registered = bare.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "no-file"})
        assert registered["ok"], registered
        failed = cli("log", registered["result"]["id"], expect=1)
    assert failed.stderr.startswith("roost: no_session: ") and "no session file" in failed.stderr, failed.stderr
    assert cli("log", "f0000000", expect=1).stderr.startswith("roost: not_found: ")
