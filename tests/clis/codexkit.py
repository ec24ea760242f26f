"""The Codex kit: the pinned Codex CLI (tests/codex, scripts/install-codex.sh) in an
isolated ``CODEX_HOME`` talking to the fake Responses API (``fake_responses``) only.

Offline: ``--disable plugins -c analytics.enabled=false`` on every run (without them
Codex resolves and tries github.com / chatgpt.com for the curated plugins and OTLP
metrics); no login, the fake key comes from ``FAKE_API_KEY`` (``env_key``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from cliworld import RUN_TIMEOUT, CliWorld, json_lines, require_cli
from fake_responses import FakeResponses

OFFLINE_FLAGS = ["--disable", "plugins", "-c", "analytics.enabled=false"]


def codex_bin() -> str:
    return require_cli("Codex CLI", "ROOST_CODEX_BIN", "codex", "codex", "ROOST_REQUIRE_CODEX")


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class CodexKit(CliWorld):
    """One test's Codex: ``CODEX_HOME`` with config.toml (+ hooks.json), the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "codex", binary)
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir()
        self.env.update({"CODEX_HOME": str(self.codex_home), "FAKE_API_KEY": "fake-codex-key"})
        self.fake: FakeResponses | None = None

    def start_fake(self, scenario: Any) -> FakeResponses:
        self.fake = FakeResponses(scenario, self.root / "responses.jsonl").start()
        return self.fake

    def configure(self, *, mcp: bool = False, hooks: dict[str, str] | None = None) -> None:
        """Write config.toml (the fake provider; the ping MCP server when MCP) and, for
        HOOKS (event -> text pushed), hooks.json running ``hook.py``."""
        assert self.fake is not None, "start_fake first"
        lines = [
            'model = "fake-model"',
            'model_provider = "fake"',
            'approval_policy = "never"',
            'sandbox_mode = "workspace-write"',
            "",
            "[model_providers.fake]",
            'name = "Fake local"',
            f"base_url = {toml_string(self.fake.base_url)}",
            'env_key = "FAKE_API_KEY"',
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
        ]
        if mcp:
            command, args, env = self.mcp_server()
            lines += [
                "",
                "[mcp_servers.pingsrv]",
                f"command = {toml_string(command)}",
                f"args = [{', '.join(toml_string(a) for a in args)}]",
                "env = { " + ", ".join(f"{k} = {toml_string(v)}" for k, v in env.items()) + " }",
                "startup_timeout_sec = 60",
                "tool_timeout_sec = 60",
                # approval_policy = never refuses an MCP call unless its tools are approved.
                'default_tools_approval_mode = "approve"',
                # Wait for the server before the first request (else Codex waits ~1 s and
                # sends the request without its tools).
                "required = true",
            ]
        (self.codex_home / "config.toml").write_text("\n".join(lines) + "\n")
        if hooks:
            entries: dict[str, list[dict[str, Any]]] = {}
            for event, text in hooks.items():
                entry: dict[str, Any] = {"hooks": [{"type": "command", "command": self.hook_command(event, text), "timeout": 30}]}
                if event in ("PreToolUse", "PostToolUse"):
                    entry["matcher"] = ".*"
                entries[event] = [entry]
            (self.codex_home / "hooks.json").write_text(json.dumps({"hooks": entries}))

    def exec(self, prompt: str, *, trust_hooks: bool = False) -> subprocess.CompletedProcess[str]:
        """``codex exec --json PROMPT`` (hooks run only when trusted: ``trust_hooks`` adds
        ``--dangerously-bypass-hook-trust``)."""
        return self.run(["exec", "--json", "--skip-git-repo-check", *OFFLINE_FLAGS, *(["--dangerously-bypass-hook-trust"] if trust_hooks else []), prompt])

    def resume(self, thread_id: str, prompt: str) -> subprocess.CompletedProcess[str]:
        """``codex exec resume --json THREAD_ID PROMPT``."""
        return self.run(["exec", "resume", "--json", "--skip-git-repo-check", *OFFLINE_FLAGS, thread_id, prompt])

    def trust_hooks(self) -> list[str]:
        """Trust every configured hook for good, as Codex's own UI does, through
        ``codex app-server`` (JSON-RPC, one object a line on stdio): ``initialize``, then
        ``hooks/list`` for the work folder, then ``config/batchWrite`` of
        ``hooks.state."KEY".trusted_hash = currentHash`` (written into config.toml).
        Returns the keys trusted."""
        proc = subprocess.Popen(
            [self.binary, "app-server", *OFFLINE_FLAGS], cwd=self.work, env=self.env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        )
        # A server that stops answering must not hang the test: kill it after the bound.
        watchdog = threading.Timer(RUN_TIMEOUT, lambda: os.killpg(proc.pid, signal.SIGKILL))
        watchdog.start()
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def call(number: int, method: str, params: dict[str, Any]) -> Any:
            stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}) + "\n")
            stdin.flush()
            for line in stdout:  # notifications come in between; the answer carries our id
                message = json.loads(line)
                if message.get("id") == number:
                    assert "error" not in message, message
                    return message["result"]
            raise AssertionError(f"codex app-server ended before answering {method}")

        try:
            call(1, "initialize", {"clientInfo": {"name": "roost-tests", "version": "0"}})
            stdin.write(json.dumps({"jsonrpc": "2.0", "method": "initialized"}) + "\n")
            listed = call(2, "hooks/list", {"cwds": [str(self.work)]})
            hooks = [hook for entry in listed["data"] for hook in entry["hooks"]]
            edits = [{"keyPath": f'hooks.state."{hook["key"]}"', "value": {"trusted_hash": hook["currentHash"]}, "mergeStrategy": "upsert"}
                     for hook in hooks]
            call(3, "config/batchWrite", {"edits": edits})
            return [hook["key"] for hook in hooks]
        finally:
            watchdog.cancel()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def join_roost(self, env: dict[str, str]) -> None:
        """Make a roost test's environment (``roost_env``: the daemon, its workers and the
        ``roost`` commands) this Codex world's: its HOME and CODEX_HOME, the fake key,
        no OpenAI variables, and the pinned Codex for ``--host codex`` (offline flags in
        ``ROOST_CODEX_ARGS``)."""
        for key in [k for k in env if k.startswith(("OPENAI_", "CODEX_"))]:
            env.pop(key)
        env.update({key: self.env[key] for key in ("HOME", "TMPDIR", "NO_PROXY", "CODEX_HOME", "FAKE_API_KEY")})
        env.update({"ROOST_CODEX_BIN": self.binary, "ROOST_CODEX_ARGS": " ".join(OFFLINE_FLAGS)})
        env["PATH"] = os.pathsep.join([self.env["PATH"], env.get("PATH", "")])
        self.env = env

    def rollouts(self) -> list[Path]:
        """The session files ("rollouts") Codex wrote."""
        return sorted((self.codex_home / "sessions").rglob("rollout-*.jsonl"))


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The ``exec --json`` events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"codex exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def thread_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["thread_id"] for e in events if e.get("type") == "thread.started"))


def agent_texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["item"]["text"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]
