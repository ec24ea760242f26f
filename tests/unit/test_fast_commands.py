"""What runs on every call of someone else's loop imports only what it uses (issue 50.3).

An agent CLI runs ``roost NAME hook EVENT`` as a new process on every event (Claude Code
after every tool call): the ``roost`` command, as the package installs it, must relay the
hook's object without the CLI, the plugins or the daemon's modules. ``roost --version``
loads no plugin. Each test runs the command the way the installed script does (made from
``pyproject.toml``'s ``[project.scripts]``, as pip makes it) with
``PYTHONPROFILEIMPORTTIME``, and reads from its stderr which modules it imported: no
timing, the import list itself. ``bench/commands.py`` measures the CPU these cost.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest

from roost_core import hookrelay, platform

REPO = Path(__file__).resolve().parents[2]
#: What a hook's relay may import beyond the interpreter's own start (site, encodings,
#: the console script's ``re``): the standard library's JSON, socket and hashing, and
#: roost's relay and process-table modules.
RELAY_MODULES = {
    "roost_core", "roost_core.launch", "roost_core.hookrelay", "roost_core.platform", "roost_core.platform.common",
    "roost_core.platform.linux", "roost_core.platform.portable",
    "json", "json.decoder", "json.encoder", "json.scanner", "_json", "__future__",
    "_socket", "errno",
    "_sha256", "_sha2",
}
#: What proves a command went the long way: the plugin machinery, the CLI, the daemon's
#: records, entry-point scans, the async stack.
HEAVY = {"pluggy", "roost_core.cli", "roost_core.plugins", "roost_core.records", "roost_core.view", "importlib.metadata",
         "anyio", "asyncio", "attrs", "argparse", "psutil"}
if platform.NAME == "portable":
    # The portable implementation reads the process table with psutil: there a relay that
    # looks for its session's server imports it (and what it imports).
    HEAVY -= {"psutil"}


def assert_relay_imports(loaded: set[str], also: frozenset[str] = frozenset()) -> None:
    """``loaded`` is what a relay imports: nothing beyond :data:`RELAY_MODULES` (and the
    host's relay modules, ``also``) on Linux; nothing of :data:`HEAVY` with the portable
    implementation (psutil's own imports)."""
    extra = loaded - startup_modules()
    if platform.NAME == "portable":
        assert not extra & HEAVY, sorted(extra & HEAVY)
    else:
        assert extra <= RELAY_MODULES | also, sorted(extra - RELAY_MODULES - also)


def console_script(tmp_path: Path) -> Path:
    """The ``roost`` script pip writes for this tree's ``[project.scripts]`` entry."""
    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["roost"]
    module, _, function = entry.partition(":")
    script = tmp_path / "bin" / "roost"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n"
    )
    script.chmod(0o755)
    return script


def imported(stderr: str) -> set[str]:
    """The modules a ``PYTHONPROFILEIMPORTTIME`` run imported, from its stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:") and "|" in line} - {"package"}


def startup_modules() -> set[str]:
    """What the interpreter imports before a script's first line (and the script's ``re``)."""
    done = subprocess.run([sys.executable, "-c", "import re"], env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
                          capture_output=True, text=True, timeout=60, check=True)
    return imported(done.stderr)


class OneAnswerBridge:
    """A bridge socket that answers each request with ``answer`` and keeps what it got."""

    def __init__(self, path: Path, answer: dict[str, Any]) -> None:
        self.path, self.answer, self.requests = path, answer, []
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if data:
                    frame = json.loads(data)
                    self.requests.append(frame)
                    conn.sendall(json.dumps({"id": frame["id"], "ok": True, "result": self.answer}).encode() + b"\n")

    def close(self) -> None:
        self.listener.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def hook_env(roost_env: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in roost_env.items() if key not in (hookrelay.BRIDGE_ENV, "CLAUDE_PID")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    return env


def run_hook(script: Path, env: dict[str, str], *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), *args], input=stdin, env=env, capture_output=True, text=True, timeout=60)


def test_a_foreground_hook_finds_its_server_and_relays_with_the_standard_librarys_smallest_parts(tmp_path, hook_env):
    """``roost claude hook PostToolUse`` as a user's Claude Code runs it: the ``roost mcp``
    server of an ancestor (this test's process stands for Claude Code) is found under its
    home, pid and start time, gets the hook's object, and its answer is printed."""
    script = console_script(tmp_path)
    output = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "[roost seq 3]\nhello"}}
    bridge = OneAnswerBridge(hookrelay.foreground_socket(Path(hook_env["ROOST_HOME"]), os.getpid()), {"output": output})
    try:
        done = run_hook(script, hook_env, "claude", "hook", "PostToolUse", stdin=json.dumps({"tool_name": "Bash", "session_id": "s1"}))
    finally:
        bridge.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == output
    assert bridge.requests == [{"id": 1, "op": "hook", "event": "PostToolUse", "input": {"tool_name": "Bash", "session_id": "s1"}}]
    assert_relay_imports(imported(done.stderr))


@pytest.mark.parametrize("name,event", [("codex", "PostToolUse"), ("qwen", "Stop"), ("opencode", "PostToolUse")])
def test_the_other_clis_hooks_that_speak_claude_codes_protocol_relay_the_same_way(tmp_path, hook_env, name, event):
    script = console_script(tmp_path)
    bridge = OneAnswerBridge(tmp_path / "job.sock", {"output": {"decision": "block", "reason": "r"}})
    try:
        done = run_hook(script, {**hook_env, hookrelay.BRIDGE_ENV: str(bridge.path)}, name, "hook", event, stdin="{}")
    finally:
        bridge.close()
    assert done.returncode == 0 and json.loads(done.stdout) == {"decision": "block", "reason": "r"}, done.stderr
    assert bridge.requests[0]["event"] == event
    assert not imported(done.stderr) & HEAVY, sorted(imported(done.stderr) & HEAVY)


def test_a_gemini_hook_relays_in_gemini_clis_shape_without_the_cli(tmp_path, hook_env):
    """``roost gemini hook AfterAgent`` of a user's Gemini CLI: asked as a ``Stop``, the
    server's block comes back as Gemini CLI's deny; a job's hook (``--bridge``) is relayed
    as it is. Neither loads the CLI or the plugins."""
    script = console_script(tmp_path)
    bridge = OneAnswerBridge(hookrelay.foreground_socket(Path(hook_env["ROOST_HOME"]), os.getpid()), {"output": {"decision": "block", "reason": "go on"}})
    job = OneAnswerBridge(tmp_path / "job.sock", {"output": {"decision": "deny", "reason": "job"}})
    try:
        user = run_hook(script, hook_env, "gemini", "hook", "AfterAgent", stdin=json.dumps({"session_id": "g1", "stop_hook_active": False}))
        of_job = run_hook(script, hook_env, "gemini", "hook", "AfterTool", "--bridge", str(job.path), stdin="{}")
        nothing = run_hook(script, {**hook_env, "ROOST_HOME": str(tmp_path / "elsewhere")}, "gemini", "hook", "AfterTool", stdin="{}")
    finally:
        bridge.close()
        job.close()
    assert json.loads(user.stdout) == {"decision": "deny", "reason": "go on"}, user.stderr
    assert bridge.requests == [{"id": 1, "op": "hook", "event": "Stop", "input": {"session_id": "g1", "stop_hook_active": False}}]
    assert json.loads(of_job.stdout) == {"decision": "deny", "reason": "job"} and job.requests[0]["event"] == "AfterTool"
    # No roost side: Gemini CLI still reads a JSON object.
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == {}
    assert_relay_imports(imported(user.stderr), frozenset({"roost_plugins", "roost_plugins.gemini", "roost_plugins.gemini.hook"}))
    assert not imported(of_job.stderr) & HEAVY, sorted(imported(of_job.stderr) & HEAVY)


def test_anything_but_a_known_hook_goes_to_the_cli_as_before(tmp_path, hook_env):
    """An event the host does not have, a missing one, or an extra word: the CLI's own
    usage error, not a relay."""
    script = console_script(tmp_path)
    env = {key: value for key, value in hook_env.items() if key != "PYTHONPROFILEIMPORTTIME"}
    for args in (["claude", "hook", "AfterTool"], ["claude", "hook"], ["claude", "hook", "Stop", "--bridge", "x"]):
        done = run_hook(script, env, *args, stdin="{}")
        assert done.returncode == 2 and "roost:" in done.stderr, (args, done.stderr)


def test_roost_version_loads_no_plugin(tmp_path, hook_env):
    script = console_script(tmp_path)
    done = subprocess.run([str(script), "--version"], env=hook_env, capture_output=True, text=True, timeout=60)
    from roost_core import __version__

    assert done.returncode == 0 and done.stdout == f"roost {__version__}\n"
    assert not imported(done.stderr) & HEAVY, sorted(imported(done.stderr) & HEAVY)


def test_the_fast_hooks_are_the_commands_the_hosts_register(roost_env, monkeypatch):
    """Each ``roost NAME hook`` the launcher relays by itself has, in the CLI the hosts'
    plugins build, the same events: the table cannot drift from the hosts."""
    import argparse

    from roost_core.cli import build_parser
    from roost_core.launch import HOOK_RELAYS

    for key, value in roost_env.items():
        monkeypatch.setenv(key, value)
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices
    for name, (_target, events, _takes_bridge) in HOOK_RELAYS.items():
        event = next(action for action in commands[name]._actions if action.dest == "event")
        assert tuple(event.choices) == events, name


@pytest.mark.parametrize("case", ["home", "xdg", "user"])
def test_the_guessed_socket_is_the_servers(tmp_path, monkeypatch, case):
    """The relay's cheap guess of the server's socket is what the server itself makes
    (``roost_core.paths`` with platformdirs and tempfile) in the usual setups."""
    if not sys.platform.startswith("linux") and case != "home":
        pytest.skip("the guess without ROOST_HOME is Linux's (elsewhere the relay asks platformdirs)")
    env = {"TMPDIR": str(tmp_path / "t"), "HOME": str(tmp_path / "u")}
    (tmp_path / "t").mkdir()
    if case == "home":
        env["ROOST_HOME"] = str(tmp_path / "a" / "." / "home") + "/"
    elif case == "xdg":
        env["XDG_STATE_HOME"] = str(tmp_path / "state")
    for key in ("ROOST_HOME", "XDG_STATE_HOME", "TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    from roost_core.paths import resolve_paths

    exact = hookrelay.foreground_socket(resolve_paths().home, os.getpid())
    assert list(hookrelay.guessed_sockets(dict(os.environ), [os.getpid()])) == [str(exact)]


@pytest.mark.parametrize("command", ["jobs", "agents"])
def test_roost_jobs_and_agents_take_the_blocking_client_alone(tmp_path, hook_env, daemon_factory, command):
    """``roost jobs`` and ``roost agents`` against a running daemon: no plugin scan, no
    async stack, no transcript or record modules (what they print is the daemon's rows)."""
    daemon = daemon_factory().start()
    script = console_script(tmp_path)
    done = subprocess.run([str(script), command], env={**hook_env, "ROOST_HOME": daemon.env["ROOST_HOME"]},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = imported(done.stderr)
    assert "roost_core.blockingclient" in loaded
    # The CLI and its parser (roost_core.view adds `roost view`), and attrs (the wire
    # protocol's records): the rest of the heavy set stays out.
    assert not loaded & (HEAVY - {"attrs", "argparse", "roost_core.cli", "roost_core.view"}), sorted(loaded & HEAVY)
    assert not loaded & {"roost_core.client", "roost_core.transcript", "msgspec", "roost_core.hosts"}, sorted(loaded)
