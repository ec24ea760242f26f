"""``roost gemini install | uninstall``: roost's MCP server and hooks go into the user's
``~/.gemini/settings.json`` and out again, every other setting kept; a hook with no roost
side answers ``{}``. These need no Gemini CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from roost_plugins.gemini.install import is_roost_hook

USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "model": {"name": "gemini-2.5-flash"},
    "mcpServers": {"github": {"command": "gh-mcp", "args": [], "trust": False}},
    "hooks": {
        "AfterTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "prettier --write ."}]}],
        # An older roost install's hook: replaced, not doubled.
        "AfterAgent": [{"hooks": [{"type": "command", "command": "/old/venv/bin/roost gemini hook AfterAgent"},
                                  {"type": "command", "command": "notify-send done"}]}],
    },
}


def run(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=env, input=stdin, capture_output=True, text=True, timeout=60, check=False)


def test_install_and_uninstall_keep_the_users_other_settings(tmp_path, roost_env):
    home = tmp_path / "userhome"
    (home / ".gemini").mkdir(parents=True)
    settings_file = home / ".gemini" / "settings.json"
    settings_file.write_text(json.dumps(USER_SETTINGS))
    env = {key: value for key, value in roost_env.items() if not key.startswith("GEMINI")}
    env["HOME"] = str(home)

    first = run("gemini", "install", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["changed"] is True
    settings = json.loads(settings_file.read_text())
    ours = {event: [h["command"] for g in groups for h in g["hooks"] if is_roost_hook(h["command"])] for event, groups in settings["hooks"].items()}
    assert {event: len(commands) for event, commands in ours.items()} == {"BeforeAgent": 1, "AfterTool": 1, "AfterAgent": 1}
    assert all(command.endswith(f"gemini hook {event}") and "/old/venv" not in command for event, (command,) in ours.items())
    assert {"matcher": "write_file", "hooks": [{"type": "command", "command": "prettier --write ."}]} in settings["hooks"]["AfterTool"]
    assert {"hooks": [{"type": "command", "command": "notify-send done"}]} in settings["hooks"]["AfterAgent"]
    assert settings["security"] == USER_SETTINGS["security"] and settings["model"] == USER_SETTINGS["model"]
    assert settings["mcpServers"]["github"] == USER_SETTINGS["mcpServers"]["github"]
    server = settings["mcpServers"]["roost"]
    # Trusted (a headless run leaves an untrusted server's tools out), answering its hooks.
    assert server["args"][-1] == "mcp" and Path(server["command"]).exists() and server["trust"] is True
    assert server["env"] == {"ROOST_MCP_HOST": "gemini"}

    again = run("gemini", "install", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    assert json.loads(settings_file.read_text()) == settings

    removed = run("gemini", "uninstall", env=env)
    assert removed.returncode == 0, removed.stderr
    left = json.loads(settings_file.read_text())
    expected = json.loads(json.dumps(USER_SETTINGS))
    expected["hooks"]["AfterAgent"] = [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    assert left == expected
    assert run("gemini", "uninstall", "--json", env=env).stdout.count('"changed": false') == 1


def test_a_broken_settings_file_is_a_clear_error_and_is_left_alone(tmp_path, roost_env):
    home = tmp_path / "userhome"
    (home / ".gemini").mkdir(parents=True)
    settings_file = home / ".gemini" / "settings.json"
    settings_file.write_text('{"model": ')
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("GEMINI")}, "HOME": str(home)}
    result = run("gemini", "install", env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("roost: bad_config: ") and f"{settings_file}:1:" in result.stderr
    assert settings_file.read_text() == '{"model": '


def test_a_hook_with_no_roost_side_answers_nothing_and_succeeds(tmp_path, roost_env):
    env = {**roost_env, "HOME": str(tmp_path)}
    result = run("gemini", "hook", "AfterTool", env=env, stdin=json.dumps({"hook_event_name": "AfterTool", "tool_name": "x"}))
    assert result.returncode == 0 and json.loads(result.stdout) == {}
