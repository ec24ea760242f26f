"""``roost pi install | uninstall | extension-path`` and ``roost daemon socket`` (through
the module the CLI wires in); these need no pi."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

from roost_plugins.pi import extension_path
from roost_plugins.pi.cli import main


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roost_plugins.pi.cli", *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_install_adds_the_extension_once_and_uninstall_removes_it(tmp_path, roost_env):
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    (agent_dir / "settings.json").write_text(json.dumps({"theme": "dark", "extensions": ["/opt/other.ts", "/old/site-packages/roost_core/pi/roost-extension.ts", "/older/site-packages/roost_plugins/pi/roost-extension.ts"]}))
    env = {**roost_env, "PI_CODING_AGENT_DIR": str(agent_dir)}
    first = run("pi", "install", env=env)
    assert first.returncode == 0, first.stderr
    settings = json.loads((agent_dir / "settings.json").read_text())
    # Another install's copy is replaced; other settings and extensions are kept.
    assert settings == {"theme": "dark", "extensions": ["/opt/other.ts", str(extension_path())]}
    again = json.loads(run("pi", "install", "--json", env=env).stdout)
    assert again["changed"] is False
    assert run("pi", "uninstall", env=env).returncode == 0
    assert json.loads((agent_dir / "settings.json").read_text()) == {"theme": "dark", "extensions": ["/opt/other.ts"]}


def test_install_respects_the_default_pi_dir(tmp_path, roost_env):
    env = {key: value for key, value in roost_env.items() if key != "PI_CODING_AGENT_DIR"}
    env["HOME"] = str(tmp_path)
    assert run("pi", "install", env=env).returncode == 0
    settings = json.loads((tmp_path / ".pi" / "agent" / "settings.json").read_text())
    assert settings["extensions"] == [str(extension_path())]


def test_extension_path_is_the_packaged_ts(capsys):
    assert main(["pi", "extension-path"]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(extension_path()) and path.endswith("roost_plugins/pi/roost-extension.ts")
    text = extension_path().read_text()
    # One file, no npm dependencies: only pi's own packages and node built-ins.
    imports = [line.split(" from ")[-1].strip(' ";') for line in text.splitlines() if line.startswith("import ")]
    assert all(name.startswith(("node:", "@mariozechner/pi-")) for name in imports), imports


def test_daemon_socket_prints_the_socket_and_starts_the_daemon(daemon_factory, roost_env):
    daemon = daemon_factory()
    result = run("daemon", "socket", env=roost_env)
    try:
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(daemon.paths.socket)
        assert daemon.call("daemon_status")["socket"] == str(daemon.paths.socket)
    finally:
        with contextlib.suppress(Exception):
            daemon.call("daemon_stop")


def roost(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The whole CLI, where ``roost pi`` is the pi host's own command (its HostSpec's)."""
    return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_pi_settings_are_edited_as_claude_codes_are(tmp_path, roost_env):
    # One settings-file helper for both install commands: a broken file is named (line
    # and column) and left alone; a dotfiles link is written through and stays a link.
    agent_dir, dotfiles = tmp_path / "agent", tmp_path / "dotfiles"
    agent_dir.mkdir()
    dotfiles.mkdir()
    env = {**roost_env, "PI_CODING_AGENT_DIR": str(agent_dir)}
    settings = agent_dir / "settings.json"
    settings.write_text('{"theme": "dark",\n "extensions": [\n')
    broken = roost("pi", "install", env=env)
    assert broken.returncode == 1
    assert broken.stderr.startswith(f"roost: bad_config: {settings}:3:1: not valid JSON"), broken.stderr
    assert settings.read_text() == '{"theme": "dark",\n "extensions": [\n'
    settings.write_text(json.dumps({"extensions": "not a list"}))
    assert roost("pi", "install", env=env).stderr.strip() == f'roost: bad_config: {settings}: "extensions" is not a list'

    settings.unlink()
    (dotfiles / "pi-settings.json").write_text(json.dumps({"theme": "dark"}))
    (dotfiles / "pi-settings.json").chmod(0o640)
    settings.symlink_to(dotfiles / "pi-settings.json")
    assert roost("pi", "install", env=env).returncode == 0
    assert settings.is_symlink() and (dotfiles / "pi-settings.json").stat().st_mode & 0o777 == 0o640
    assert json.loads((dotfiles / "pi-settings.json").read_text()) == {"theme": "dark", "extensions": [str(extension_path())]}
    assert sorted(p.name for p in dotfiles.iterdir()) == ["pi-settings.json"]
    # Blocked, the pi host has no command.
    blocked = roost("--disable-plugin", "pi", "pi", "install", env=env)
    assert blocked.returncode == 2 and "invalid choice: 'pi'" in blocked.stderr
