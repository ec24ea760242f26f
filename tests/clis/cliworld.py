"""One test's isolated world for an agent CLI (Codex, Gemini CLI, OpenCode, Qwen Code):
its own HOME, TMPDIR and working folder, an environment built from nothing (no inherited
API keys, proxies or user config), the tiny MCP server and the logging hook of this
folder, and a runner that leaves no process behind.

The per-CLI kits (``codexkit``, ...) add the CLI's config files and flags on top.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
#: A CLI run that takes longer than this is stuck (they take 1 to 5 s against the fakes).
RUN_TIMEOUT = 180.0


def find_cli(env_var: str, package_dir: str, binary: str) -> str | None:
    """The pinned CLI: ``$ENV_VAR`` when set, else tests/PACKAGE_DIR/node_modules/.bin/BINARY
    (installed by scripts/install-PACKAGE_DIR.sh)."""
    configured = os.environ.get(env_var)
    if configured:
        return configured
    local = TESTS / package_dir / "node_modules" / ".bin" / binary
    return str(local) if local.exists() else None


def require_cli(label: str, env_var: str, package_dir: str, binary: str, require_var: str) -> str:
    """The CLI's path, or skip the test (not installed), or fail it (not installed but
    ``$REQUIRE_VAR=1``, as CI sets)."""
    found = find_cli(env_var, package_dir, binary)
    if found is None:
        script = f"scripts/install-{package_dir}.sh"
        if os.environ.get(require_var) == "1":
            pytest.fail(f"{label} is not installed (run {script}) and {require_var}=1")
        pytest.skip(f"{label} is not installed ({script} installs it)")
    return found


class CliWorld:
    """Folders, environment and process handling shared by the CLI kits."""

    def __init__(self, tmp_path: Path, name: str, binary: str) -> None:
        self.binary = binary
        self.root = tmp_path / name
        self.home = self.root / "home"
        self.tmpdir = self.root / "tmp"
        self.work = self.root / "work"
        for folder in (self.home, self.tmpdir, self.work):
            folder.mkdir(parents=True, exist_ok=True)
        self.ping_log = self.root / "ping.log"
        self.hook_log = self.root / "hooks.jsonl"
        node = shutil.which("node")
        path = [str(Path(sys.executable).parent), *([str(Path(node).parent)] if node else []), "/usr/bin", "/bin"]
        # Built from nothing: no inherited keys, proxies, XDG folders or user config.
        self.env: dict[str, str] = {
            "PATH": os.pathsep.join(dict.fromkeys(path)),
            "HOME": str(self.home),
            "TMPDIR": str(self.tmpdir),
            "LANG": "C.UTF-8",
            "NO_PROXY": "127.0.0.1,localhost",
        }

    def mcp_server(self) -> tuple[str, list[str], dict[str, str]]:
        """``(command, args, env)`` of the ping MCP server (``mcp_ping.py``)."""
        return sys.executable, [str(HERE / "mcp_ping.py")], {"PING_LOG": str(self.ping_log)}

    def hook_command(self, event: str, text: str = "") -> str:
        """The shell command of ``hook.py`` for EVENT, pushing TEXT (none: only logs)."""
        args = [sys.executable, str(HERE / "hook.py"), event, str(self.hook_log), *([text] if text else [])]
        return shlex.join(args)

    def hook_calls(self) -> list[dict[str, Any]]:
        """What the CLI handed the hook, one dict per call, in order."""
        if not self.hook_log.exists():
            return []
        return [json.loads(line) for line in self.hook_log.read_text().splitlines() if line.strip()]

    def pings(self) -> list[str]:
        """The messages the MCP server's ``ping`` was called with."""
        return self.ping_log.read_text().splitlines() if self.ping_log.exists() else []

    def run(self, args: list[str], *, stdin: str | None = None, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run the CLI with ARGS in the work folder, STDIN written then closed (none: stdin
        closed at once), in its own process group, which is killed afterwards whatever
        happened (nothing a run starts outlives it)."""
        proc = subprocess.Popen(
            [self.binary, *args], cwd=self.work, env=self.env,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{Path(self.binary).name} {args!r} did not finish in {timeout} s\n{err[-3000:]}") from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL output (other lines skipped: some CLIs print notes)."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events
