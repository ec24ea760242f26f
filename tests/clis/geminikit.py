"""The Gemini CLI kit: the pinned Gemini CLI (tests/gemini, scripts/install-gemini.sh) with
an isolated ``~/.gemini`` talking to the fake Gemini API (``fake_gemini``) only.

Offline: ``settings.json`` turns off usage statistics, telemetry, auto-update and the
update nag; ``GEMINI_CLI_NO_RELAUNCH=1`` keeps it in one process; the key is a fake
``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL`` points at the fake.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cliworld import CliWorld, json_lines, require_cli
from fake_gemini import FakeGemini

MODEL = "gemini-2.5-flash"


def gemini_bin() -> str:
    return require_cli("Gemini CLI", "ROOST_GEMINI_BIN", "gemini", "gemini", "ROOST_REQUIRE_GEMINI")


class GeminiKit(CliWorld):
    """One test's Gemini CLI: ``~/.gemini/settings.json`` and the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "gemini", binary)
        self.env.update({"GEMINI_API_KEY": "fake-gemini-key", "GEMINI_CLI_NO_RELAUNCH": "1"})
        self.fake: FakeGemini | None = None

    def start_fake(self, scenario: Any) -> FakeGemini:
        self.fake = FakeGemini(scenario, self.root / "gemini.jsonl").start()
        self.env["GOOGLE_GEMINI_BASE_URL"] = self.fake.origin
        return self.fake

    def configure(self, *, mcp: bool = False, hooks: dict[str, str] | None = None) -> None:
        """Write ~/.gemini/settings.json (the ping MCP server when MCP, trusted: untrusted
        MCP tools are left out of headless requests; HOOKS: event -> text pushed)."""
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "model": {"name": MODEL},
        }
        if mcp:
            command, args, env = self.mcp_server()
            settings["mcpServers"] = {"pingsrv": {"command": command, "args": args, "env": env, "trust": True}}
        if hooks:
            settings["hooks"] = {
                event: [{**({"matcher": ".*"} if event in ("BeforeTool", "AfterTool") else {}),
                         "hooks": [{"type": "command", "command": self.hook_command(event, text)}]}]
                for event, text in hooks.items()
            }
        folder = self.home / ".gemini"
        folder.mkdir(exist_ok=True)
        (folder / "settings.json").write_text(json.dumps(settings))

    def prompt(self, text: str, *, resume: str | None = None) -> subprocess.CompletedProcess[str]:
        """``gemini -p TEXT --output-format stream-json`` (``--resume ID`` first when given)."""
        return self.run([*(["--resume", resume] if resume else []), "-p", text, "--output-format", "stream-json"])

    def chats(self) -> list[Path]:
        """The session files the CLI wrote (``~/.gemini/tmp/<project>/chats/session-*.jsonl``)."""
        return sorted((self.home / ".gemini" / "tmp").rglob("chats/session-*.jsonl"))


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The stream-json events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"gemini exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def session_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["session_id"] for e in events if e.get("type") == "init"))


def assistant_texts(events: list[dict[str, Any]]) -> list[str]:
    """The assistant's messages, the deltas of each joined."""
    texts: list[str] = []
    joining = False
    for event in events:
        if event.get("type") == "message" and event.get("role") == "assistant":
            if joining and event.get("delta"):
                texts[-1] += event["content"]
            else:
                texts.append(event["content"])
            joining = bool(event.get("delta"))
        else:
            joining = False
    return texts


# ---------------------------------------------------------------------------- roost's gemini host


class GeminiHostKit:
    """A roost daemon whose jobs run the pinned Gemini CLI (host ``gemini``): the daemon's
    environment is the Gemini world's (its HOME with ``~/.gemini/settings.json``, the fake
    key and base URL), on top of the test's ``roost_env``."""

    def __init__(self, tmp_path: Path, roost_env: dict[str, str], daemon_factory: Any, binary: str) -> None:
        import os
        import sys

        self.cli = GeminiKit(tmp_path, binary)
        self.env = roost_env
        self.daemon_factory = daemon_factory
        for key in [k for k in roost_env if k.startswith(("GEMINI", "GOOGLE")) or k.endswith("_PROXY") or k.endswith("_proxy")]:
            roost_env.pop(key)
        path = [str(Path(sys.executable).parent), roost_env.get("PATH", "/usr/bin:/bin")]
        roost_env.update({
            **{k: v for k, v in self.cli.env.items() if k != "PATH"},
            "PATH": os.pathsep.join(path),
            "ROOST_GEMINI_BIN": binary,
            # A background job may run its scenario's shell steps (nobody can answer a
            # confirmation there).
            "ROOST_GEMINI_ARGS": "--approval-mode yolo",
        })

    @property
    def fake(self) -> FakeGemini | None:
        return self.cli.fake

    def start_fake(self, scenario: Any) -> FakeGemini:
        """The fake model, and ``~/.gemini/settings.json`` (offline) pointing at it."""
        fake = self.cli.start_fake(scenario)
        self.cli.configure()
        self.env["GOOGLE_GEMINI_BASE_URL"] = fake.origin
        return fake

    def daemon(self) -> Any:
        return self.daemon_factory().start()

    def roost(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``roost ARGS`` in this world."""
        import sys

        return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def log_lines(self, job: str) -> list[str]:
        shown = self.roost("log", job)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()

    def session_lines(self, job: str) -> list[dict[str, Any]]:
        """The job's whole Gemini session (``roost log --json``'s entries)."""
        shown = self.roost("log", job, "--json")
        assert shown.returncode == 0, shown.stderr
        return list(json.loads(shown.stdout)["entries"])

    def user_gemini(self, prompt: str) -> subprocess.Popen[str]:
        """The user's own ``gemini -p PROMPT --output-format stream-json`` (roost's
        environment: a ``roost mcp`` it starts finds this daemon), in its own process
        group; :meth:`finish` ends it."""
        # (yolo: the scenario runs a shell step, which a headless run asks for otherwise)
        return subprocess.Popen([self.cli.binary, "-p", prompt, "--output-format", "stream-json", "--approval-mode", "yolo"], cwd=self.cli.work, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float = 180) -> list[dict[str, Any]]:
        """Wait for a :meth:`user_gemini` to end (its group killed after, whatever
        happened); its events, asserting it exited 0."""
        import os
        import signal

        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert proc.returncode == 0, f"gemini exited {proc.returncode}\n{err[-3000:]}"
        return json_lines(out)
