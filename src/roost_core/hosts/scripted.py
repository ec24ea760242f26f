"""The scripted host: a deterministic agent loop driven by a scenario, no network.

It behaves like a real agent loop: each step is one model call; a tool step is followed
by its tool result and then a tool boundary, where steered items are written into the
transcript before the next model call. A scenario (TOML or a dict)::

    [[run]]                      # each run answers one input, in order
    steps = [
      { say = "Looking at it" },
      { tool = "bash", args = { command = "ls" } },
      { ask = "Which branch?" },  # ends the run needing input
    ]
    [[run]]
    match = "main"               # only an input matching this regex takes this run
    steps = [{ say = "Merged." }]
    [default]                    # inputs with no run left
    steps = [{ say = "ok: {input}" }]

Steps: ``say``, ``tool`` (+``args``), ``wait`` (seconds of a slow tool), ``wait_for`` (a
path to appear), ``touch`` (a path to create), ``send`` ({to, message, ...}), ``agents``
({watch?}), ``spawn`` ({task, ...}), ``shell`` (a command), ``ask``, ``dialog``, ``fail``,
``state``. A top-level ``usage = { input = N, output = M, cost = X }`` is what every model
call reports (written on each assistant message as pi does; a step's own ``usage`` wins),
so a tree's budget can be spent without a model.
Strings may use ``{input}``, ``{from}``, ``{from_name}``, ``{msg}`` (the agent item's
message id, to answer with ``reply_to``), ``{kind}``, ``{job}``, ``{name}``, ``{run}``,
``{parent}``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import anyio

from roost_core import faults, locks
from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.queue import Item
from roost_core.transcript import (
    AGENT_MESSAGE_TYPE,
    SessionWriter,
    inspect_session,
    seqs_in,
    usage_of,
)

log = logging.getLogger("roost.worker")

RUN_MARKER = "roost-run"
SEGMENT_MARKER = "roost-run-segment"
#: A run answers at most this many rounds of items steered in at its last boundary.
MAX_SEGMENTS = 50
WAIT_FOR_TIMEOUT = 120.0
TOOL_OUTPUT_CHARS = 20_000

DEFAULT_SCENARIO: dict[str, Any] = {
    "default": {
        "steps": [
            {"say": "Working on: {input}"},
            {"tool": "sleep", "args": {"seconds": 0}},
            {"say": "Done: {input}"},
        ]
    }
}

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


class ScenarioError(ValueError):
    """A scenario that cannot be read."""


def load_scenario(source: Any) -> dict[str, Any]:
    """A scenario from a dict, TOML text, a file path, or a bundled scenario's name."""
    if source is None:
        return DEFAULT_SCENARIO
    if isinstance(source, dict):
        scenario = source
    elif isinstance(source, str):
        if source.lstrip().startswith("{"):
            try:
                return load_scenario(json.loads(source))
            except ValueError as exc:
                raise ScenarioError(f"scenario is not valid JSON: {exc}") from exc
        if "\n" in source or "=" in source:
            text = source  # TOML text, never tried as a file name
        elif (bundled := SCENARIO_DIR / f"{source}.toml").is_file():
            text = bundled.read_text()
        elif Path(source).is_file():
            text = Path(source).read_text()
        else:
            bundled_names = ", ".join(sorted(path.stem for path in SCENARIO_DIR.glob("*.toml")))
            raise ScenarioError(f"no scenario {source!r}: not a file, and not a bundled scenario (bundled: {bundled_names})")
        try:
            scenario = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"scenario is not valid TOML: {exc}") from exc
    else:
        raise ScenarioError("scenario must be a table, TOML text or a path")
    runs = scenario.get("run", [])
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise ScenarioError("scenario: run must be an array of tables")
    for run in [*runs, scenario.get("default") or {}]:
        if not isinstance(run.get("steps", []), list):
            raise ScenarioError("scenario: steps must be an array")
    return scenario


def substitute(value: Any, variables: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in variables.items():
            value = value.replace("{" + key + "}", replacement)
        return value
    if isinstance(value, dict):
        return {key: substitute(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, variables) for item in value]
    return value


class ScriptedHost:
    def __init__(self) -> None:
        self.writer: SessionWriter | None = None
        self.lock: locks.WriterLock | None = None
        self.services: WorkerServices | None = None
        self.job: JobInfo | None = None
        self.scenario: dict[str, Any] = DEFAULT_SCENARIO
        self.used_runs: set[int] = set()
        self.run_count = 0
        self.fresh: list[Item] = []
        #: Agent items written since the last model call: the next one has them (seen).
        self.unseen: list[int] = []
        #: What the session's model calls cost so far (summed from its file at open).
        self.tokens = 0
        self.cost = 0.0

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job = job
        self.services = services
        self.scenario = load_scenario(job.scenario)
        self.lock = locks.WriterLock(job.session)
        self.lock.acquire()
        for line in inspect_session(job.session).describe(job.session):
            log.warning("%s", line)  # the job's log says what this resume skips
        self.writer = SessionWriter(job.session, cwd=job.cwd)
        for entry in self.writer.entries:
            tokens, cost = usage_of(entry)
            self.tokens, self.cost = self.tokens + tokens, self.cost + cost
            if entry.get("type") == "custom" and entry.get("customType") in (RUN_MARKER, SEGMENT_MARKER):
                self.run_count += entry.get("customType") == RUN_MARKER
                data = entry.get("data")
                index = data.get("index") if isinstance(data, dict) else None
                if isinstance(index, int):
                    self.used_runs.add(index)
        if self.tokens or self.cost:
            services.usage_total(self.tokens, self.cost)
        return seqs_in(self.writer.entries)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.lock is not None:
            self.lock.release()

    # ------------------------------------------------------------------ entries

    def write_item(self, item: Item) -> None:
        """Write an input item as its own transcript entry, then let it be acked."""
        assert self.writer is not None and self.services is not None
        if item.kind == "reply":
            self.writer.message("user", [{"type": "text", "text": item.content}], roost={"seq": item.seq, "kind": item.kind})
        else:
            self.writer.append(
                "custom_message",
                customType=AGENT_MESSAGE_TYPE,
                content=item.content,
                display=True,
                details={
                    "seq": item.seq,
                    "from": item.sender,
                    "fromName": item.sender_name,
                    "relation": item.relation,
                    "kind": item.kind,
                    "trace": item.trace,
                    "hops": item.hops,
                    **item_ids(item),
                },
            )
        if item.is_agent_item:
            faults.point("worker.after_message_end_before_ack")
            self.unseen.append(item.seq)
        self.services.delivered(item)

    def boundary(self) -> None:
        """A tool boundary: steered items land here, before the next model call."""
        assert self.services is not None
        for item in self.services.take_steer():
            faults.point("worker.after_steer_before_message_end")
            self.write_item(item)
            self.fresh.append(item)

    def assistant(self, content: list[dict[str, Any]], stop: str, usage: Any = None) -> None:
        """One model call's answer, with the usage the scenario says it cost. The call
        held the agent items written since the last one: they are seen."""
        assert self.writer is not None and self.services is not None
        if self.unseen:
            self.services.seen(self.unseen)
            self.unseen = []
        extra: dict[str, Any] = {"stopReason": stop, "model": "scripted"}
        usage = usage if isinstance(usage, dict) else self.scenario.get("usage")
        if isinstance(usage, dict):
            numbers = {key: usage.get(key, 0) for key in ("input", "output", "cost")}
            if not all(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 for value in numbers.values()):
                raise ValueError(f"scenario usage must hold non-negative numbers: {usage!r}")
            extra["usage"] = {
                "input": int(numbers["input"]),
                "output": int(numbers["output"]),
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": int(numbers["input"]) + int(numbers["output"]),
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": float(numbers["cost"])},
            }
        entry = self.writer.message("assistant", content, message_extra=extra)
        tokens, cost = usage_of(entry)
        if tokens or cost:
            self.tokens += tokens
            self.cost += cost
            self.services.usage_total(self.tokens, self.cost)

    # ------------------------------------------------------------------ runs

    def pick_run(self, text: str, kind: str) -> tuple[int | None, list[dict[str, Any]]]:
        for index, run in enumerate(self.scenario.get("run", [])):
            if index in self.used_runs:
                continue
            if run.get("kind") and run["kind"] != kind:
                continue
            if run.get("match") and not re.search(run["match"], text):
                continue
            return index, list(run.get("steps", []))
        default = self.scenario.get("default")
        if isinstance(default, dict):
            return None, list(default.get("steps", []))
        return None, [{"say": "ok"}]

    def plan(self, inputs: list[Item]) -> tuple[int | None, list[dict[str, Any]], dict[str, str]]:
        """The steps that answer ``inputs``, and the variables they may use."""
        assert self.job is not None
        first = inputs[0]
        text = "\n".join(item.text or item.content for item in inputs)
        index, steps = self.pick_run(text, first.kind)
        if index is not None:
            self.used_runs.add(index)
        agent_item = next((item for item in inputs if item.sender), None)
        variables = {
            "input": text,
            "from": (agent_item.sender or "") if agent_item else "",
            "from_name": (agent_item.sender_name or "") if agent_item else "",
            "msg": (agent_item.msg_id or "") if agent_item else "",
            "kind": first.kind,
            "job": self.job.id,
            "name": self.job.name,
            "run": str(self.run_count),
            "parent": self.job.parentPeer or "",
        }
        return index, steps, variables

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.writer is not None and self.job is not None
        used_before = set(self.used_runs)
        self.run_count += 1
        index, steps, variables = self.plan(items)
        try:
            self.writer.append(
                "custom",
                customType=RUN_MARKER,
                data={"index": index, "causes": [{"seq": item.seq, "kind": item.kind, "from": item.sender} for item in items]},
            )
        except OSError:
            # Not in the file, so not begun: the retry picks the same scenario run.
            self.run_count -= 1
            self.used_runs = used_before
            raise
        for item in items:
            self.write_item(item)
        final_text = ""
        # Items steered in during the run reach the model's later calls; the scripted
        # model answers each before the run ends, as a real agent loop would.
        work: list[tuple[list[dict[str, Any]], dict[str, str]]] = [(steps, variables)]
        answered = 0
        while work:
            steps, variables = work.pop(0)
            self.fresh = []
            for raw_step in steps:
                outcome = await self.step(substitute(raw_step, variables))
                if isinstance(outcome, RunOutcome):
                    return RunOutcome(outcome.state, outcome.final_text or final_text, outcome.question, outcome.error)
                if isinstance(outcome, str):
                    final_text = outcome
            for item in self.fresh[: max(MAX_SEGMENTS - answered, 0)]:
                answered += 1
                index, item_steps, item_variables = self.plan([item])
                self.writer.append("custom", customType=SEGMENT_MARKER, data={"index": index, "seq": item.seq})
                work.append((item_steps, item_variables))
        return RunOutcome("done", final_text)

    async def step(self, step: dict[str, Any]) -> RunOutcome | str | None:
        """One model call. Returns a settled outcome, the assistant text, or None."""
        if "say" in step:
            self.assistant([{"type": "text", "text": str(step["say"])}], "stop", step.get("usage"))
            return str(step["say"])
        if "ask" in step:
            question = str(step["ask"])
            self.assistant([{"type": "text", "text": question}], "stop", step.get("usage"))
            return RunOutcome("needs_input", question, question=question)
        if "fail" in step:
            error = str(step["fail"])
            self.assistant([{"type": "text", "text": ""}], "error")
            return RunOutcome("failed", "", error=error)
        if "state" in step:
            return RunOutcome(str(step["state"]), str(step.get("text", "")))
        tool, args = tool_of(step)
        if tool is None:
            raise ValueError(f"unknown scenario step {step!r}")
        await self.tool_call(tool, args, step.get("usage"))
        return None

    async def tool_call(self, name: str, args: dict[str, Any], usage: Any = None) -> None:
        assert self.writer is not None and self.services is not None
        call_id = "call_" + uuid.uuid4().hex[:8]
        self.assistant([{"type": "toolCall", "id": call_id, "name": name, "arguments": args}], "toolUse", usage)
        ok, output, answer = await self.execute(name, args)
        extra = {"roost": {"seq": answer.seq, "kind": answer.kind, "dialog": True}} if answer else {}
        self.writer.message(
            "toolResult",
            [{"type": "text", "text": output[:TOOL_OUTPUT_CHARS]}],
            message_extra={"toolCallId": call_id, "toolName": name, "isError": not ok},
            **extra,
        )
        if answer is not None:
            self.services.delivered(answer)
        self.boundary()

    async def execute(self, name: str, args: dict[str, Any]) -> tuple[bool, str, Item | None]:
        """Run a tool: ``(ok, output, the dialog answer item if the tool opened a dialog)``."""
        assert self.services is not None
        if name in self.services.tool_names():
            ok, text = await self.services.call_tool(name, args)
            return ok, text, None
        if name == "sleep":
            await anyio.sleep(float(args.get("seconds", 0)))
            return True, "slept", None
        if name == "wait_for":
            path = Path(str(args["path"]))
            deadline = time.monotonic() + float(args.get("timeout", WAIT_FOR_TIMEOUT))
            while not path.exists():
                if time.monotonic() > deadline:
                    return False, f"timed out waiting for {path}", None
                await anyio.sleep(0.02)
            return True, f"{path} exists", None
        if name == "touch":
            Path(str(args["path"])).write_text(json.dumps({"pid": os.getpid(), "time": time.time()}))
            return True, "touched", None
        if name == "bash":
            assert self.services is not None
            result = await self.services.run_command(["bash", "-c", str(args.get("command", ""))], cwd=self.job.cwd if self.job else None)
            output = (result.stdout + result.stderr).decode("utf-8", "replace")
            return result.returncode == 0, output, None
        if name == "confirm":
            answer = await self.services.dialog(str(args.get("question", "Continue?")), [str(o) for o in args.get("options") or []])
            return True, answer.text or answer.content, answer
        return False, f"unknown tool {name!r}", None


def item_ids(item: Item) -> dict[str, Any]:
    """The message id, the id it answers and its broadcast scope, for an entry's details
    (only those it has)."""
    ids = {"id": item.msg_id, "replyTo": item.reply_to, "replyQuote": item.reply_quote, "scope": item.scope}
    return {key: value for key, value in ids.items() if value}


SHORTHANDS = {
    "send": "roost_send",
    "spawn": "roost_spawn",
    "agents": "roost_agents",
}


def tool_of(step: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    if "tool" in step:
        return str(step["tool"]), dict(step.get("args") or {})
    if "wait" in step:
        return "sleep", {"seconds": float(step["wait"])}
    if "wait_for" in step:
        return "wait_for", {"path": step["wait_for"]}
    if "touch" in step:
        return "touch", {"path": step["touch"]}
    if "shell" in step:
        return "bash", {"command": step["shell"]}
    if "dialog" in step:
        # ``options``: a choice (``roost answer`` takes only one of them); else any text.
        return "confirm", {"question": step["dialog"], **({"options": list(step["options"])} if step.get("options") else {})}
    for key, tool in SHORTHANDS.items():
        if key in step:
            value = step[key]
            return tool, dict(value) if isinstance(value, dict) else {}
    return None, {}
