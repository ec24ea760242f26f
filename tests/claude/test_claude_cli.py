"""``roost claude install | uninstall | hook``: the user's other settings stay as they
were; a hook with no roost side for its session says nothing and never fails. These need
no Claude Code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from roost_core.claude.install import is_roost_hook


def run(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=env, input=stdin, capture_output=True, text=True, timeout=60, check=False)


USER_SETTINGS = {
    "theme": "dark",
    "permissions": {"allow": ["Bash(git status)"], "deny": ["Read(.env)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write ."}]}],
        # An older roost install's hook: replaced, not doubled.
        "Stop": [{"hooks": [{"type": "command", "command": "/old/venv/bin/roost claude hook Stop"}, {"type": "command", "command": "notify-send done"}]}],
    },
}
USER_CONFIG = {"numStartups": 7, "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": [], "env": {}}}}


def test_install_and_uninstall_keep_the_users_other_settings(tmp_path, roost_env):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings_file, user_file = home / ".claude" / "settings.json", home / ".claude.json"
    settings_file.write_text(json.dumps(USER_SETTINGS))
    user_file.write_text(json.dumps(USER_CONFIG))
    env = {key: value for key, value in roost_env.items() if not key.startswith("CLAUDE")}
    env["HOME"] = str(home)

    first = run("claude", "install", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["changed"] is True
    settings = json.loads(settings_file.read_text())
    hooks = settings["hooks"]
    ours = {event: [h["command"] for g in groups for h in g["hooks"] if is_roost_hook(h["command"])] for event, groups in hooks.items()}
    assert {event: len(commands) for event, commands in ours.items()} == {"PostToolUse": 1, "Stop": 1, "SessionStart": 1, "UserPromptSubmit": 1}
    assert all(command.endswith(f"claude hook {event}") and "/old/venv" not in command for event, (command,) in ours.items())
    assert {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write ."}]} in hooks["PostToolUse"]
    assert {"hooks": [{"type": "command", "command": "notify-send done"}]} in hooks["Stop"]
    assert settings["theme"] == "dark" and settings["permissions"]["deny"] == ["Read(.env)"]
    assert settings["permissions"]["allow"] == ["Bash(git status)", "mcp__roost"]
    config = json.loads(user_file.read_text())
    assert config["numStartups"] == 7 and config["mcpServers"]["github"] == USER_CONFIG["mcpServers"]["github"]
    server = config["mcpServers"]["roost"]
    assert server["type"] == "stdio" and server["args"][-1] == "mcp" and Path(server["command"]).exists()

    again = run("claude", "install", "--json", env=env)
    assert json.loads(again.stdout)["changed"] is False
    assert json.loads(settings_file.read_text()) == settings

    gone = run("claude", "uninstall", "--json", env=env)
    assert gone.returncode == 0 and json.loads(gone.stdout)["changed"] is True
    # Everything the user had, as it was (less the old roost hook, which was roost's).
    expected = json.loads(json.dumps(USER_SETTINGS))
    expected["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    assert json.loads(settings_file.read_text()) == expected
    assert json.loads(user_file.read_text()) == USER_CONFIG
    assert json.loads(run("claude", "uninstall", "--json", env=env).stdout)["changed"] is False


def test_install_follows_claude_config_dir(tmp_path, roost_env):
    config_dir = tmp_path / "cc"
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(config_dir)}
    assert run("claude", "install", env=env).returncode == 0
    assert "roost" in json.loads((config_dir / ".claude.json").read_text())["mcpServers"]
    assert "Stop" in json.loads((config_dir / "settings.json").read_text())["hooks"]
    assert not (tmp_path / "home" / ".claude.json").exists()


def test_a_broken_settings_file_is_a_clear_error_and_is_left_alone(tmp_path, roost_env):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text("{not json")
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "HOME": str(home)}
    result = run("claude", "install", env=env)
    assert result.returncode == 1 and result.stderr.startswith("roost: ")
    assert (home / ".claude" / "settings.json").read_text() == "{not json"


def test_a_hook_with_no_roost_side_says_nothing_and_succeeds(tmp_path, roost_env):
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "CLAUDE_PID": "1"}
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
        result = run("claude", "hook", event, env=env, stdin=json.dumps({"session_id": "x", "hook_event_name": event}))
        assert result.returncode == 0 and result.stdout == "", (event, result.stderr)
    # A bridge that is gone: still no output, still exit 0 (the reason goes to stderr).
    result = run("claude", "hook", "Stop", env={**env, "ROOST_CLAUDE_BRIDGE": str(tmp_path / "gone.sock")}, stdin="{}")
    assert result.returncode == 0 and result.stdout == "" and "roost: hook Stop" in result.stderr
    assert run("claude", "hook", env=env).returncode == 2
