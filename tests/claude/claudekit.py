"""The Claude test kit: find the pinned Claude Code, and an isolated Claude world per test
(``ClaudeKit``): its own HOME, the fake Anthropic server on 127.0.0.1, a fake key."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from fake_anthropic import FakeAnthropic

KIT = Path(__file__).resolve().parent
FAKE_KEY = "sk-ant-fake-roost-test-key"


def find_claude() -> str | None:
    configured = os.environ.get("ROOST_CLAUDE_BIN")
    if configured:
        return configured
    local = KIT / "node_modules" / ".bin" / "claude"
    return str(local) if local.exists() else None


def offline_env(env: dict[str, str], home: Path, tmpdir: Path) -> None:
    """Make ``env`` an isolated, offline Claude Code environment (in place)."""
    for key in list(env):
        # FAKE_LLM_API_KEY is the pi kit's fake key (a mixed test has both kits).
        if (key.endswith("_API_KEY") and key != "FAKE_LLM_API_KEY") or key.startswith(("ANTHROPIC_", "CLAUDE")):
            env.pop(key)
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    env.update(
        {
            "HOME": str(home),
            "TMPDIR": str(tmpdir),
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # MCP tools listed by name, so the fake model can call them without a tool search.
            "ENABLE_TOOL_SEARCH": "false",
            "NO_PROXY": "127.0.0.1,localhost",
        }
    )


class ClaudeKit:
    """One test's Claude world: folders, env, fake model and daemon."""

    def __init__(self, tmp_path: Path, env: dict[str, str], daemon_factory: Any, claude: str) -> None:
        self.tmp = tmp_path
        self.env = env
        self.daemon_factory = daemon_factory
        self.claude = claude
        self.home = tmp_path / "claudehome"
        self.tmpdir = tmp_path / "t"
        for folder in (self.home, self.tmpdir):
            folder.mkdir(parents=True, exist_ok=True)
        offline_env(env, self.home, self.tmpdir)
        env.update(
            {
                "ROOST_CLAUDE_BIN": claude,
                # A background job may run its scenario's shell steps (nobody can answer a
                # permission prompt there).
                "ROOST_CLAUDE_ARGS": "--allowedTools Bash",
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]),
            }
        )
        self.fakes: list[FakeAnthropic] = []

    def fake(self, scenario: Any) -> FakeAnthropic:
        fake = FakeAnthropic(scenario, self.tmp / f"anthropic-log-{len(self.fakes)}.jsonl").start()
        self.fakes.append(fake)
        self.env["ANTHROPIC_BASE_URL"] = fake.base_url
        return fake

    def daemon(self):
        return self.daemon_factory().start()

    def seed_interactive(self, project: Path) -> None:
        """What an interactive first start needs to go straight to the prompt."""
        path = self.home / ".claude.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data.update(
            {
                "hasCompletedOnboarding": True,
                "lastOnboardingVersion": "2.1.332",
                # Claude Code keeps an approved key by its last 20 characters.
                "customApiKeyResponses": {"approved": [FAKE_KEY[-20:], FAKE_KEY], "rejected": []},
            }
        )
        data.setdefault("projects", {})[str(project)] = {"hasTrustDialogAccepted": True}
        path.write_text(json.dumps(data))

    def cleanup(self) -> None:
        for fake in self.fakes:
            fake.release.set()  # an answer still held goes out, so nothing waits on it
            fake.stop()
        refused = [violation for fake in self.fakes for violation in fake.violations]
        # A request the fake refused is one a real model would have failed: the test fails.
        assert not refused, f"the fake model refused {len(refused)} request(s): {refused}"


def transcript_entries(path: str | Path) -> list[dict[str, Any]]:
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


# ---------------------------------------------------------------------------- tmux


def shquote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


class Tmux:
    """One program in its own tmux server, driven by keys and read from the screen."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], cwd: Path, script_dir: Path) -> None:
        import subprocess

        self.session = f"roost-cc-{os.getpid()}-{name}"
        script = script_dir / f"{name}.sh"
        exports = "\n".join(f"export {k}={shquote(v)}" for k, v in sorted(env.items()) if k.isidentifier())
        script.write_text(f"#!/bin/bash\n{exports}\ncd {shquote(str(cwd))}\nexec {' '.join(shquote(c) for c in command)}\n")
        script.chmod(0o700)
        subprocess.run(["tmux", "-L", self.session, "new-session", "-d", "-s", self.session, "-x", "160", "-y", "50", str(script)],
                       check=True, env={**os.environ, "TMUX": ""})

    def screen(self) -> str:
        import subprocess

        result = subprocess.run(["tmux", "-L", self.session, "capture-pane", "-p", "-t", self.session, "-S", "-200"], capture_output=True, text=True, check=False)
        return result.stdout

    def wait_screen(self, text: str, timeout: float = 60.0) -> str:
        import time

        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {text!r} on screen:\n{screen}")
            time.sleep(0.1)

    def keys(self, *keys: str) -> None:
        import subprocess

        subprocess.run(["tmux", "-L", self.session, "send-keys", "-t", self.session, *keys], check=True)

    def kill(self) -> None:
        import subprocess

        subprocess.run(["tmux", "-L", self.session, "kill-server"], capture_output=True, check=False)
