"""The OpenCode kit: the pinned OpenCode (tests/opencode, scripts/install-opencode.sh) with
isolated XDG folders talking to the fake chat-completions API (``fake_chat``) only.

Offline: the ``OPENCODE_DISABLE_*`` variables below, ``autoupdate: false`` and
``share: "disabled"``, and the config folder seeded so that OpenCode's first-start
``npm install`` of ``@opencode-ai/plugin`` into it is skipped: OpenCode skips it when the
folder has a ``node_modules`` and a ``package-lock.json`` whose root lists every
dependency of its ``package.json`` plus ``@opencode-ai/plugin`` (read from the 1.18.33
binary's ``Npm.install``). Without the seed every first start goes to the npm registry
(about 80 s of retries when it is unreachable).

The prompt goes on stdin: ``opencode run`` wraps a message argument holding spaces in
literal quotes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cliworld import HERE, CliWorld, json_lines, require_cli
from fake_chat import TITLE_MODEL, FakeChat

PLUGIN_VERSION = "1.18.33"


def opencode_bin() -> str:
    return require_cli("OpenCode", "ROOST_OPENCODE_BIN", "opencode", "opencode", "ROOST_REQUIRE_OPENCODE")


class OpenCodeKit(CliWorld):
    """One test's OpenCode: XDG folders, ``opencode.json``, the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "opencode", binary)
        xdg = {name: self.root / "xdg" / name for name in ("config", "data", "state", "cache")}
        for folder in xdg.values():
            folder.mkdir(parents=True)
        self.config_dir = xdg["config"] / "opencode"
        self.data_dir = xdg["data"] / "opencode"
        self.plugin_log = self.root / "plugin.jsonl"
        self.env.update({f"XDG_{name.upper()}_HOME": str(folder) for name, folder in xdg.items()})
        self.env.update({
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "ROOST_TEST_HOOK_LOG": str(self.plugin_log),
        })
        self.fake: FakeChat | None = None

    def start_fake(self, scenario: Any, servers: tuple[str, ...] = ("pingsrv",)) -> FakeChat:
        """The fake model; SERVERS are the MCP servers whose tools it calls by their own
        names (``roost`` for roost's tools in a job: ``roost_roost_send``)."""
        self.fake = FakeChat(scenario, self.root / "chat.jsonl", dialect="opencode", servers=servers).start()
        return self.fake

    def configure(self, *, mcp: bool = False, plugin: dict[str, str] | None = None, model: str = "fake-model", permission: dict[str, str] | None = None,
                  seed: bool = True) -> None:
        """Write opencode.json (the fake provider with MODEL as its default model,
        ``small_model`` the fake's title model, the ping MCP server when MCP) and seed the
        config folder; PLUGIN (the ``ROOST_TEST_*`` variables of ``opencode_plugin.js``)
        installs that plugin. The fakes route a request by its model id (a scenario's
        ``models``), so a tree whose hosts share one scenario gives OpenCode a MODEL of its own.
        PERMISSION replaces the ``permission`` config (default: everything allowed). Without
        SEED the folder holds opencode.json only, as a user's whose OpenCode never installed
        its plugin package there."""
        assert self.fake is not None, "start_fake first"
        limit = {"context": 128000, "output": 4096}
        config: dict[str, Any] = {
            "$schema": "https://opencode.ai/config.json",  # else OpenCode writes it into the file
            "autoupdate": False,
            "share": "disabled",
            "model": f"fake/{model}",
            "small_model": f"fake/{TITLE_MODEL}",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible", "name": "Fake",
                "options": {"baseURL": self.fake.base_url, "apiKey": "fake-opencode-key"},
                "models": {model: {"name": "Fake", "tool_call": True, "limit": limit},
                           TITLE_MODEL: {"name": "Fake titles", "tool_call": False, "limit": limit}},
            }},
            "permission": permission if permission is not None else {"*": "allow"},
        }
        if mcp:
            command, args, env = self.mcp_server()
            config["mcp"] = {"pingsrv": {"type": "local", "command": [command, *args], "environment": env}}
        self.config_dir.mkdir(exist_ok=True)
        (self.config_dir / "opencode.json").write_text(json.dumps(config))
        if seed:
            dependencies = {"@opencode-ai/plugin": PLUGIN_VERSION}
            (self.config_dir / "package.json").write_text(json.dumps({"dependencies": dependencies}))
            (self.config_dir / "package-lock.json").write_text(json.dumps({"packages": {"": {"dependencies": dependencies}}}))
            (self.config_dir / "node_modules").mkdir(exist_ok=True)
        if plugin is not None:
            (self.config_dir / "plugins").mkdir(exist_ok=True)
            shutil.copy(HERE / "opencode_plugin.js", self.config_dir / "plugins" / "roost_test.js")
            self.env.update(plugin)

    def prompt(self, text: str, *, session: str | None = None) -> subprocess.CompletedProcess[str]:
        """``opencode run --format json`` with TEXT on stdin (``-s SESSION`` first when given)."""
        return self.run(["run", *(["-s", session] if session else []), "--format", "json"], stdin=text)

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """``opencode serve`` on a free port of 127.0.0.1 (``--port 0`` is not "any port":
        it listens on 4096), yielding its URL once it says it listens; its process group is
        killed on the way out."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(
            [self.binary, "serve", "--port", str(port), "--hostname", "127.0.0.1"], cwd=self.work, env=self.env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # ends when the server exits
                if "listening on" in line:
                    break
            else:
                raise AssertionError(f"opencode serve exited {proc.wait()} before listening")
            yield f"http://127.0.0.1:{port}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def plugin_calls(self) -> list[dict[str, Any]]:
        if not self.plugin_log.exists():
            return []
        return [json.loads(line) for line in self.plugin_log.read_text().splitlines() if line.strip()]

    def db(self) -> sqlite3.Connection:
        """OpenCode's store: SQLite at $XDG_DATA_HOME/opencode/opencode.db."""
        return sqlite3.connect(self.data_dir / "opencode.db")


def post(url: str, body: dict[str, Any]) -> Any:
    """POST JSON to an ``opencode serve`` endpoint (always with a timeout: a request sent
    while the server starts can hang)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=180) as response:
        return json.loads(response.read() or b"null")


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The ``run --format json`` events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"opencode exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def session_id(events: list[dict[str, Any]]) -> str:
    return str(events[0]["sessionID"])


def texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["part"]["text"] for e in events if e.get("type") == "text"]
