"""The CLI at its edges (issue 39, points 10, 11 and 14), run as a user runs it: the real
``roost`` in a subprocess with a temp ``ROOST_HOME``, a real daemon, real workers.

- a config that cannot be read is ``bad_config`` at once, naming the file and line (the
  CLI reads it before it starts a daemon; a daemon that cannot read it says so and its
  starter stops waiting); a broken project ``.pi/roost.json`` is warned about;
- a host whose program is not installed is refused ``no_host`` before any job is made;
  ``ROOST_HOME`` naming a file is ``bad_home``; Ctrl-C (a real SIGINT) in ``roost wait``
  and ``roost demo`` is ``roost: interrupted`` and exit 130, leaving nothing behind;
- ``--version``, help on every flag, the exit statuses, shell completion, and
  ``roost daemon stop --jobs`` ending every worker and what it started.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import proctools
import pytest
from clikit import CLI, Cli
from conftest import wait_until

from roost_core import __version__
from roost_core.cli import build_parser
from roost_core.client import start_daemon, wait_for_daemon
from roost_core.config import ConfigError
from roost_core.locks import is_alive
from roost_core.paths import resolve_paths

GATE_SCENARIO = '[[run]]\nsteps = [{{ wait_for = "{gate}" }}]\n'


@pytest.fixture
def run(roost_env, tmp_path):
    """``roost ARGS`` with the test's home (no daemon started by the fixture)."""
    return Cli(roost_env, tmp_path)


def no_path_env(roost_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``roost_env`` with a PATH of this Python and an empty folder: no pi, no claude."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {key: value for key, value in roost_env.items() if key not in ("ROOST_PI_BIN", "ROOST_CLAUDE_BIN")}
    env["PATH"] = os.pathsep.join([str(empty), str(Path(sys.executable).parent)])
    return env


def home_processes(home: Path) -> set:
    """Every live process of the roost home ``home`` (daemon, fork server, workers and
    what they started: all inherit ``ROOST_HOME``)."""
    return proctools.with_environ("ROOST_HOME", str(home))


# ---------------------------------------------------------------------------- point 10: config


def test_a_corrupt_user_config_is_bad_config_at_once_naming_file_and_line(run, roost_env):
    home = Path(roost_env["ROOST_HOME"])
    config = home / "roost.json"
    config.write_text('{\n  "agentMaxDepth": 3,\n  "defaultHost" "pi"\n}\n')
    result = run("jobs", expect=1)
    assert result.stderr == f"roost: bad_config: {config}: line 3, column 17: Expecting ':' delimiter\n", result.stderr
    # No daemon was started to find that out.
    assert not resolve_paths(roost_env).socket.exists()
    assert not (home / "state" / "daemon.log").exists()

    # A value of the wrong type: the line of its key.
    config.write_text('{\n  "agentTools": true,\n  "agentMaxDepth": "three"\n}\n')
    result = run("start", "x", "--host", "scripted", expect=1)
    assert result.stderr == f"roost: bad_config: {config}: line 3, column 3: agentMaxDepth must be a non-negative number\n", result.stderr

    # roost.toml beside it, the same way.
    config.unlink()
    toml = home / "roost.toml"
    toml.write_text("agentTools = true\nagentMaxDepth = \n")
    result = run("jobs", expect=1)
    assert result.stderr == f"roost: bad_config: {toml}: line 2, column 17: Invalid value\n", result.stderr


def test_a_daemon_that_cannot_read_its_config_says_so_and_its_starter_stops_waiting(roost_env):
    """The daemon's side: the config breaks after the CLI read it (or the daemon is
    started some other way). The daemon writes one line and exits 78; the client that
    started it raises that config error instead of waiting out its start timeout."""
    paths = resolve_paths(roost_env)
    paths.ensure()
    paths.config_file.write_text('{"agentMaxDepth": -1}')
    ran = subprocess.run([*CLI, "daemon", "run"], env=roost_env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 78, ran
    assert ran.stderr == f"roost: bad_config: {paths.config_file}: line 1, column 2: agentMaxDepth must be a non-negative finite number\n"

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(roost_env)
    try:
        process = start_daemon(paths)
        with pytest.raises(ConfigError) as raised:
            # Far past the daemon's start: its exit must end this wait, not the timeout
            # (which would raise DaemonUnavailable, as it did before the daemon said why).
            wait_for_daemon(paths, timeout=120, process=process)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert str(raised.value) == f"{paths.config_file}: line 1, column 2: agentMaxDepth must be a non-negative finite number"
    assert process.wait(30) == 78
    assert "Traceback" not in paths.daemon_log.read_text()


def test_a_corrupt_project_config_is_warned_about_not_silently_ignored(daemon, tmp_path):
    project = tmp_path / "project"
    (project / ".pi").mkdir(parents=True)
    broken = project / ".pi" / "roost.json"
    broken.write_text('{"defaultHost": "shell",}')
    cli = Cli(daemon.env, project)
    result = cli("start", "echo hi", "--host", "scripted")
    warning = f"the project config is ignored: {broken}: line 1, column 25: Expecting property name enclosed in double quotes"
    assert result.stderr == f"roost: warning: {warning}\n"
    assert result.stdout.startswith("started job ")  # the job runs, on what was asked
    assert warning in daemon.paths.daemon_log.read_text()
    # --json carries it too; a readable project config warns of nothing.
    assert json.loads(cli("start", "echo again", "--host", "scripted", "--json").stdout)["warnings"] == [warning]
    broken.write_text('{"defaultHost": "scripted"}')
    result = cli("start", "echo fine")
    assert result.stderr == "" and "on host scripted" in result.stdout


# -------------------------------------------------------------------- point 11: hosts, home, Ctrl-C


@pytest.mark.parametrize(
    ("host", "what"),
    [("pi", "pi is not installed: no `pi` on the daemon's PATH and no ROOST_PI_BIN"), ("claude", "Claude Code is not installed: no `claude` on the daemon's PATH and no ROOST_CLAUDE_BIN"),
     ("gemini", "Gemini CLI is not installed: no `gemini` on the daemon's PATH and no ROOST_GEMINI_BIN")],
)
def test_a_host_that_is_not_installed_is_refused_at_start(daemon_factory, roost_env, tmp_path, host, what):
    env = no_path_env(roost_env, tmp_path)
    daemon = daemon_factory(**env).start()
    result = Cli(env, tmp_path)("start", "fix the bug", "--host", host, expect=1)
    assert result.stdout == ""
    assert result.stderr.startswith(f"roost: no_host: start: host '{host}' cannot run here: {what}"), result.stderr
    assert daemon.call("jobs")["jobs"] == []


def test_a_configured_binary_that_is_not_there_is_refused_too(daemon_factory, roost_env, tmp_path):
    env = {**no_path_env(roost_env, tmp_path), "ROOST_PI_BIN": str(tmp_path / "no-such-pi")}
    daemon = daemon_factory(**env).start()
    result = Cli(env, tmp_path)("start", "x", "--host", "pi", expect=1)
    assert result.stderr.startswith(f"roost: no_host: start: host 'pi' cannot run here: pi is not installed: ROOST_PI_BIN='{tmp_path / 'no-such-pi'}' is not an executable")
    assert daemon.call("jobs")["jobs"] == []


def test_roost_spawn_refuses_a_host_that_is_not_installed(daemon_factory, roost_env, tmp_path):
    from fg import run_async, session

    env = no_path_env(roost_env, tmp_path)
    (Path(env["ROOST_HOME"]) / "roost.json").write_text(json.dumps({"agentSpawnHosts": ["pi"]}))
    daemon = daemon_factory(**env).start()

    async def main() -> tuple[bool, str, dict]:
        async with session(daemon, tmp_path) as lead:
            return await lead.call_tool("roost_spawn", {"task": "review it", "name": "child", "host": "pi"})

    ok, text, _ = run_async(main)
    assert not ok
    assert "no_host" in text and "host 'pi' cannot run here: pi is not installed" in text, text
    assert daemon.call("jobs")["jobs"] == []


@pytest.mark.parametrize("command", [["jobs"], ["plugins"], ["daemon", "status"], ["start", "x", "--host", "scripted"]])
def test_roost_home_naming_a_file_is_bad_home(roost_env, tmp_path, command):
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    for home, what in ((file, "is a file"), (file / "sub", f"is under {file}, which is a file")):
        env = {**roost_env, "ROOST_HOME": str(home)}
        result = Cli(env, tmp_path)(*command, expect=1)
        assert result.stderr == f"roost: bad_home: ROOST_HOME={str(home)!r} {what}, not a folder\n", result.stderr


def has_socket(pid: int) -> bool:
    """The process has a socket open: the CLI is connected to the daemon, so it is past
    its imports and inside the command."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_ctrl_c_in_roost_wait_is_interrupted_and_exit_130(daemon, tmp_path):
    cli = Cli(daemon.env, tmp_path)
    gate = tmp_path / "never"
    job = cli.json("start", "hang", "--host", "scripted", "--scenario", GATE_SCENARIO.format(gate=gate))["id"]
    waiting = subprocess.Popen([*CLI, "wait", job], env=daemon.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: has_socket(waiting.pid), what="roost wait connected")
        waiting.send_signal(signal.SIGINT)
        out, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert (waiting.returncode, out, err) == (130, "", "roost: interrupted\n")
    cli("stop", job)


def test_ctrl_c_in_roost_demo_cleans_up_and_exits_130(roost_env, tmp_path):
    env = {key: value for key, value in roost_env.items() if key != "ROOST_HOME"}
    demo = subprocess.Popen([*CLI, "demo"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        home = re.search(r"a throwaway home at (\S+)", demo.stdout.readline())[1]
        # Read on until the daemon runs and the first job is being played.
        lines = []
        while not lines or not lines[-1].startswith("== 2."):
            lines.append(demo.stdout.readline())
            assert lines[-1], lines
        daemon_pid = int(re.search(r"pid (\d+)", "".join(lines))[1])
        demo.send_signal(signal.SIGINT)
        rest, err = demo.communicate(timeout=60)
    finally:
        demo.kill()
    assert demo.returncode == 130, (rest, err)
    assert err == "roost: interrupted\n", err
    assert "done: the demo ran end to end" not in rest
    # Nothing of the demo is left: its home, its daemon, its workers.
    assert not Path(home).exists()
    assert not is_alive(daemon_pid)
    assert not home_processes(Path(home))


# ---------------------------------------------------------------------------- point 14: the CLI


def test_version(run):
    assert run("--version").stdout == f"roost {__version__}\n"


def every_parser(parser: argparse.ArgumentParser, prefix: str = "roost"):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_parser(sub, f"{prefix} {name}")


def test_every_flag_has_help_text():
    missing = [
        f"{where} {action.option_strings[0]}"
        for where, parser in every_parser(build_parser())
        for action in parser._actions
        if action.option_strings and not action.help
    ]
    assert missing == []


def test_host_help_lists_every_registered_host(run):
    text = " ".join(run("start", "--help").stdout.split())
    assert "--host HOST the agent that runs the job: scripted, shell, pi, claude, codex, qwen, opencode, gemini (default:" in text, text


def test_exit_statuses_are_in_the_help_and_kept(daemon, tmp_path):
    cli = Cli(daemon.env, tmp_path)
    assert "124  timeout" in cli("--help").stdout and "130  interrupted" in cli("--help").stdout
    gate = tmp_path / "never"
    job = cli.json("start", "hang", "--host", "scripted", "--scenario", GATE_SCENARIO.format(gate=gate))["id"]
    timed_out = cli("wait", job, "--timeout", "0.1", expect=124)
    assert timed_out.stderr.startswith(f"roost: timeout: job {job} (hang) still running after 0.1s"), timed_out.stderr
    assert cli("wait", "no-such-job", expect=1).stderr.startswith("roost: not_found: ")
    assert cli("wait", job, "--timeout", "soon", expect=2).stderr.endswith("roost: bad_args: argument --timeout: invalid float value: 'soon'\n")
    assert cli("daemon", "status", "--jobs", expect=2).stderr.endswith("roost: bad_args: --jobs goes with `roost daemon stop`\n")
    cli("stop", job)


def complete(script: Path, line: str) -> list[str]:
    """What bash completes for ``line`` (the word being completed is its last, empty when
    it ends in a space), with the completion script loaded."""
    program = 'source "$1"; read -ra COMP_WORDS <<< "$2"; [[ "$2" == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _roost_complete; printf "%s\\n" "${COMPREPLY[@]}"'
    result = subprocess.run(["bash", "-c", program, "bash", str(script), line], capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.split()


def test_bash_completion(run, tmp_path):
    script = tmp_path / "roost.bash"
    script.write_text(run("completion", "bash").stdout)
    assert complete(script, "roost st") == ["start", "stop"]
    assert complete(script, "roost --disable-plugin envelope da") == ["daemon"]
    assert complete(script, "roost start fix --host ") == ["scripted", "shell", "pi", "claude", "codex", "qwen", "opencode", "gemini"]
    assert complete(script, "roost start fix --h") == ["--help", "--host"]
    assert complete(script, "roost wait fixer --state n") == ["needs_input"]
    assert complete(script, "roost daemon s") == ["status", "stop", "socket"]
    assert complete(script, "roost daemon stop --j") == ["--jobs", "--json"]
    assert complete(script, "roost completion ") == ["bash", "zsh"]
    assert complete(script, "roost agents --group ") == ["dir", "state"]
    assert complete(script, "roost start fix --name ") == []
    (tmp_path / "sub").mkdir()
    assert complete(script, f"roost start fix --cwd {tmp_path}/s") == [f"{tmp_path}/sub"]


def test_zsh_completion_is_the_bash_script_through_bashcompinit(run):
    zsh = run("completion", "zsh").stdout
    assert "autoload -U +X bashcompinit && bashcompinit" in zsh
    assert zsh.endswith(run("completion", "bash").stdout)
    assert run("completion", "fish", expect=2).stderr.endswith("roost: bad_args: argument shell: invalid choice: 'fish' (choose from 'bash', 'zsh')\n")


def test_daemon_stop_jobs_ends_every_worker_and_what_it_started(daemon, tmp_path):
    cli = Cli(daemon.env, tmp_path)
    seconds = f"3{os.getpid() % 1000:03d}.25"
    running = cli.json("start", f"sleep {seconds}", "--host", "shell", "--name", "sleeper")["id"]
    settled = cli.json("start", "quick", "--host", "scripted", "--name", "quick")["id"]
    daemon.wait_job(settled, "done")
    wait_until(lambda: proctools.with_cmdline(seconds), what="the shell job's sleep")
    assert daemon.job(settled)["live"]  # a done job's worker waits to be reaped
    workers = daemon.worker_pids()
    assert len(workers) == 2

    stopped = cli("daemon", "stop", "--jobs")
    assert stopped.stdout == f"stopped; ended the workers of 2 job(s) (stopped, they were running: {running})\n"
    assert daemon.process.wait(30) == 0
    assert not any(is_alive(pid) for pid in workers)
    assert not proctools.with_cmdline(seconds)
    assert not home_processes(daemon.home)
    # The running job was stopped; the settled one keeps its state (a reply wakes it).
    assert (daemon.record(running)["state"], daemon.record(settled)["state"]) == ("stopped", "done")
    assert daemon.record(settled)["worker_pid"] is None


def test_daemon_stop_jobs_after_a_plain_stop_ends_the_waiting_workers(daemon, tmp_path):
    cli = Cli(daemon.env, tmp_path)
    job = cli.json("start", "quick", "--host", "scripted")["id"]
    daemon.wait_job(job, "done")
    (worker,) = daemon.worker_pids()
    assert cli("daemon", "stop").stdout == "stopped\n"
    daemon.process.wait(30)
    assert is_alive(worker)  # the default: it waits for the next daemon
    assert cli("daemon", "stop", "--jobs").stdout == "not running; ended 1 worker(s) left waiting for a daemon\n"
    assert not is_alive(worker)
    assert not home_processes(daemon.home)
