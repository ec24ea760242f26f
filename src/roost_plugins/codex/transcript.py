"""A Codex session file (a "rollout", ``$CODEX_HOME/sessions/Y/M/D/rollout-TIME-THREAD.jsonl``):
which queue seqs it holds, what it spent, and how ``roost log`` and the view show it.

Each line is ``{"timestamp", "type", "payload"}``. roost reads three kinds:

- ``response_item`` messages: the prompts roost gave (``user``), the hook contexts
  (``developer``), a blocked stop's reason (a ``user`` message wrapped in
  ``<hook_prompt ...>``, its text HTML-escaped) and the model's answers
  (``assistant``); ``function_call`` and ``function_call_output`` are tool calls and
  their results;
- ``event_msg`` ``token_count``: ``info.total_token_usage`` is the thread's running total.

Every text roost hands to Codex starts with the marker line ``[roost seq ...]``
(:func:`roost_core.hosts.handover.marker`), so the rollout itself says which items Codex has taken.
Only user and developer messages count: the model may quote a marker in its answers.
"""

from __future__ import annotations

import html
import re
from typing import Any

from roost_core.hosts.handover import handed_items, marked_seqs
from roost_core.hosts.process import SessionTail
from roost_core.records import TranscriptEntry

_HOOK_PROMPT = re.compile(r"^<hook_prompt[^>]*>(.*)</hook_prompt>$", re.DOTALL)
#: The user messages Codex writes itself (its environment, AGENTS.md, skills).
CODEX_OWN = ("<environment_context>", "<user_instructions>", "<skills", "# AGENTS.md", "<permissions")


def message_text(payload: dict[str, Any]) -> str:
    """The text of a Responses message item (its text parts joined)."""
    content = payload.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def handed_text(payload: dict[str, Any]) -> str | None:
    """The text a user or developer message carries from roost or the user (a blocked
    stop's reason unwrapped); None for other messages."""
    if payload.get("type") != "message" or payload.get("role") not in ("user", "developer"):
        return None
    text = message_text(payload)
    wrapped = _HOOK_PROMPT.match(text.strip())
    # Codex escapes a blocked stop's reason inside its <hook_prompt> (``&lt;`` for ``<``).
    return html.unescape(wrapped[1]) if wrapped else text


def line_seqs(raw: dict[str, Any]) -> list[int]:
    """The queue seqs one rollout line holds."""
    if raw.get("type") != "response_item":
        return []
    text = handed_text(raw.get("payload") or {})
    return marked_seqs(text) if text else []


def line_tokens(raw: dict[str, Any]) -> int | None:
    """The thread's tokens so far when this line is a ``token_count`` (None otherwise)."""
    payload = raw.get("payload") or {}
    if raw.get("type") != "event_msg" or payload.get("type") != "token_count":
        return None
    total = (payload.get("info") or {}).get("total_token_usage") or {}
    tokens = total.get("total_tokens")
    return int(tokens) if isinstance(tokens, int) else None


class RolloutSeqs:
    """A rollout read as it grows: the seqs it holds and the thread's tokens."""

    def __init__(self, path: str) -> None:
        self.tail = SessionTail(path)
        self.seqs: set[int] = set()
        self.tokens = 0

    def scan(self) -> set[int]:
        entries, from_start = self.tail.read()
        if from_start:
            self.seqs, self.tokens = set(), 0
        for raw in entries:
            self.seqs.update(line_seqs(raw))
            tokens = line_tokens(raw)
            if tokens is not None:
                self.tokens = max(self.tokens, tokens)
        return self.seqs


def seqs_in_session(path: str) -> set[int]:
    """The queue seqs a job's session (its rollout) holds; none before Codex wrote it."""
    return RolloutSeqs(path).scan()


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One rollout line as the entries the render plugin knows (pi's shapes): the prompts,
    the answers, tool calls and results, and roost's hand-overs as agent messages. Codex's
    own context (instructions, environment, skills) and bookkeeping are not shown."""
    if raw.get("type") != "response_item":
        return []
    payload = raw.get("payload") or {}
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        if role == "assistant":
            text = message_text(payload)
            return [TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": []}})] if text else []
        handed = handed_text(payload)
        if handed is None:
            return []
        text = handed
        seqs = marked_seqs(text)
        if seqs:
            agent_items = handed_items(text)
            if agent_items:
                return agent_items
            text = text.split("\n", 1)[1] if "\n" in text else ""  # the user's own words
            return [TranscriptEntry(type="message", role="user", text=text, raw=raw)] if text else []
        if role == "user" and not text.lstrip().startswith(CODEX_OWN):
            return [TranscriptEntry(type="message", role="user", text=text, raw=raw)]
        return []
    if kind == "function_call":
        call = {"type": "toolCall", "name": payload.get("name"), "arguments": payload.get("arguments")}
        return [TranscriptEntry(type="message", role="assistant", text="", raw={"message": {"role": "assistant", "content": [call]}})]
    if kind == "function_call_output":
        output = payload.get("output")
        shaped = {"message": {"role": "toolResult", "toolName": "tool", "isError": False}}
        return [TranscriptEntry(type="message", role="toolResult", text=output if isinstance(output, str) else str(output), raw=shaped)]
    return []
