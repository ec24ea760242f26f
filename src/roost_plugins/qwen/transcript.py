"""What a Qwen Code session file says roost items reached, and how it reads for people.

Qwen Code writes each session to ``<qwen home>/projects/<cwd>/chats/<id>.jsonl``, one
record a line: ``{uuid, parentUuid, sessionId, type: user|assistant|tool_result|system,
message{role, parts}, usageMetadata?}``. roost never writes into it; it reads:

- which queue seqs it holds: a ``user`` record (a prompt roost wrote: the task, replies,
  agent items at the end of a turn) whose text starts with the marker line ``[roost seq
  ...]``, and a ``tool_result`` whose output ends with a ``PostToolUse`` hook's context
  (Qwen Code appends it to the tool's output, ``<`` and ``>`` escaped as ``&lt;`` and
  ``&gt;``), which starts with the marker line;
- what the session spent: every model answer (``assistant``) carries ``usageMetadata``.

A ``Stop`` hook's reason is never written there (``tests/clis/test_qwen.py``), which is why
the host hands items over at the end of a turn as a new prompt, not by blocking the stop.
"""

from __future__ import annotations

import json
from typing import Any

from roost_core.envelope_rules import NO_USER_AUTHORITY
from roost_core.hosts.handover import MARKER, handed_items, marked_seqs
from roost_core.hosts.process import SessionTail
from roost_core.records import TranscriptEntry

#: What ends a run of framed items in a prompt (:func:`roost_core.envelope_rules.one_notice`).
NOTICE_TAIL = "\n" + NO_USER_AUTHORITY


def record_text(message: Any) -> str:
    """The text parts of a record's ``message``, joined."""
    parts = message.get("parts") if isinstance(message, dict) else None
    return "".join(str(part.get("text", "")) for part in parts or [] if isinstance(part, dict) and part.get("text"))


def tool_outputs(message: Any) -> list[tuple[str, str]]:
    """``(tool name, output text)`` of each function response in a ``tool_result``."""
    found = []
    parts = message.get("parts") if isinstance(message, dict) else None
    for part in parts or []:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(response, dict):
            body = response.get("response") or {}
            output = body.get("output") if isinstance(body, dict) else None
            if output is None and isinstance(body, dict):
                output = body.get("error", "")
            found.append((str(response.get("name", "tool")), output if isinstance(output, str) else json.dumps(output)))
    return found


def is_hand_over(context: str) -> bool:
    """Whether ``context`` (unescaped) is one roost hand-over: a marker line, then as many
    framed items as it names seqs. A marker line inside a tool's own output or inside a
    message's body is not one (what follows it is not whole frames, one per seq)."""
    seqs = marked_seqs(context)
    body = context.split("\n", 1)[1] if "\n" in context else ""
    return bool(seqs) and body.startswith("<agent-message ") and len(handed_items(context)) == len(seqs)


def split_hook_context(output: str) -> tuple[str, str]:
    """A tool's output and the hook context Qwen Code appended to it (``""`` when there
    is none): the context starts at the last marker line that begins a whole hand-over
    (:func:`is_hand_over`) running to the output's end."""
    lines = output.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if MARKER.match(lines[index].strip()):
            context = "\n".join(lines[index:])
            if is_hand_over(unescaped(context)):
                return "\n".join(lines[:index]), context
    return output, ""


def unescaped(context: str) -> str:
    """A hook's context as roost wrote it: Qwen Code escapes ``<`` and ``>`` in every
    hook's ``additionalContext`` (the model reads ``&lt;agent-message ...&gt;``)."""
    return context.replace("&lt;", "<").replace("&gt;", ">")


def record_seqs(record: dict[str, Any]) -> list[int]:
    """The queue seqs one record holds (see the module docstring)."""
    kind = record.get("type")
    if kind == "user" and not record.get("subtype"):
        return marked_seqs(record_text(record.get("message")))
    if kind == "tool_result":
        return [seq for _name, output in tool_outputs(record.get("message")) for seq in marked_seqs(split_hook_context(output)[1])]
    return []


def record_tokens(record: dict[str, Any]) -> int:
    """The tokens one model answer counts (``usageMetadata.totalTokenCount``)."""
    usage = record.get("usageMetadata") if record.get("type") == "assistant" else None
    total = usage.get("totalTokenCount") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else 0


class SessionSeqs:
    """Reads a session file as it grows: ``seqs`` found so far, ``tokens`` spent."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seqs: set[int] = set()
        self.tokens = 0
        self._tail = SessionTail(path)

    def scan(self) -> set[int]:
        """Read what was appended; return the seqs found in it."""
        records, from_start = self._tail.read()
        if from_start:  # the first read, or the file was rewritten: count again
            self.tokens = 0
        found: set[int] = set()
        for record in records:
            found.update(record_seqs(record))
            self.tokens += record_tokens(record)
        self.seqs |= found
        return found


def seqs_in_session(path: str) -> set[int]:
    """The queue seqs the session file ``path`` holds; ``ValueError`` for a path that is
    not a Qwen Code session file's."""
    from roost_plugins.qwen import QwenError, session_id_of

    try:
        session_id_of(path)
    except QwenError as exc:
        raise ValueError(str(exc)) from exc
    reader = SessionSeqs(path)
    reader.scan()
    return reader.seqs


# ---------------------------------------------------------------------- for people (roost log)


def prompt_entries(text: str, raw: dict[str, Any]) -> list[TranscriptEntry]:
    """A prompt roost wrote (marker, then items): the user's words (a task, a reply) as
    the user's message, agent items as agent messages."""
    if not marked_seqs(text):
        return [TranscriptEntry(type="message", role="user", text=text, raw=raw)]
    body = text.split("\n", 1)[1] if "\n" in text else ""
    agents = handed_items(text)
    for entry in agents:
        # The no-user-authority notice after a run of frames is the frames', not the user's.
        body = body.replace(entry.text + NOTICE_TAIL, "").replace(entry.text, "")
    words = body.strip()
    own = [TranscriptEntry(type="message", role="user", text=words, raw=raw)] if words else []
    return [*own, *agents]


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One Qwen Code record as the entries the render plugin knows (pi's shapes): prompts,
    answers, tool results, and roost's hand-overs as agent messages. Qwen Code's own
    bookkeeping (``system`` records) is not shown."""
    kind = raw.get("type")
    message = raw.get("message")
    if kind == "user":
        text = record_text(message)
        return prompt_entries(text, raw) if text else []
    if kind == "assistant":
        calls = []
        for part in (message or {}).get("parts") or []:
            call = part.get("functionCall") if isinstance(part, dict) else None
            if isinstance(call, dict):
                args = call.get("args") or {}
                # MCP tools are called through the bridge tool ``tool_call``: show the real one.
                if call.get("name") == "tool_call" and isinstance(args, dict) and isinstance(args.get("name"), str):
                    calls.append({"type": "toolCall", "name": args["name"], "arguments": args.get("arguments")})
                else:
                    calls.append({"type": "toolCall", "name": call.get("name"), "arguments": args})
        text = record_text(message)
        if not text and not calls:
            return []
        return [TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": calls}})]
    if kind == "tool_result":
        out: list[TranscriptEntry] = []
        for name, output in tool_outputs(message):
            result, context = split_hook_context(output)
            shaped = {"message": {"role": "toolResult", "toolName": name, "isError": False}}
            out.append(TranscriptEntry(type="message", role="toolResult", text=result, raw=shaped))
            out.extend(handed_items(unescaped(context)))
        return out
    return []
