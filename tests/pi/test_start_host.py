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


def test_pi_installed_after_the_daemon_started_runs_without_a_restart(pi_kit, tmp_path):
    """pi put on the daemon's PATH after the daemon started (a user installs it then): the
    next ``roost start --host pi`` finds it and runs, with no daemon restart. Before, the
    refusal says where the daemon looked."""
    fake = pi_kit.fake({"default": {"steps": [{"say": "Fixed: {input}"}]}})
    env = pi_kit.env
    env.pop("ROOST_PI_BIN")
    # A folder on the daemon's PATH that is empty when it starts.
    later = tmp_path / "later-bin"
    later.mkdir()
    env["PATH"] = os.pathsep.join(later.as_posix() if part == Path(pi_kit.pi).parent.as_posix() else part for part in env["PATH"].split(os.pathsep))
    assert not any((Path(part) / "pi").exists() for part in env["PATH"].split(os.pathsep))
    daemon = pi_kit.daemon()
    refused = roost(env, "start", "fix the login bug", "--host", "pi", cwd=tmp_path, expect=1)
    assert refused.stderr.startswith("roost: no_host: start: host 'pi' cannot run here: pi is not installed: no `pi` on the daemon's PATH"), refused.stderr
    (later / "pi").symlink_to(pi_kit.pi)
    job = started_job(roost(env, "start", "fix the login bug", "--host", "pi", "--name", "fixer", cwd=tmp_path), "pi")
    row = daemon.wait_job(job, timeout=90)
    assert (row["host"], row["state"], row["summary"]) == ("pi", "done", "Fixed: fix the login bug")
    assert fake.requests()


def test_pi_on_the_shells_path_but_not_the_daemons_says_a_restart_finds_it(pi_kit, daemon_factory, tmp_path):
    """pi installed into a folder this shell has on its PATH and the daemon, started
    before, does not: ``roost start --host pi`` says where the shell finds it and that
    the daemon looks on the PATH it was started with; stopped and started again with the
    shell's PATH, the daemon runs the job."""
    pi_kit.fake({"default": {"steps": [{"say": "Fixed: {input}"}]}})
    env = pi_kit.env
    env.pop("ROOST_PI_BIN")
    pi_folder = Path(pi_kit.pi).parent.as_posix()
    daemon_path = os.pathsep.join(part for part in env["PATH"].split(os.pathsep) if part != pi_folder)
    first = daemon_factory(PATH=daemon_path).start()
    refused = roost(env, "start", "fix the login bug", "--host", "pi", cwd=tmp_path, expect=1)
    assert refused.stderr.startswith("roost: no_host: start: host 'pi' cannot run here: pi is not installed: no `pi` on the daemon's PATH"), refused.stderr
    assert "the daemon looks at each job start, on the PATH and environment it was started with" in refused.stderr
    assert f"This shell finds `pi` at {pi_folder}/pi, but the daemon looks on the PATH it was started with: stop it (roost daemon stop)" in refused.stderr
    first.terminate()
    daemon = daemon_factory().start()
    job = started_job(roost(env, "start", "fix the login bug", "--host", "pi", cwd=tmp_path), "pi")
    assert daemon.wait_job(job, timeout=90)["summary"] == "Fixed: fix the login bug"
