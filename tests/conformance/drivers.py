"""The host drivers of the conformance suite (``roost_core.conformance``): each host's test
kit (``tests/pi/pikit.py``, ``tests/claude/claudekit.py``, ``tests/clis/*kit.py``) behind
the one :class:`~roost_core.testing.HostDriver` interface, and each model API's requests
read as the :class:`~roost_core.testing.ModelInput` pieces the model reads.

A driver makes its kit's isolated world on the daemon's environment, starts the kit's fake
model for a scenario, names the job arguments of its host and reads what its fake logged.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from roost_core.testing import HostDriver, ModelInput

# ------------------------------------------------------------------ reading each API's requests


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return json.dumps(content)


def chat_inputs(messages: list[dict[str, Any]], *, escaped_tool_output: bool = False) -> list[ModelInput]:
    """A chat-completions request's messages (pi, OpenCode, Qwen Code). With
    ``escaped_tool_output`` (Qwen Code, which escapes ``<`` and ``>`` in a hook's context
    added to a tool's output) a tool's output is read unescaped, as the host's own
    transcript reader reads it."""
    out = []
    for message in messages:
        role = str(message.get("role"))
        role = "system" if role == "developer" else role
        text = _text(message.get("content"))
        if role == "tool" and escaped_tool_output:
            text = text.replace("&lt;", "<").replace("&gt;", ">")
        if text:
            out.append(ModelInput(role, text))
        for call in message.get("tool_calls") or []:
            out.append(ModelInput("assistant", json.dumps(call.get("function"))))
    return out


def anthropic_inputs(messages: list[dict[str, Any]]) -> list[ModelInput]:
    """A Messages API request's messages (Claude Code): each block one input."""
    out = []
    for message in messages:
        role = str(message.get("role"))
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                out.append(ModelInput(role, str(block.get("text", ""))))
            elif kind == "tool_result":
                out.append(ModelInput("tool", _text(block.get("content"))))
            elif kind == "tool_use":
                out.append(ModelInput("assistant", json.dumps(block.get("input"))))
    return out


_HOOK_PROMPT = re.compile(r"<hook_prompt[^>]*>(.*?)</hook_prompt>", re.DOTALL)


def responses_inputs(items: list[dict[str, Any]]) -> list[ModelInput]:
    """A Responses API request's ``input`` (Codex). A ``Stop`` hook's reason comes inside
    ``<hook_prompt>``, escaped by Codex: read unescaped, as a model reads it."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role"))
            text = _text(item.get("content"))
            out.append(ModelInput("system" if role == "developer" else role, _HOOK_PROMPT.sub(lambda m: html.unescape(m[1]), text)))
        elif kind == "function_call":
            out.append(ModelInput("assistant", json.dumps({"name": item.get("name"), "arguments": item.get("arguments")})))
        elif kind == "function_call_output":
            out.append(ModelInput("tool", _text(item.get("output"))))
    return out


def gemini_inputs(contents: list[dict[str, Any]]) -> list[ModelInput]:
    """A Gemini API request's ``contents`` (Gemini CLI): each part one input. A tool's
    response (with the context an ``AfterTool`` hook adds, escaped by the CLI) is read
    unescaped, as a model reads it.

    A ``--resume`` of Gemini CLI 0.61.0 replays every earlier tool response twice, the
    same part (same call id) twice in one content: its history rebuilds it from the
    ``gemini`` record's ``toolCalls[].result`` and again from the ``user`` record of the
    response it also keeps (``convertSessionToClientHistory``). Any tool's, with or
    without a hook's context: the CLI's own replay, not a second hand-over (one call's
    response is made once), so it is read once."""
    out = []
    for content in contents:
        role = "assistant" if content.get("role") == "model" else "user"
        parts: list[dict[str, Any]] = []
        for part in content.get("parts") or []:
            if "functionResponse" in part and part in parts:
                continue
            parts.append(part)
        for part in parts:
            if "text" in part and not part.get("thought"):
                out.append(ModelInput(role, str(part["text"])))
            elif "functionCall" in part:
                out.append(ModelInput("assistant", json.dumps(part["functionCall"])))
            elif "functionResponse" in part:
                response = part["functionResponse"].get("response") or {}
                output = response.get("output") if isinstance(response.get("output"), str) else json.dumps(response)
                out.append(ModelInput("tool", html.unescape(output)))
    return out


def scripted_requests(fake: Any) -> list[dict[str, Any]]:
    """The requests a CLI fake answered from the scenario (not the CLI's own side calls)."""
    return [r for r in fake.requests() if not r["reply"].get("side") and "error" not in r["reply"]]


# ------------------------------------------------------------------ the drivers


class ScriptedDriver(HostDriver):
    """roost's ``scripted`` host: the scenario is the model; what it "received" before each
    of its answers is the job's session file up to that answer (the scripted loop writes
    every input there before the model call that reads it)."""

    name = "scripted"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from roost_core.paths import resolve_paths

        self.sessions = resolve_paths(env).sessions_dir
        self.scenario: dict[str, Any] = {}

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.scenario = scenario

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "scenario": self.scenario}

    def model_requests(self) -> list[list[ModelInput]]:
        from roost_core.transcript import content_text, read_entries

        requests = []
        for path in sorted(self.sessions.glob("*.jsonl")):
            seen: list[ModelInput] = []
            for entry in read_entries(path):
                message = entry.get("message") or {}
                if entry.get("type") == "custom_message":
                    seen.append(ModelInput("user", _text(entry.get("content"))))
                elif entry.get("type") == "message":
                    role = {"toolResult": "tool"}.get(message.get("role"), str(message.get("role")))
                    if role == "assistant":
                        requests.append(list(seen))
                    seen.append(ModelInput(role, content_text(message.get("content"))))
        return requests


class PiDriver(HostDriver):
    """pi (``tests/pi/pikit.py``) against the fake chat-completions model."""

    name = "pi"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from pikit import PiKit, need_pi

        self.kit = PiKit(tmp_path, env, None, need_pi())
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.fake(scenario)

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [chat_inputs(r["messages"] or []) for r in self.fake.requests() if "error" not in r["reply"]]

    def cleanup(self) -> None:
        self.kit.cleanup()


class ClaudeDriver(HostDriver):
    """Claude Code (``tests/claude/claudekit.py``) against the fake Messages API."""

    name = "claude"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from claudekit import ClaudeKit, need_claude

        self.kit = ClaudeKit(tmp_path, env, None, need_claude())
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.fake(scenario)

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [anthropic_inputs(r["raw"] or []) for r in self.fake.requests() if "error" not in r["reply"]]

    def cleanup(self) -> None:
        self.kit.cleanup()


class CodexDriver(HostDriver):
    """Codex (``tests/clis/codexkit.py``) against the fake Responses API."""

    name = "codex"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from codexkit import CodexKit, codex_bin

        self.kit = CodexKit(tmp_path, codex_bin())
        self.kit.join_roost(env)

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.start_fake(scenario)
        self.kit.configure()

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.kit.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [responses_inputs(r["body"].get("input") or []) for r in scripted_requests(self.fake)]

    def cleanup(self) -> None:
        stop_cli_fake(self.kit.fake)


class GeminiDriver(HostDriver):
    """Gemini CLI (``tests/clis/geminikit.py``'s host kit) against the fake Gemini API."""

    name = "gemini"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from geminikit import GeminiHostKit, gemini_bin

        self.kit = GeminiHostKit(tmp_path, env, None, gemini_bin())

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.start_fake(scenario)

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.kit.cli.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [gemini_inputs(r["body"].get("contents") or []) for r in scripted_requests(self.fake)]

    def cleanup(self) -> None:
        stop_cli_fake(self.kit.fake)


class OpenCodeDriver(HostDriver):
    """OpenCode (``tests/clis/opencodekit.py``) against the fake chat-completions API,
    calling roost's tools by their MCP names (``roost_roost_send``)."""

    name = "opencode"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from opencodekit import OpenCodeKit, opencode_bin

        self.kit = OpenCodeKit(tmp_path, opencode_bin())
        self.env = env
        path = env.get("PATH")
        env.update(self.kit.env)
        if path is not None:
            env["PATH"] = path
        env["ROOST_OPENCODE_BIN"] = self.kit.binary

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.start_fake(scenario, servers=("pingsrv", "roost"))
        self.kit.configure()
        self.env.update({k: v for k, v in self.kit.env.items() if k.startswith(("XDG_", "OPENCODE_"))})

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.kit.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [chat_inputs(r["body"].get("messages") or []) for r in scripted_requests(self.fake)]

    def cleanup(self) -> None:
        stop_cli_fake(self.kit.fake)


class QwenDriver(HostDriver):
    """Qwen Code (``tests/clis/qwenkit.py``'s host kit) against the fake chat-completions API."""

    name = "qwen"

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        from qwenkit import QwenHostKit, qwen_bin

        self.kit = QwenHostKit(tmp_path, env, None, qwen_bin())
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)

    def start_model(self, scenario: dict[str, Any]) -> None:
        self.fake = self.kit.fake(scenario)

    def job_args(self) -> dict[str, Any]:
        return {"host": self.name, "cwd": str(self.work)}

    def model_requests(self) -> list[list[ModelInput]]:
        return [chat_inputs(r["body"].get("messages") or [], escaped_tool_output=True) for r in scripted_requests(self.fake)]

    def cleanup(self) -> None:
        self.kit.cleanup()


def stop_cli_fake(fake: Any) -> None:
    """Stop a CLI kit's fake model, if the test started one; a refusal fails the test."""
    if fake is None:
        return
    fake.release.set()
    fake.stop()
    assert not fake.violations, f"the fake model refused: {fake.violations}"


#: Every host's driver, by the host's name. A host with no driver here fails
#: ``test_every_registered_host_has_a_driver``; ``shell`` runs bash, not a model.
DRIVERS: dict[str, type[HostDriver]] = {
    driver.name: driver for driver in (ScriptedDriver, PiDriver, ClaudeDriver, CodexDriver, GeminiDriver, OpenCodeDriver, QwenDriver)
}
NOT_AGENT_HOSTS = {"shell": "runs each task as a bash command: no model, no agent items"}
