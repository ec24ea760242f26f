"""The pi test kit's helpers: find pi, an isolated pi world per test (``PiKit``), tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import agent_items, wait_until
from fake_openai import FakeOpenAI
from hostkit import HostKit, JsonLinesProgram, Tmux, offline_env, require_program

__all__ = ["COST_PER_CALL", "KIT", "PiKit", "RpcPi", "agent_items", "find_pi", "message_text", "need_pi", "roost_bin", "user_messages"]

KIT = Path(__file__).resolve().parent


def find_pi() -> str | None:
    configured = os.environ.get("ROOST_PI_BIN")
    if configured:
        return configured
    local = KIT / "node_modules" / ".bin" / "pi"
    if local.exists():
        return str(local)
    return shutil.which("pi")


def need_pi() -> str:
    """The pi to test; the test skips without one (fails with ROOST_REQUIRE_PI=1)."""
    return require_program(find_pi(), "pi", "ROOST_REQUIRE_PI", "scripts/install-pi.sh")


def roost_bin() -> str:
    """The ``roost`` executable the pi extension runs: $ROOST_BIN, or this environment's."""
    if os.environ.get("ROOST_BIN"):
        return os.environ["ROOST_BIN"]
    beside = Path(sys.executable).parent / "roost"
    return str(beside) if beside.exists() else (shutil.which("roost") or "roost")


#: What the fake models cost, in pi's units (per million tokens), and so what one fake
#: model call (10 tokens in, 5 out: fake_openai's usage) costs.
MODEL_COST = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}
COST_PER_CALL = (10 * MODEL_COST["input"] + 5 * MODEL_COST["output"]) / 1e6


class PiKit(HostKit):
    """One test's pi world: folders, env, fake model, daemon and tmux sessions."""

    def __init__(self, tmp_path: Path, env: dict[str, str], daemon_factory: Any, pi: str) -> None:
        super().__init__(tmp_path, env, daemon_factory, "pihome")
        self.pi = pi
        self.agent_dir = self.home / ".pi" / "agent"
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        offline_env(env, self.home, self.tmpdir, drop=[key for key in env if key.endswith("_API_KEY") or (key.startswith("PI_") and key != "PI_OFFLINE")])
        node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        env.update(
            {
                "PI_CODING_AGENT_DIR": str(self.agent_dir),
                "PI_OFFLINE": "1",
                "FAKE_LLM_API_KEY": "fake-key",
                "ROOST_PI_BIN": pi,
                "ROOST_BIN": roost_bin(),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(Path(pi).parent), node_dir, env.get("PATH", "/usr/bin:/bin")]),
            }
        )
        self.tmux: dict[str, Tmux] = {}
        self.rpcs: list[RpcPi] = []

    # -------------------------------------------------------------- model

    def fake(self, scenario: Any, *, delay: float = 0.0) -> FakeOpenAI:
        """Start the fake model and point pi at it (models.json, default model)."""
        fake = FakeOpenAI(scenario, self.tmp / f"model-log-{len(self.fakes)}.jsonl", delay=delay).start()
        self.fakes.append(fake)
        ids = ["fake-model", *[str(k) for k in (fake.scenario.get("models") or {})]]
        # Priced (per million tokens), so pi records a cost for every call as it does for a
        # real model: a fake call (10 in, 5 out) costs COST_PER_CALL.
        models = [{"id": i, "name": i, "reasoning": False, "input": ["text"], "contextWindow": 128000, "maxTokens": 4096, "cost": MODEL_COST} for i in ids]
        provider = {
            "baseUrl": fake.base_url,
            "api": "openai-completions",
            "apiKey": "FAKE_LLM_API_KEY",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": models,
        }
        (self.agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": provider}}))
        self.update_settings({"defaultProvider": "fake", "defaultModel": "fake-model", "quietStartup": True})
        return fake

    def update_settings(self, values: dict[str, Any]) -> None:
        path = self.agent_dir / "settings.json"
        settings = json.loads(path.read_text()) if path.exists() else {}
        settings.update(values)
        path.write_text(json.dumps(settings, indent=2))

    # -------------------------------------------------------------- roost

    def roost(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([self.env["ROOST_BIN"], *args], env=self.env, capture_output=True, text=True, timeout=60, check=check)

    # -------------------------------------------------------------- tmux

    def tmux_start(self, name: str, command: list[str], cwd: Path, width: int = 160, height: int = 50) -> str:
        """``command`` in its own tmux server; the session's name, for the calls below."""
        if shutil.which("tmux") is None:
            require_program(None, "tmux", "ROOST_REQUIRE_PI", "apt-get install tmux")
        tmux = Tmux(name, command, self.env, cwd, self.tmp, prefix="roost-pi", width=width, height=height)
        self.tmux[tmux.session] = tmux
        return tmux.session

    def tmux_screen(self, session: str) -> str:
        return self.tmux[session].screen()

    def wait_screen(self, session: str, text: str, timeout: float = 60.0) -> str:
        """Wait until ``text`` is on the screen; a timeout shows the screen."""
        return self.tmux[session].wait_screen(text, timeout)

    def type_line(self, session: str, text: str, timeout: float = 20.0) -> None:
        """Type ``text`` into the TUI's editor once it takes input, then press Enter."""
        deadline = time.monotonic() + timeout
        while True:
            self.tmux_keys(session, "-l", text)
            try:
                self.wait_screen(session, text, timeout=2)
                break
            except AssertionError:
                # Not taking input yet: clear whatever arrived and try again.
                self.tmux_keys(session, "C-u")
                if time.monotonic() > deadline:
                    raise
        self.tmux_keys(session, "Enter")

    def tmux_keys(self, session: str, *keys: str) -> None:
        self.tmux[session].keys(*keys)

    def require_socket_command(self) -> None:
        """The foreground extension runs `roost daemon socket`: fail clearly without it."""
        result = self.roost("daemon", "socket", check=False)
        assert result.returncode == 0, f"`{self.env['ROOST_BIN']} daemon socket` failed: {result.stderr.strip()}"

    def rpc_pi(self, session: Path | None, cwd: Path, extra: list[str] | None = None) -> RpcPi:
        """A pi in RPC mode on ``session`` (None: pi picks, e.g. with ``--fork`` in ``extra``)."""
        self.require_socket_command()
        pi = RpcPi(self, session, cwd, extra)
        self.rpcs.append(pi)
        return pi

    def cleanup(self) -> None:
        for pi in self.rpcs:
            pi.close()
        for tmux in self.tmux.values():
            tmux.kill()
        super().cleanup()


# ------------------------------------------------------------------ helpers for the tests


def slow_tool_scenario(gate: Path, default: str = "ok: {input}") -> dict[str, Any]:
    """A scenario whose first run calls a tool that waits until the file ``gate`` exists,
    then says "after the slow tool"; every later run says ``default``."""
    return {
        "run": [{"steps": [{"wait_for": str(gate)}, {"say": "after the slow tool"}]}],
        "default": {"steps": [{"say": default}]},
    }


def delegating_parent(spawns: list[dict[str, Any]], said: str, asker: str, models: dict[str, Any]) -> dict[str, Any]:
    """The scenario of a pi parent of children on several hosts (the mixed-tree tests): its
    task ``delegate ...`` spawns a child for each of ``spawns`` (a spawn step's arguments)
    and says ``said``; a report asking "Which colour" is answered by sending ``blue`` to
    ``asker``; any other report is noted. ``models`` holds the children's scenarios."""
    return {
        "run": [
            {"match": "^delegate", "steps": [*({"spawn": spawn} for spawn in spawns), {"say": said}]},
            {"kind": "report", "match": "Which colour", "steps": [
                {"send": {"to": asker, "message": "blue"}},
                {"say": "answered the painter"},
            ]},
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": models,
    }


def reports_to(daemon: Any, job: str) -> list[dict[str, Any]]:
    """The reports in pi job ``job``'s session file (its children's, as the parent read them)."""
    return [e for e in daemon.entries(job) if e.get("type") == "custom_message" and (e.get("details") or {}).get("kind") == "report"]


def user_messages(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("type") == "message" and (e.get("message") or {}).get("role") == "user"]


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.05) -> Any:
    """The suite's poller (``conftest.wait_until``) with this kit's defaults."""
    return wait_until(predicate, timeout, interval=interval, what=what)


class RpcPi(JsonLinesProgram):
    """A pi in RPC mode driven by a test: commands in, events collected by a thread.

    Without ``bridge`` it is a *foreground* pi as far as roost is concerned (RPC mode has a
    UI: dialogs go over the protocol), with the roost extension loaded by ``-e``.
    """

    def __init__(self, kit: PiKit, session: Path | None, cwd: Path, extra: list[str] | None = None) -> None:
        from roost_plugins.pi import extension_path

        self.responses: dict[str, dict[str, Any]] = {}
        self.ids = 0
        argv = [kit.pi, "--mode", "rpc", *(["--session", str(session)] if session is not None else []), "-e", str(extension_path()), *(extra or [])]
        super().__init__(argv, kit.env, cwd)

    def keep(self, frame: dict[str, Any]) -> bool:
        """pi's answers to commands, by their id."""
        if frame.get("type") == "response" and frame.get("id"):
            self.responses[frame["id"]] = frame
            return True
        return False

    def send(self, command: dict[str, Any]) -> str:
        self.ids += 1
        request_id = f"t{self.ids}"
        self.write({"id": request_id, **command})
        return request_id

    def call(self, command: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        request_id = self.send(command)
        return wait_for(lambda: self.responses.get(request_id), timeout, what=f"pi's answer to {command['type']}")

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for event in self.events if event.get("type") == kind)

    def prompt(self, text: str, timeout: float = 60.0) -> None:
        """Send a prompt and wait until the run it starts has ended."""
        ends = self.count("agent_end")
        answer = self.call({"type": "prompt", "message": text})
        assert answer.get("success"), answer
        wait_for(lambda: self.count("agent_end") > ends, timeout, what=f"the run for {text!r}")

    def state(self) -> dict[str, Any]:
        return self.call({"type": "get_state"})["data"]
