"""Session files: JSONL, one entry a line, in pi's v3 shape.

The worker (through its host) is the only writer of a job's session file. Entries that
roost adds carry the queue ``seq`` so a restarted worker can drop items it already holds:
agent items as ``custom_message`` entries of type ``pi-roost-agent-message`` with
``details.seq``; user replies as ``message`` entries with a ``roost: {seq, kind}`` field.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

from roost_core.records import TranscriptEntry

AGENT_MESSAGE_TYPE = "pi-roost-agent-message"
#: A custom entry that only records a seq (pi writes it for a dialog answer).
SEQ_ENTRY_TYPE = "pi-roost-seq"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_entries(path: str | Path) -> list[dict[str, Any]]:
    """Every complete entry of a session file; a torn last line (a crash mid-write) is skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def seqs_in(entries: list[dict[str, Any]]) -> set[int]:
    """The queue seqs already written into a transcript (the restore check)."""
    seqs: set[int] = set()
    for entry in entries:
        seq = None
        message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
        if entry.get("type") == "custom_message" and entry.get("customType") == AGENT_MESSAGE_TYPE:
            seq = (entry.get("details") or {}).get("seq")
        elif isinstance(entry.get("roost"), dict):
            seq = entry["roost"].get("seq")
        elif isinstance(message.get("roost"), dict):
            seq = message["roost"].get("seq")  # pi: a reply's seq on its user message
        elif entry.get("type") == "custom" and entry.get("customType") == SEQ_ENTRY_TYPE:
            seq = (entry.get("data") or {}).get("seq")  # pi: a dialog answer
        if isinstance(seq, int) and not isinstance(seq, bool):
            seqs.add(seq)
    return seqs


def usage_of(entry: dict[str, Any]) -> tuple[int, float]:
    """``(tokens, cost)`` an assistant message entry records (pi's ``message.usage``:
    ``totalTokens``, else input + output + cache; ``cost.total``); ``(0, 0.0)`` for any
    other entry."""
    message = entry.get("message") if entry.get("type") == "message" else None
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return 0, 0.0
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return 0, 0.0

    def number(value: Any) -> float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0

    tokens = number(usage.get("totalTokens")) or sum(number(usage.get(key)) for key in ("input", "output", "cacheRead", "cacheWrite"))
    cost = usage.get("cost")
    return int(tokens), number(cost.get("total")) if isinstance(cost, dict) else 0.0


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def parse_entry(raw: dict[str, Any]) -> TranscriptEntry:
    kind = str(raw.get("type", ""))
    if kind == "message":
        message = raw.get("message") or {}
        return TranscriptEntry(type=kind, role=message.get("role"), text=content_text(message.get("content")), raw=raw)
    if kind == "custom_message":
        return TranscriptEntry(
            type=kind,
            text=content_text(raw.get("content")),
            custom_type=raw.get("customType"),
            details=dict(raw.get("details") or {}),
            raw=raw,
        )
    return TranscriptEntry(type=kind, raw=raw)


class SessionWriter:
    """Appends entries to one session file, chaining ``id``/``parentId`` as pi does.

    Each entry is written with one ``write`` call on an ``O_APPEND`` descriptor, so a crash
    leaves at most a torn last line, which readers skip.
    """

    def __init__(self, path: str | Path, *, cwd: str | None = None, session_id: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = read_entries(self.path)
        self.entries = existing
        self.session_id = session_id
        self.last_id: str | None = None
        for entry in existing:
            if entry.get("type") == "session":
                self.session_id = entry.get("id", self.session_id)
            elif entry.get("id"):
                self.last_id = entry["id"]
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if self._has_torn_tail():
            os.write(self._fd, b"\n")
        if not any(entry.get("type") == "session" for entry in existing):
            self.session_id = self.session_id or str(uuid.uuid4())
            self._write({"type": "session", "version": 3, "id": self.session_id, "timestamp": now_iso(), "cwd": cwd})

    def _has_torn_tail(self) -> bool:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return False
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            return fh.read(1) != b"\n"

    def _write(self, entry: dict[str, Any]) -> dict[str, Any]:
        os.write(self._fd, json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
        self.entries.append(entry)
        return entry

    def append(self, entry_type: str, **fields: Any) -> dict[str, Any]:
        entry_id = uuid.uuid4().hex[:8]
        entry = {"type": entry_type, "id": entry_id, "parentId": self.last_id, "timestamp": now_iso(), **fields}
        self.last_id = entry_id
        return self._write(entry)

    def message(self, role: str, content: Any, **extra: Any) -> dict[str, Any]:
        return self.append("message", message={"role": role, "content": content, **extra.pop("message_extra", {})}, **extra)

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


def parse_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One session-file line as entries for the render plugin: a pi/roost line is one
    entry; a Claude Code line is what the model read from it (see ``roost_core.claude``)."""
    if isinstance(raw.get("sessionId"), str):
        from roost_core.claude.transcript import entries_of

        return entries_of(raw)
    return [parse_entry(raw)]


def iter_rendered(pm: Any, path: str | Path) -> Iterator[str]:
    from roost_core.policy import render_entry

    for raw in read_entries(path):
        for entry in parse_entries(raw):
            text = render_entry(pm, entry)
            if text:
                yield text
