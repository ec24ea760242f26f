"""``roost claude install | uninstall | hook``: the user's other settings stay as they
were; a hook with no roost side for its session says nothing and never fails. These need
no Claude Code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from roost_plugins.claude.install import is_roost_hook


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
    # The first model call waits for the MCP servers (test_claude_first_call.py).
    assert settings["env"] == {"CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "30000"}
    config = json.loads(user_file.read_text())
    assert config["numStartups"] == 7 and config["mcpServers"]["github"] == USER_CONFIG["mcpServers"]["github"]
    server = config["mcpServers"]["roost"]
    assert server["type"] == "stdio" and server["args"][-1] == "mcp" and Path(server["command"]).exists()
    assert server["alwaysLoad"] is True

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


def test_a_startup_wait_the_user_set_is_kept(tmp_path, roost_env):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings_file = home / ".claude" / "settings.json"
    mine = {"env": {"CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "8000", "FOO": "1"}}
    settings_file.write_text(json.dumps(mine))
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "HOME": str(home)}
    assert run("claude", "install", env=env).returncode == 0
    assert json.loads(settings_file.read_text())["env"] == mine["env"]
    assert run("claude", "uninstall", env=env).returncode == 0
    assert json.loads(settings_file.read_text()) == mine


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
    assert result.returncode == 1
    assert result.stderr.startswith(f"roost: bad_config: {home / '.claude' / 'settings.json'}:1:2: not valid JSON"), result.stderr
    assert (home / ".claude" / "settings.json").read_text() == "{not json"
    assert not (home / ".claude.json").exists()


def test_a_broken_claude_json_stops_the_install_before_anything_is_written(tmp_path, roost_env):
    # All or nothing: the hooks must not go into settings.json when the MCP server cannot
    # go into ~/.claude.json (a session would run hooks with no roost server).
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings_file, user_file = home / ".claude" / "settings.json", home / ".claude.json"
    settings_file.write_text(json.dumps(USER_SETTINGS))
    broken = '{\n  "numStartups": 7,\n  "mcpServers": {"github": {"command": "gh-mcp"}\n'
    user_file.write_text(broken)
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "HOME": str(home)}
    for action in ("install", "uninstall"):
        result = run("claude", action, env=env)
        assert result.returncode == 1, result
        # The file, and the line and column where it breaks.
        assert result.stderr.startswith(f"roost: bad_config: {user_file}:4:1: not valid JSON"), result.stderr
        assert json.loads(settings_file.read_text()) == USER_SETTINGS
        assert user_file.read_text() == broken
    # A file of the wrong shape is refused the same way, naming the file and the key.
    user_file.write_text(json.dumps({"mcpServers": ["not", "an", "object"]}))
    result = run("claude", "install", env=env)
    assert result.returncode == 1 and result.stderr.strip() == f'roost: bad_config: {user_file}: "mcpServers" is not an object'
    assert json.loads(settings_file.read_text()) == USER_SETTINGS


def test_symlinked_settings_are_written_through_their_links(tmp_path, roost_env):
    # A dotfiles setup: both files are links into a repository; they stay links.
    home, dotfiles = tmp_path / "home", tmp_path / "dotfiles"
    (home / ".claude").mkdir(parents=True)
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text(json.dumps(USER_SETTINGS))
    (dotfiles / "claude.json").write_text(json.dumps(USER_CONFIG))
    (dotfiles / "settings.json").chmod(0o640)
    settings_link, user_link = home / ".claude" / "settings.json", home / ".claude.json"
    settings_link.symlink_to(dotfiles / "settings.json")
    user_link.symlink_to(dotfiles / "claude.json")
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "HOME": str(home)}

    result = run("claude", "install", env=env)
    assert result.returncode == 0, result.stderr
    assert settings_link.is_symlink() and user_link.is_symlink()
    assert "Stop" in json.loads((dotfiles / "settings.json").read_text())["hooks"]
    assert "roost" in json.loads((dotfiles / "claude.json").read_text())["mcpServers"]
    assert (dotfiles / "settings.json").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in dotfiles.iterdir()) == ["claude.json", "settings.json"]

    result = run("claude", "uninstall", env=env)
    assert result.returncode == 0, result.stderr
    assert settings_link.is_symlink() and user_link.is_symlink()
    assert json.loads((dotfiles / "claude.json").read_text()) == USER_CONFIG


def test_a_hook_with_no_roost_side_says_nothing_and_succeeds(tmp_path, roost_env):
    env = {**{k: v for k, v in roost_env.items() if not k.startswith("CLAUDE")}, "CLAUDE_PID": "1"}
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
        result = run("claude", "hook", event, env=env, stdin=json.dumps({"session_id": "x", "hook_event_name": event}))
        assert result.returncode == 0 and result.stdout == "", (event, result.stderr)
    # A bridge that is gone: still no output, still exit 0 (the reason goes to stderr).
    result = run("claude", "hook", "Stop", env={**env, "ROOST_BRIDGE": str(tmp_path / "gone.sock")}, stdin="{}")
    assert result.returncode == 0 and result.stdout == "" and "roost: hook Stop" in result.stderr
    assert run("claude", "hook", env=env).returncode == 2
