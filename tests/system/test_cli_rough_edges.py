"""The CLI's rough edges a user met (issue 49, points B4, B5, B7, B8, B14), run as a user
runs it: the real ``roost`` in a subprocess with a temp ``ROOST_HOME``, a real daemon,
real workers.

- a closed stdout (``roost jobs | true``) is not a dead daemon: quiet, exit 141;
- Ctrl-C in ``roost log --follow`` is ``roost: interrupted`` and 130, as everywhere;
- ``roost view`` and ``roost agents`` say why a job failed, as ``roost jobs`` does;
  ``roost log`` of a job whose transcript is empty shows its task, and a failed job's log
  ends with its error;
- ``roost answer`` on a job asking a plain question points to ``roost reply``;
- ``roost -V``; a bad ``--state`` is a usage error (2); completion offers job ids and
  names (from a running daemon; nothing, and no daemon started, when none runs); a
  missing ``ROOST_HOME`` is made and said once; a name's leading spaces stay in
  ``roost jobs``; ``roost plugins --json`` gives the daemon's pid as documented.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clikit import CLI, Cli, stop_live_jobs

from roost_core import __version__

GATE_SCENARIO = '[[run]]\nsteps = [{{ wait_for = "{gate}" }}]\n'
ASK = '[[run]]\nsteps = [{ ask = "Which branch?" }]\n'
FAIL = '[[run]]\nsteps = [{ fail = "the model endpoint is down" }]\n'


@pytest.fixture
def cli(daemon, tmp_path):
    run = Cli(daemon.env, tmp_path)
    yield run
    if daemon.process.poll() is None:
        stop_live_jobs(daemon)


# ---------------------------------------------------------------------------- B4: a closed stdout


def test_a_closed_stdout_ends_quietly_with_141_not_as_a_dead_daemon(cli, daemon, tmp_path):
    job = cli.json("start", "quick", "--host", "scripted")["id"]
    daemon.wait_job(job, "done")
    for args in (["jobs", "--json"], ["jobs"], ["log", job]):
        # `roost jobs --json | true`, with the reader gone before roost writes (no race).
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run([*CLI, *args], env=daemon.env, cwd=tmp_path, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
        finally:
            os.close(write_end)
        assert (result.returncode, result.stderr) == (141, ""), (args, result.returncode, result.stderr)
    assert daemon.process.poll() is None  # the daemon was never the problem


# ------------------------------------------------------------------ B5: Ctrl-C in log --follow


def test_ctrl_c_in_log_follow_is_interrupted_and_exit_130(cli, tmp_path):
    gate = tmp_path / "never"
    job = cli.json("start", "hang here", "--host", "scripted", "--scenario", GATE_SCENARIO.format(gate=gate))["id"]
    follow = subprocess.Popen([*CLI, "log", job, "--follow"], env=cli.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # It printed the task: it is following, inside the command.
        assert follow.stdout.readline() == "› you: hang here\n"
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=30)
    finally:
        follow.kill()
    assert (follow.returncode, err) == (130, "roost: interrupted\n"), (follow.returncode, out, err)
    cli("stop", job)


# ---------------------------------------------------------------------------- B7: why a job failed


def test_view_and_agents_say_why_a_job_failed_as_jobs_does(cli, tmp_path):
    job = cli.json("start", "deploy", "--name", "deployer", "--host", "scripted", "--scenario", FAIL)["id"]
    cli("wait", job, "--state", "failed")
    assert cli("jobs").stdout.splitlines()[1].endswith("the model endpoint is down")
    view = cli("view", "--once").stdout
    line = next(line for line in view.splitlines() if f"({job})" in line)
    assert line.endswith("— failed: the model endpoint is down"), view
    agents = cli("agents").stdout
    line = next(line for line in agents.splitlines() if f"({job})" in line)
    assert "failed: the model endpoint is down" in line, agents
    row = next(row for row in cli.json("agents") if row["id"] == job)
    assert (row["state"], row["error"]) == ("failed", "the model endpoint is down")


def test_log_of_a_failed_job_ends_with_its_error(cli):
    job = cli.json("start", "deploy", "--host", "scripted", "--scenario", FAIL)["id"]
    cli("wait", job, "--state", "failed")
    lines = cli("log", job).stdout.splitlines()
    assert lines[0] == "› you: deploy"
    assert lines[-1] == "✗ failed: the model endpoint is down"


def test_log_of_a_job_with_no_transcript_yet_shows_its_task_and_error(cli, daemon):
    """A job whose agent failed before it wrote anything (pi before its first model
    answer): the transcript is empty, so the log shows the task from the job record."""
    job = cli.json("start", "summarise the repo", "--host", "scripted", "--scenario", FAIL)["id"]
    cli("wait", job, "--state", "failed")
    session = Path(cli.json("jobs")[0]["session"])
    session.write_text("")  # as a host that wrote nothing leaves it
    assert cli("log", job).stdout == "› you: summarise the repo\n✗ failed: the model endpoint is down\n"


# ------------------------------------------------------------ B8: answer on a plain question


def test_answer_on_a_plain_question_points_to_reply(cli):
    job = cli.json("start", "fix it", "--host", "scripted", "--scenario", ASK)["id"]
    cli("wait", job, "--state", "needs_input")
    for args in ((), ("main",)):
        result = cli("answer", job, *args, expect=1)
        assert result.stderr == (
            f"roost: no_dialog: job {job} (fix it) has no dialog open: nothing to answer; it asks a plain question, "
            f"which a reply answers: roost reply {job} TEXT\n"
        ), result.stderr


# ---------------------------------------------------------------------------- B14: smaller


def test_dash_capital_v_is_the_version(roost_env, tmp_path):
    assert Cli(roost_env, tmp_path)("-V").stdout == f"roost {__version__}\n"


def test_a_bad_state_is_a_usage_error(cli):
    job = cli.json("start", "quick", "--host", "scripted")["id"]
    result = cli("wait", job, "--state", "finished", expect=2)
    assert result.stderr == "roost: bad_args: 'finished' is not a job state (one of: running, idle, needs_input, done, failed, stopped)\n"


def complete(env: dict[str, str], script: Path, line: str) -> list[str]:
    """What bash completes for ``line`` (each completion as bash would insert it), with
    the script loaded and ``roost`` on PATH."""
    program = (
        'source "$1"; read -ra COMP_WORDS <<< "$2"; [[ "$2" == *" " ]] && COMP_WORDS+=(""); '
        'COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _roost_complete; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(["bash", "-c", program, "bash", str(script), line], env=env, capture_output=True, text=True, timeout=60, check=True)
    return [line for line in result.stdout.splitlines() if line]


def with_roost_on_path(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    roost = folder / "roost"
    roost.write_text(f'#!/bin/sh\nexec {sys.executable} -m roost_core.cli "$@"\n')
    roost.chmod(0o755)
    return {**env, "PATH": os.pathsep.join([str(folder), env.get("PATH", "/usr/bin:/bin")])}


def test_completion_offers_job_ids_and_names_from_a_running_daemon(cli, daemon, tmp_path):
    env = with_roost_on_path(daemon.env, tmp_path)
    script = tmp_path / "roost.bash"
    script.write_text(cli("completion", "bash").stdout)
    fixer = cli.json("start", "quick", "--host", "scripted", "--name", "fixer")["id"]
    spaced = cli.json("start", "quick", "--host", "scripted", "--name", "fix two")["id"]
    # A name that is shell code: offered quoted, never run in the user's shell.
    marker = tmp_path / "ran"
    evil = cli.json("start", "quick", "--host", "scripted", "--name", f"f$(touch {marker})")["id"]
    for job in (fixer, spaced, evil):
        daemon.wait_job(job, "done")
    assert complete(env, script, "roost log fi") == ["fixer", "fix\\ two"]
    assert sorted(complete(env, script, "roost wait ")) == sorted([fixer, spaced, evil, "fixer", "fix\\ two", f"f\\$\\(touch\\ {marker}\\)"])
    assert complete(env, script, f"roost reply {fixer[:-1]}") == [fixer]
    assert complete(env, script, "roost view --select fix") == ["fixer", "fix\\ two"]
    assert complete(env, script, "roost reply fixer ") == []  # the reply's text is free
    assert not marker.exists()


def test_completion_of_a_job_with_no_daemon_is_nothing_and_starts_none(roost_env, tmp_path):
    env = with_roost_on_path(roost_env, tmp_path)
    script = tmp_path / "roost.bash"
    script.write_text(Cli(roost_env, tmp_path)("completion", "bash").stdout)
    assert complete(env, script, "roost log ") == []
    home = Path(roost_env["ROOST_HOME"])
    assert not (home / "roost.sock").exists() and not (home / "state").exists()
    missing = {**env, "ROOST_HOME": str(tmp_path / "no-such-home")}
    assert complete(missing, script, "roost log ") == []
    assert not (tmp_path / "no-such-home").exists()


def test_a_missing_roost_home_is_made_and_said_once(roost_env, tmp_path):
    home = tmp_path / "typo" / "home"
    run = Cli({**roost_env, "ROOST_HOME": str(home)}, tmp_path)
    first = run("daemon", "status", expect=1)
    assert first.stderr == f"roost: note: ROOST_HOME={str(home)!r} did not exist; made it\n", first.stderr
    assert home.is_dir() and (home.stat().st_mode & 0o777) == 0o700
    assert run("daemon", "status", expect=1).stderr == ""


def test_jobs_keeps_a_names_leading_spaces(cli, daemon):
    job = cli.json("start", "quick", "--host", "scripted", "--name", "  indented")["id"]
    daemon.wait_job(job, "done")
    line = cli("jobs").stdout.splitlines()[1]
    assert re.search(rf"^{job}\s+done\s+\S+\s+scripted  {'  indented'}\s", line), line


def test_plugins_json_gives_the_daemons_pid_as_documented(cli, daemon):
    assert cli.json("plugins")["daemon"] == daemon.process.pid
    doc = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
    assert "`daemon` is its pid, or null" in " ".join(doc.split())
    stopped = json.loads(cli("daemon", "stop", "--json").stdout)
    assert stopped["stopped"] is True
    daemon.process.wait(30)
    assert cli.json("plugins")["daemon"] is None


def test_roost_spawn_with_a_host_when_none_may_be_chosen_says_why(daemon, tmp_path):
    """``host`` is in ``roost_spawn``'s schema only when ``agentSpawnHosts`` allows one: a
    caller that gives it anyway is told which hosts may be asked for and why not, not
    ``unknown field 'host'``."""
    from fg import run_async, session

    async def main() -> tuple[bool, str, dict]:
        async with session(daemon, tmp_path) as lead:
            return await lead.call_tool("roost_spawn", {"task": "review it", "name": "child", "host": "shell"})

    ok, text, _ = run_async(main)
    assert not ok
    assert text == (
        "error (bad_args): roost_spawn: field 'host' is not offered here: no host may be asked for: the user config's "
        "agentSpawnHosts names none (a child runs on your own host); leave 'host' out and the child runs on yours"
    ), text
    assert daemon.call("jobs")["jobs"] == []
