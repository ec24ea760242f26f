"""Which host ``roost start`` picks when none is named (issue 13, point 4), through the
real ``roost`` command: the config's ``defaultHost``; else pi when the daemon finds it
(the pinned real pi on PATH, against the fake model); else a refusal that names
``--host scripted``. A pi user never gets the scripted stand-in by accident."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import wait_until


def roost(env: dict[str, str], *args: str, cwd: Path, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == expect, (args, result.returncode, result.stdout, result.stderr)
    return result


def started_job(result: subprocess.CompletedProcess, host: str) -> str:
    match = re.match(rf"started job ([0-9a-f]{{8}}) \(.*\) on host {host}; it runs in the background\n", result.stdout)
    assert match, result.stdout
    return match[1]


def test_start_runs_on_pi_when_pi_is_on_path(pi_kit, tmp_path):
    fake = pi_kit.fake({"default": {"steps": [{"say": "Fixed: {input}"}]}})
    env = pi_kit.env
    # Found on PATH, the way a user installs it: no ROOST_PI_BIN, no config.
    env.pop("ROOST_PI_BIN")
    assert Path(pi_kit.pi).parent.as_posix() in env["PATH"].split(os.pathsep)
    daemon = pi_kit.daemon()
    job = started_job(roost(env, "start", "fix the login bug", "--name", "fixer", cwd=tmp_path), "pi")
    row = daemon.wait_job(job, timeout=90)
    assert (row["host"], row["state"], row["summary"]) == ("pi", "done", "Fixed: fix the login bug")
    # The answer came from the model (pi asked the fake), not from a scripted stand-in.
    requests = fake.requests()
    assert requests and any("fix the login bug" in str(message.get("content")) for message in requests[0]["messages"])
    assert roost(env, "wait", "fixer", "--json", cwd=tmp_path).stdout.count('"host": "pi"') == 1


def test_the_config_default_host_wins_over_a_pi_on_path(pi_kit, write_config, tmp_path):
    write_config({"defaultHost": "shell"})
    daemon = pi_kit.daemon()
    assert pi_kit.env.get("ROOST_PI_BIN")  # pi is there, and not chosen
    job = started_job(roost(pi_kit.env, "start", "echo configured", cwd=tmp_path), "shell")
    row = daemon.wait_job(job, "done")
    assert (row["host"], row["summary"]) == ("shell", "configured")


def test_without_config_or_pi_start_is_refused_and_names_the_scripted_host(daemon_factory, roost_env, tmp_path):
    # A PATH with this Python and nothing else: no pi anywhere the daemon could look.
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    roost_env["PATH"] = os.pathsep.join([str(empty), str(Path(sys.executable).parent)])
    daemon = daemon_factory().start()
    result = roost(roost_env, "start", "fix the login bug", cwd=tmp_path, expect=1)
    assert result.stdout == ""
    assert result.stderr.startswith("roost: no_host: no host for this job: no defaultHost in "), result.stderr
    assert "no default agent can run here (pi: pi is not installed: no `pi` on the daemon's PATH and no ROOST_PI_BIN" in result.stderr
    assert "roost start --host scripted" in result.stderr
    assert daemon.call("jobs")["jobs"] == []
    # Naming the scripted host is how to run without a model.
    job = started_job(roost(roost_env, "start", "fix the login bug", "--host", "scripted", cwd=tmp_path), "scripted")
    wait_until(lambda: daemon.job(job)["state"] == "done", what="the scripted job")
