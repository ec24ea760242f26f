"""Every install command gives back what it found (issue 49, B12), run as a user runs it:
``roost NAME install`` then ``roost NAME uninstall`` in a subprocess.

- the user's files come back byte for byte with their mode (their own indentation, a
  missing final newline), and install keeps the mode too;
- a file that was not there is not there after (no empty ``{}``), nor a folder install
  made for it;
- the user's edits made between install and uninstall survive: only roost's entries go;
- a malformed file is refused with ``FILE:LINE:COLUMN`` and nothing is changed;
- ``roost qwen install`` and ``roost opencode install`` say when the CLI is not installed,
  and install all the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODEX_BIN = ROOT / "tests" / "codex" / "node_modules" / ".bin"

#: A JSON file as a person writes it: 4 spaces, an array on one line, no final newline.
USER_JSON = b'{\n    "theme": "dark",\n    "list": [1, 2, 3]\n}'
#: A config.toml as a person writes it.
USER_TOML = b'model = "o3"   # mine\n\n[tui]\nnotifications = true\n'
MALFORMED_JSON = b'{\n  "theme": "dark",\n  "list" [1]\n}\n'
MALFORMED_TOML = b'model = "o3"\nbroken = \n'


class Agent:
    """One install command's world: its environment and the files it edits (the first is
    the one a malformed test breaks), and where its files live."""

    def __init__(self, name: str, tmp: Path, env: dict[str, str]) -> None:
        self.name = name
        self.root = tmp / "agent-home"
        self.env = {key: value for key, value in env.items() if not key.startswith(("CLAUDE", "CODEX", "GEMINI", "QWEN", "PI_", "ROOST_CODEX", "XDG_CONFIG"))}
        self.env["HOME"] = str(self.root)
        # No agent CLI on PATH (codex's app-server aside, below): the installs run as on
        # a machine where the CLI is not installed yet.
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
        files = {
            "pi": [self.root / ".pi" / "agent" / "settings.json"],
            "claude": [self.root / ".claude" / "settings.json", self.root / ".claude.json"],
            "codex": [self.root / ".codex" / "config.toml", self.root / ".codex" / "hooks.json"],
            "gemini": [self.root / ".gemini" / "settings.json"],
            "qwen": [self.root / ".qwen" / "settings.json"],
            "opencode": [self.root / "config" / "opencode" / "opencode.json", self.root / "config" / "opencode" / "plugins" / "roost.js"],
        }[name]
        self.files = files
        if name == "opencode":
            self.env["XDG_CONFIG_HOME"] = str(self.root / "config")
        if name == "codex" and CODEX_BIN.exists():
            # Codex trusts the hooks (and rewrites config.toml) through its app-server.
            self.env["PATH"] = os.pathsep.join([str(CODEX_BIN), self.env["PATH"]])

    def roost(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "roost_core.cli", self.name, *args], env=self.env, capture_output=True, text=True, timeout=180)

    def user_files(self) -> list[Path]:
        """The files a user has (a plugin file is roost's alone)."""
        return [path for path in self.files if path.suffix != ".js"]

    def state(self) -> dict[str, tuple[bytes, int]]:
        """Every file under the agent's home (Codex's own logs and databases aside), with
        its bytes and mode."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and (self.name != "codex" or path.name in ("config.toml", "hooks.json")):
                found[str(path.relative_to(self.root))] = (path.read_bytes(), path.stat().st_mode & 0o777)
            elif path.is_dir() and self.name != "codex":
                found[str(path.relative_to(self.root)) + "/"] = (b"", path.stat().st_mode & 0o777)
        return found


AGENTS = ["pi", "claude", "codex", "gemini", "qwen", "opencode"]


@pytest.fixture(params=AGENTS)
def agent(request, tmp_path, roost_env) -> Agent:
    world = Agent(request.param, tmp_path, roost_env)
    world.root.mkdir()
    return world


def write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def user_content(path: Path) -> bytes:
    return USER_TOML if path.suffix == ".toml" else USER_JSON


def test_install_then_uninstall_gives_back_the_exact_bytes_and_mode(agent):
    for index, path in enumerate(agent.user_files()):
        write(path, user_content(path), 0o644 if index == 0 else 0o640)
    before = agent.state()
    installed = agent.roost("install")
    assert installed.returncode == 0, installed.stderr
    for path in agent.user_files():
        assert path.read_bytes() != before[str(path.relative_to(agent.root))][0] or (agent.name == "codex" and path.suffix == ".json")
        # install keeps the file's mode
        assert path.stat().st_mode & 0o777 == before[str(path.relative_to(agent.root))][1], path
    assert agent.roost("install").returncode == 0  # twice: still one record of the user's file
    removed = agent.roost("uninstall")
    assert removed.returncode == 0, removed.stderr
    assert agent.state() == before


def test_install_then_uninstall_leaves_no_file_that_was_not_there(agent):
    before = agent.state()
    installed = agent.roost("install")
    assert installed.returncode == 0, installed.stderr
    assert all(path.exists() for path in agent.files if path.name != "hooks.json" or agent.name == "codex")
    removed = agent.roost("uninstall")
    assert removed.returncode == 0, removed.stderr
    assert agent.state() == before
    assert not any(path.exists() for path in agent.files)


def test_the_users_edits_between_install_and_uninstall_survive(agent):
    main = agent.user_files()[0]
    write(main, user_content(main), 0o600)
    assert agent.roost("install").returncode == 0
    if main.suffix == ".toml":
        main.write_text(main.read_text() + '\n[profiles.mine]\nmodel = "o4"\n')
    else:
        data = json.loads(main.read_text())
        data["theme"] = "light"
        main.write_text(json.dumps(data, indent=4))
    removed = agent.roost("uninstall")
    assert removed.returncode == 0, removed.stderr
    text = main.read_text()
    assert "roost" not in text, text
    if main.suffix == ".toml":
        assert text.startswith(USER_TOML.decode()) and '[profiles.mine]\nmodel = "o4"\n' in text
    else:
        assert json.loads(text) == {"theme": "light", "list": [1, 2, 3]}
        assert text.startswith('{\n    "theme"')  # still the file's own indentation
    assert main.stat().st_mode & 0o777 == 0o600


def test_a_malformed_file_is_refused_with_file_line_column_and_nothing_changes(agent):
    main = agent.user_files()[0]
    toml = main.suffix == ".toml"
    write(main, MALFORMED_TOML if toml else MALFORMED_JSON, 0o644)
    before = agent.state()
    refused = agent.roost("install")
    assert refused.returncode == 1
    where = f"{main}:2:10:" if toml else f"{main}:3:10:"
    assert refused.stderr.startswith(f"roost: bad_config: {where} not valid"), refused.stderr
    assert agent.state() == before


@pytest.mark.parametrize(("name", "what"), [("qwen", "Qwen Code"), ("opencode", "OpenCode")])
def test_install_says_when_the_cli_is_not_installed_and_installs_all_the_same(tmp_path, roost_env, name, what):
    world = Agent(name, tmp_path, roost_env)
    world.root.mkdir()
    installed = world.roost("install")
    assert installed.returncode == 0, installed.stderr
    assert installed.stderr.startswith(f"roost: warning: {what} is not installed: "), installed.stderr
    assert world.files[0].exists()

