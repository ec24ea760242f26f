"""The Claude test kit: find the pinned Claude Code, and an isolated Claude world per test
(``ClaudeKit``): its own HOME, the fake Anthropic server on 127.0.0.1, a fake key."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from fake_anthropic import FakeAnthropic
from hostkit import HostKit, Tmux, require_program
from hostkit import offline_env as isolated_env

__all__ = ["FAKE_KEY", "ClaudeKit", "Tmux", "find_claude", "need_claude", "offline_env", "transcript_entries"]

KIT = Path(__file__).resolve().parent
FAKE_KEY = "sk-ant-fake-roost-test-key"


def find_claude() -> str | None:
    configured = os.environ.get("ROOST_CLAUDE_BIN")
    if configured:
        return configured
    local = KIT / "node_modules" / ".bin" / "claude"
    return str(local) if local.exists() else None


def need_claude() -> str:
    """The Claude Code to test; the test skips without one (fails with ROOST_REQUIRE_CLAUDE=1)."""
    return require_program(find_claude(), "Claude Code", "ROOST_REQUIRE_CLAUDE", "scripts/install-claude.sh")


def offline_env(env: dict[str, str], home: Path, tmpdir: Path) -> None:
    """Make ``env`` an isolated, offline Claude Code environment (in place)."""
    # FAKE_LLM_API_KEY is the pi kit's fake key (a mixed test has both kits).
    drop = [key for key in env if (key.endswith("_API_KEY") and key != "FAKE_LLM_API_KEY") or key.startswith(("ANTHROPIC_", "CLAUDE"))]
    isolated_env(env, home, tmpdir, drop=drop)
    env.update(
        {
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # MCP tools listed by name, so the fake model can call them without a tool search.
            "ENABLE_TOOL_SEARCH": "false",
        }
    )


class ClaudeKit(HostKit):
    """One test's Claude world: folders, env, fake model and daemon."""

    def __init__(self, tmp_path: Path, env: dict[str, str], daemon_factory: Any, claude: str) -> None:
        super().__init__(tmp_path, env, daemon_factory, "claudehome")
        self.claude = claude
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

    def fake(self, scenario: Any) -> FakeAnthropic:
        fake = FakeAnthropic(scenario, self.tmp / f"anthropic-log-{len(self.fakes)}.jsonl").start()
        self.fakes.append(fake)
        self.env["ANTHROPIC_BASE_URL"] = fake.base_url
        return fake

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
        super().cleanup()


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
