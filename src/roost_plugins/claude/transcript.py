"""What a Claude Code transcript says roost items reached.

Claude Code writes each session to a JSONL file (``<config>/projects/<cwd>/<id>.jsonl``),
appending as it goes. roost never writes into it; it reads which queue seqs are there:

- a task or user reply is the ``user`` entry whose ``uuid`` roost chose
  (:func:`roost_plugins.claude.prompt_uuid`), or, for a reply Claude Code took into a running
  turn ("The user sent a new message while you were working"), the ``queued_command``
  attachment whose ``source_uuid`` is that uuid (no ``user`` entry is written for it);
- agent items handed over by a hook are a ``hook_additional_context`` attachment
  (``PostToolUse``, ``UserPromptSubmit``) or a ``hook_blocking_error`` attachment (a
  blocked ``Stop``) whose text starts with the marker line ``[roost seq ...]``;
- items taken with ``roost_inbox`` are that tool's result, which starts with the marker.

Only texts roost wrote whole are read for a marker (a hook's output, roost_inbox's result),
never a tool output or a prompt, so a peer cannot fake one by getting it printed.
"""

from __future__ import annotations

from typing import Any

from roost_core.hosts.handover import handed_items, marked_seqs
from roost_core.hosts.process import SessionTail
from roost_core.records import TranscriptEntry
from roost_plugins.claude import WAKE_PROMPT, seq_of_prompt_uuid

INBOX_SUFFIX = "__roost_inbox"


def entry_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def message_tokens(usage: Any) -> int:
    """The tokens one Anthropic ``usage`` counts: input, output and both cache counts."""
    if not isinstance(usage, dict):
        return 0
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return sum(int(value) for key in keys if isinstance(value := usage.get(key), int) and not isinstance(value, bool) and value > 0)


def result_usage(event: dict[str, Any]) -> tuple[int, float]:
    """``(tokens, cost)`` of a stream-json ``result``: the session's totals so far (Claude
    Code keeps them across ``--resume``), summed over its models' ``modelUsage``."""
    tokens = 0
    models = event.get("modelUsage")
    for usage in models.values() if isinstance(models, dict) else []:
        if isinstance(usage, dict):
            keys = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
            tokens += sum(int(v) for key in keys if isinstance(v := usage.get(key), (int, float)) and not isinstance(v, bool) and v > 0)
    cost = event.get("total_cost_usd")
    return tokens, float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0 else 0.0


class TranscriptSeqs:
    """Reads a transcript as it grows; ``seqs`` is every queue seq found so far, ``tokens``
    and ``cost`` what the session spent (below)."""

    def __init__(self, path: str, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        self.seqs: set[int] = set()
        #: Each model answer's tokens, by its message id: Claude Code writes one line per
        #: content block of an answer, each with the answer's usage.
        self._answers: dict[str, int] = {}
        #: Their sum: the tokens of every model answer the transcript holds so far.
        self.tokens = 0
        #: The session's cost so far, from the ``cost-state`` line Claude Code writes as it
        #: exits (a running total, kept across ``--resume``).
        self.cost = 0.0
        self._tail = SessionTail(path)
        #: tool_use id -> tool name, to know which tool results are roost_inbox's.
        self._tools: dict[str, str] = {}

    def scan(self) -> set[int]:
        """Read what was appended; return the seqs found in it."""
        entries, from_start = self._tail.read()
        if from_start:  # the first read, or the file was rewritten: count everything again
            self._answers, self.tokens, self.cost = {}, 0, 0.0
        found: set[int] = set()
        for entry in entries:
            found.update(self.entry_seqs(entry))
        self.seqs |= found
        return found

    def entry_seqs(self, entry: dict[str, Any]) -> list[int]:
        kind = entry.get("type")
        if kind == "cost-state":
            cost = entry.get("totalCostUSD")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > self.cost:
                self.cost = float(cost)
            return []
        if kind == "assistant":
            message = entry.get("message") or {}
            if isinstance(message.get("id"), str) and message.get("model") != "<synthetic>":
                tokens = message_tokens(message.get("usage"))
                self.tokens += tokens - self._answers.get(message["id"], 0)
                self._answers[message["id"]] = tokens
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    self._tools[str(block.get("id"))] = str(block.get("name"))
            return []
        if kind == "attachment":
            attachment = entry.get("attachment") or {}
            if attachment.get("type") == "hook_additional_context":
                return [seq for text in attachment.get("content") or [] if isinstance(text, str) for seq in marked_seqs(text)]
            if attachment.get("type") == "hook_blocking_error":
                blocking = attachment.get("blockingError") or {}
                return marked_seqs(str(blocking.get("blockingError") or ""))
            if attachment.get("type") == "queued_command":
                own = seq_of_prompt_uuid(self.session_id, str(attachment.get("source_uuid") or ""))
                return [] if own is None else [own]
            return []
        if kind != "user":
            return []
        seqs: list[int] = []
        own = seq_of_prompt_uuid(self.session_id, str(entry.get("uuid") or ""))
        if own is not None:
            seqs.append(own)
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, list):
            for block in content:
                if (
                    isinstance(block, dict)
                    and block.get("type") == "tool_result"
                    and self._tools.get(str(block.get("tool_use_id")), "").endswith(INBOX_SUFFIX)
                ):
                    seqs.extend(marked_seqs(entry_text(block.get("content"))))
        return seqs


def seqs_in_transcript(path: str, session_id: str) -> set[int]:
    reader = TranscriptSeqs(path, session_id)
    reader.scan()
    return reader.seqs


def seqs_in_session(path: str) -> set[int]:
    """The queue seqs the transcript ``path`` holds (its name is its session id);
    ``ValueError`` for a path that is not a Claude Code transcript's."""
    from roost_plugins.claude import ClaudeError, session_id_of

    try:
        session_id = session_id_of(path)
    except ClaudeError as exc:
        raise ValueError(str(exc)) from exc
    return seqs_in_transcript(path, session_id)


# ---------------------------------------------------------------------- for people (roost log)


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One Claude Code line as the entries the render plugin knows (pi's shapes): user and
    assistant messages (a user message taken into a running turn too, which Claude Code
    writes as a ``queued_command`` attachment), tool results, and roost's hand-overs as
    agent messages. Claude Code's own bookkeeping (other attachments, queue operations,
    request blobs) is not shown."""
    kind = raw.get("type")
    message = raw.get("message") or {}
    content = message.get("content")
    if kind == "user" and not raw.get("isMeta"):
        if isinstance(content, str):
            return [] if content == WAKE_PROMPT else [TranscriptEntry(type="message", role="user", text=content, raw=raw)]
        out = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                shaped = {"message": {"role": "toolResult", "toolName": "tool", "isError": bool(block.get("is_error"))}}
                out.append(TranscriptEntry(type="message", role="toolResult", text=entry_text(block.get("content")), raw=shaped))
            elif block.get("type") == "text":
                out.append(TranscriptEntry(type="message", role="user", text=str(block.get("text", "")), raw=raw))
        return out
    if kind == "assistant":
        parts = [
            {"type": "toolCall", "name": block.get("name"), "arguments": block.get("input")}
            for block in content or []
            if isinstance(block, dict) and block.get("type") == "tool_use"
        ]
        text = entry_text(content)
        if not text and not parts:
            return []
        return [TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": parts}})]
    if kind == "attachment":
        attachment = raw.get("attachment") or {}
        if attachment.get("type") == "hook_additional_context":
            return [entry for text in attachment.get("content") or [] if isinstance(text, str) for entry in handed_items(text)]
        if attachment.get("type") == "hook_blocking_error":
            return handed_items(str((attachment.get("blockingError") or {}).get("blockingError") or ""))
        if attachment.get("type") == "queued_command" and attachment.get("commandMode") == "prompt" and not raw.get("isMeta"):
            # The user's message taken into a running turn: Claude Code writes no user
            # entry for it, only this.
            text = entry_text(attachment.get("prompt"))
            return [] if not text or text == WAKE_PROMPT else [TranscriptEntry(type="message", role="user", text=text, raw=raw)]
    return []
