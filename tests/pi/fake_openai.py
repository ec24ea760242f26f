"""A fake OpenAI-compatible chat-completions server (SSE) driven by a roost scenario.

The scenario format is the scripted host's (``roost_core.hosts.scripted``), so one
scenario runs on both hosts. The server is stateless: each request carries the whole
conversation, which is replayed to find where the model is:

- a *run* starts at a user-role message (a user prompt, or an agent item that pi sends as
  a user-role custom message) that follows the start or an assistant message without
  tool calls; user-role messages after a tool result are steered items inside a run;
- runs pick their scenario run exactly as the scripted host does (in order, skipping used
  ones, ``kind`` and ``match`` filters, ``default`` for the rest);
- a run's steps are compiled into model responses: ``say`` texts accumulate and go out
  with the next tool call (one model response = text + at most one tool call, as a real
  model does); ``ask``/``state`` end the run with their text; ``fail`` answers an HTTP
  error; when the steps are used up the answer is the last text said (or ``done``).

Tools: ``send``/``spawn``/``agents`` call ``roost_send``/``roost_spawn``/``roost_agents``;
``wait`` (seconds) is a slow ``bash sleep``; ``wait_for``/``touch``/``shell`` are ``bash``;
``dialog`` calls a ``confirm`` tool (a test extension); ``tool`` + ``args`` is any tool.

The scenario for a request is chosen by its ``model``: ``scenario["models"][model]`` when
present (the scripted host's convention for children), else the scenario itself.

The fake is as strict as a real model: it calls only a tool the request lists, and an
input holding an ``<agent-message`` frame that does not parse is refused, not read as a
plain reply. Either answers an API error and is kept in ``violations``; the kits fail the
test on any.

Every request body is logged as one JSON line (``{"model", "messages", "tools", "reply"}``)
so tests can assert what pi sent, in which order and framing.

Run standalone: ``python fake_openai.py SCENARIO.toml LOG.jsonl`` prints the port.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # fakemodel, run standalone too

from fakemodel import FakeModelServer, ModelRefusal, send_json, send_stream

from roost_core.hosts.scripted import load_scenario, substitute, tool_of

_ENVELOPE = re.compile(
    r'<agent-message from="([^"<>]*)" id="([^"<>]*)" relation="([^"<>]*)" kind="([^"<>]*)"'
    r'(?: msg="([^"<>]*)")?(?: reply-to="([^"<>]*)")?>\n(.*?)\n</agent-message>',
    re.DOTALL,
)
WAIT_FOR_SECONDS = 120
#: An opening or closing tag of a frame (what a reader takes for one), parsed or not.
_FRAME_TAG = re.compile(r"</?agent-message[\s>]")


def check_frames(text: str) -> None:
    """Refuse ``text`` when it holds a frame tag that is not part of a whole, parseable
    envelope (a real model could not tell its sender, kind or body)."""
    tags = len(_FRAME_TAG.findall(text))
    if tags and tags != 2 * len(_ENVELOPE.findall(text)):
        raise ModelRefusal(f"unparseable agent-message frame in an input: {text[:300]!r}")


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def parse_input(text: str) -> dict[str, str]:
    """What a scenario sees of one input message: raw body, kind and sender."""
    check_frames(text)
    match = _ENVELOPE.search(text)
    if not match:
        return {"text": text, "kind": "reply", "from": "", "from_name": "", "relation": "", "msg": "", "reply_to": ""}
    body = match[7]
    try:
        from roost_plugins.envelope import parse_envelopes

        body = parse_envelopes(text)[0]["body"]
    except (ImportError, IndexError, KeyError):
        pass  # the regex body is good enough
    return {"text": body, "kind": match[4], "from": match[2], "from_name": match[1], "relation": match[3], "msg": match[5] or "", "reply_to": match[6] or ""}


def split_runs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of a conversation: their input messages and how many model answers each had."""
    runs: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "user":
            starts = previous is None or (previous.get("role") == "assistant" and not previous.get("tool_calls"))
            if starts:
                runs.append({"inputs": [], "answers": 0})
            if starts or (runs and runs[-1]["answers"] == 0 and previous is not None and previous.get("role") == "user"):
                runs[-1]["inputs"].append(parse_input(content_text(message.get("content"))))
        elif role == "assistant" and runs:
            runs[-1]["answers"] += 1
        previous = message
    return runs


def pick_run(scenario: dict[str, Any], used: set[int], text: str, kind: str) -> tuple[int | None, list[dict[str, Any]]]:
    for index, run in enumerate(scenario.get("run", [])):
        if index in used:
            continue
        if run.get("kind") and run["kind"] != kind:
            continue
        if run.get("match") and not re.search(run["match"], text):
            continue
        return index, list(run.get("steps", []))
    default = scenario.get("default")
    if isinstance(default, dict):
        return None, list(default.get("steps", []))
    return None, [{"say": "ok"}]


def pi_tool(step: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The tool call a scenario step makes in pi (pi's tools: bash, the roost tools...)."""
    name, args = tool_of(step)
    if name is None:
        return None
    if name == "sleep":
        return "bash", {"command": f"sleep {float(args.get('seconds', 0))}"}
    if name == "wait_for":
        # No command substitution: Gemini CLI blocks a command that has one ("Command
        # injection detected"), and the slow tool would end at once.
        wait = shlex.quote(f"until [ -e {shlex.quote(str(args['path']))} ]; do sleep 0.05; done")
        return "bash", {"command": f"timeout {float(args.get('timeout', WAIT_FOR_SECONDS))} sh -c {wait} && echo found"}
    if name == "touch":
        return "bash", {"command": f"date +%s.%N > {shlex.quote(str(args['path']))}"}
    return name, args


def compile_responses(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's steps as the model's answers: ``{"text", "tool"?, "error"?}``."""
    responses: list[dict[str, Any]] = []
    texts: list[str] = []
    last_said = ""
    for step in steps:
        if "say" in step:
            texts.append(str(step["say"]))
            last_said = str(step["say"])
            continue
        if "ask" in step:
            responses.append({"text": "\n".join([*texts, str(step["ask"])])})
            return responses
        if "state" in step:
            responses.append({"text": "\n".join([*texts, str(step.get("text", ""))]) or str(step["state"])})
            return responses
        if "fail" in step:
            responses.append({"error": str(step["fail"])})
            return responses
        call = pi_tool(step)
        if call is None:
            raise ValueError(f"unknown scenario step {step!r}")
        responses.append({"text": "\n".join(texts), "tool": call})
        texts = []
    responses.append({"text": "\n".join(texts) or last_said or "done"})
    return responses


def scenario_for(scenario: dict[str, Any], model: str) -> dict[str, Any]:
    models = scenario.get("models")
    if isinstance(models, dict):
        for key in (model, model.split("/")[-1]):
            if isinstance(models.get(key), dict):
                return load_scenario(models[key])
    return scenario


def tools_of(body: dict[str, Any]) -> set[str]:
    """The tool names a chat-completions request lists."""
    return {str(tool.get("function", {}).get("name")) for tool in body.get("tools") or [] if isinstance(tool, dict)}


def answer(scenario: dict[str, Any], body: dict[str, Any], tools: set[str] | None = None) -> dict[str, Any]:
    """The model's answer to one request. A tool call is made only to a tool the request
    lists (``tools``, in the scenario's names; the request's own list when None): a real
    model cannot call one it was not given, so calling it is a :class:`ModelRefusal`."""
    offered = tools_of(body) if tools is None else tools
    model = str(body.get("model", ""))
    scenario = scenario_for(scenario, model)
    runs = split_runs(body.get("messages") or [])
    if not runs:
        return {"text": "nothing to answer"}
    used: set[int] = set()
    steps: list[dict[str, Any]] = []
    inputs: list[dict[str, str]] = []
    for run in runs:
        inputs = run["inputs"]
        text = "\n".join(item["text"] for item in inputs)
        first_kind = inputs[0]["kind"] if inputs else "reply"
        index, steps = pick_run(scenario, used, text, first_kind)
        if index is not None:
            used.add(index)
    agent_input = next((item for item in inputs if item["from"]), None)
    variables = {
        "input": "\n".join(item["text"] for item in inputs),
        "from": agent_input["from"] if agent_input else "",
        "from_name": agent_input["from_name"] if agent_input else "",
        "msg": agent_input["msg"] if agent_input else "",
        "kind": inputs[0]["kind"] if inputs else "reply",
        "run": str(len(runs)),
        **{str(k): str(v) for k, v in (scenario.get("vars") or {}).items()},
    }
    responses = compile_responses([substitute(step, variables) for step in steps])
    position = runs[-1]["answers"]
    reply = responses[position] if position < len(responses) else {"text": responses[-1].get("text") or "done"}
    if reply.get("tool") and reply["tool"][0] not in offered:
        raise ModelRefusal(f"the scenario calls the tool {reply['tool'][0]!r}, which the request does not list (it lists {sorted(offered)})")
    return reply


class FakeOpenAI(FakeModelServer):
    """The server, on 127.0.0.1 and a free port, in a thread of the test process."""

    name = "fake-openai"

    def __init__(self, scenario: Any, log_path: str | Path, *, delay: float = 0.0) -> None:
        super().__init__(scenario, log_path)
        self.delay = delay

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def logged(self, body: dict[str, Any]) -> dict[str, Any]:
        """The messages and the tools' names."""
        return {"messages": body.get("messages"), "tools": [tool.get("function", {}).get("name") for tool in body.get("tools") or []]}

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        """The model list."""
        models = ["fake-model", *(self.scenario.get("models") or {})]
        send_json(handler, 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})

    def post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """A chat completion, streamed."""
        reply = self.reply(lambda: answer(self.scenario, body))
        self.log(body, reply)
        self.wait_if_held(reply)
        if self.delay:
            time.sleep(self.delay)
        if "error" in reply:
            send_json(handler, 400, {"error": {"message": reply["error"], "type": "invalid_request_error"}})
            return
        chunks = sse_chunks(str(body.get("model", "fake-model")), reply)
        send_stream(handler, [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks] + [b"data: [DONE]\n\n"])


def sse_chunks(model: str, reply: dict[str, Any]) -> list[dict[str, Any]]:
    completion = "chatcmpl-" + uuid.uuid4().hex[:12]
    base = {"id": completion, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if reply.get("text"):
        chunks.append(chunk({"content": reply["text"]}))
    tool = reply.get("tool")
    if tool:
        name, args = tool
        call_id = "call_" + uuid.uuid4().hex[:10]
        chunks.append(chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}))
        chunks.append(chunk({}, "tool_calls"))
    else:
        chunks.append(chunk({}, "stop"))
    # Usage as the real API reports it (a last chunk with no choices); pi prices it.
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
             "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}
    chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def main() -> int:  # pragma: no cover - a manual helper
    scenario, log = sys.argv[1], sys.argv[2]
    fake = FakeOpenAI(scenario, log).start()
    print(fake.port, flush=True)
    try:
        fake.thread.join()
    except KeyboardInterrupt:
        fake.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
