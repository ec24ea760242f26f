"""The Qwen Code kit: the pinned Qwen Code (tests/qwen, scripts/install-qwen.sh) with an
isolated ``~/.qwen`` talking to the fake chat-completions API (``fake_chat``, dialect
``qwen``) only.

Offline: ``settings.json`` turns off usage statistics, telemetry, auto-update and the
extra model calls (memory extraction, follow-up suggestions), plus
``QWEN_TELEMETRY_ENABLED=false``, ``QWEN_USAGE_STATISTICS_ENABLED=false`` and
``QWEN_CODE_NO_RELAUNCH=1``; the endpoint and a fake key come from ``OPENAI_*``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from cliworld import CliWorld, json_lines, require_cli
from fake_chat import FakeChat
from hostkit import HostKit, offline_env


def qwen_bin() -> str:
    return require_cli("Qwen Code", "ROOST_QWEN_BIN", "qwen", "qwen", "ROOST_REQUIRE_QWEN")


#: The environment and user settings that keep Qwen Code offline and free of its own extra
#: model calls (memory extraction and consolidation, next-prompt suggestions).
OFFLINE_ENV = {
    "OPENAI_API_KEY": "fake-qwen-key", "OPENAI_MODEL": "fake-model", "QWEN_CODE_NO_RELAUNCH": "1",
    "QWEN_TELEMETRY_ENABLED": "false", "QWEN_USAGE_STATISTICS_ENABLED": "false",
}
OFFLINE_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True},
    "model": {"name": "fake-model"},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    "ui": {"enableFollowupSuggestions": False},
}


class QwenKit(CliWorld):
    """One test's Qwen Code: ``~/.qwen/settings.json`` and the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "qwen", binary)
        self.env.update(OFFLINE_ENV)
        self.fake: FakeChat | None = None

    def start_fake(self, scenario: Any) -> FakeChat:
        self.fake = FakeChat(scenario, self.root / "chat.jsonl", dialect="qwen").start()
        self.env["OPENAI_BASE_URL"] = self.fake.base_url
        return self.fake

    def configure(self, *, mcp: bool = False, hooks: dict[str, str] | None = None) -> None:
        """Write ~/.qwen/settings.json (the ping MCP server when MCP, trusted; HOOKS:
        event -> text pushed)."""
        settings = json.loads(json.dumps(OFFLINE_SETTINGS))
        if mcp:
            command, args, env = self.mcp_server()
            settings["mcpServers"] = {"pingsrv": {"command": command, "args": args, "env": env, "trust": True}}
        if hooks:
            settings["hooks"] = {
                event: [{**({"matcher": ".*"} if event in ("PreToolUse", "PostToolUse") else {}),
                         "hooks": [{"type": "command", "command": self.hook_command(event, text)}]}]
                for event, text in hooks.items()
            }
        folder = self.home / ".qwen"
        folder.mkdir(exist_ok=True)
        (folder / "settings.json").write_text(json.dumps(settings))

    def prompt(self, text: str, *, resume: str | None = None) -> subprocess.CompletedProcess[str]:
        """``qwen -p TEXT --output-format stream-json`` (``--resume ID`` first when given)."""
        return self.run([*(["--resume", resume] if resume else []), "-p", text, "--output-format", "stream-json"])

    def chats(self) -> list[Path]:
        """The session files (``~/.qwen/projects/<cwd, / as ->/chats/<session id>.jsonl``)."""
        return sorted((self.home / ".qwen" / "projects").rglob("chats/*.jsonl"))


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The stream-json events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"qwen exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def session_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["session_id"] for e in events if e.get("type") == "system" and e.get("subtype") == "init"))


def assistant_texts(events: list[dict[str, Any]]) -> list[str]:
    """The text blocks of the assistant messages, in order."""
    return [block["text"] for event in events if event.get("type") == "assistant"
            for block in event["message"]["content"] if block.get("type") == "text" and block.get("text")]


class QwenHostKit(HostKit):
    """One test's world for roost's ``qwen`` host: the test's daemon environment made
    Qwen Code's (an isolated HOME with the offline user settings, the fake's endpoint and
    key), the fakes and the daemons."""

    def __init__(self, tmp_path: Path, env: dict[str, str], daemon_factory: Any, binary: str) -> None:
        super().__init__(tmp_path, env, daemon_factory, "qwenhome")
        self.binary = binary
        offline_env(env, self.home, self.tmpdir, drop=[k for k in env if k.startswith(("OPENAI_", "QWEN_", "DASHSCOPE_"))])
        node = shutil.which("node")
        path = [str(Path(sys.executable).parent), *([str(Path(node).parent)] if node else []), env.get("PATH", "/usr/bin:/bin")]
        # --yolo: nobody answers a permission prompt in a job; the scenarios' shell steps run.
        env.update({**OFFLINE_ENV, "ROOST_QWEN_BIN": binary, "ROOST_QWEN_ARGS": "--yolo", "PATH": os.pathsep.join(path)})
        self.settings_file = self.home / ".qwen" / "settings.json"
        self.settings_file.parent.mkdir(parents=True, exist_ok=True)
        # Not the kit's memory and suggestion settings: the host turns those calls off itself.
        self.settings_file.write_text(json.dumps({k: v for k, v in OFFLINE_SETTINGS.items() if k not in ("memory", "ui")}))

    def fake(self, scenario: Any) -> FakeChat:
        """Start the fake chat-completions API for ``scenario``; Qwen Code talks to it."""
        fake = FakeChat(scenario, self.tmp / f"chat-{len(self.fakes)}.jsonl", dialect="qwen").start()
        self.fakes.append(fake)
        self.env["OPENAI_BASE_URL"] = fake.base_url
        return fake


def session_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a Qwen Code session file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
