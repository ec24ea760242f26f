"""Session files: JSONL, one entry a line, in pi's v3 shape.

The worker (through its host) is the only writer of a job's session file. Entries that
roost adds carry the queue ``seq`` so a restarted worker can drop items it already holds:
agent items as ``custom_message`` entries of type ``pi-roost-agent-message`` with
``details.seq``; user replies as ``message`` entries with a ``roost: {seq, kind}`` field.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from roost_core import faults, identity
from roost_core.records import AGENT_MESSAGE_TYPE, TranscriptEntry

__all__ = ["AGENT_MESSAGE_TYPE"]  # re-exported: the name its users import from here

#: A custom entry that only records a seq (pi writes it for a dialog answer).
SEQ_ENTRY_TYPE = "pi-roost-seq"


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_entries(path: str | Path) -> list[dict[str, Any]]:
    """Every complete entry of a session file; a torn last line (a crash mid-write) is
    skipped, and so is any line that is not a JSON object (:func:`inspect_session` says
    which)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return _parse(data).entries


@attrs.frozen
class SessionReport:
    """What a session file holds, and what of it a reader skips.

    ``entries`` are its JSON-object lines, in file order. ``skipped`` names each line that
    is not one (``(line number, why, bytes)``), ``torn_tail`` is the size of a last line
    with no newline (a writer that died mid-line; 0 when there is none; skipped too when it
    is not JSON), and ``odd`` says what is in an order pi would not write it (no session
    header first, several headers, an entry whose ``parentId`` names no entry before it, a
    queue seq twice or going back)."""

    entries: list[dict[str, Any]]
    skipped: list[tuple[int, str, int]]
    torn_tail: int
    odd: list[str]

    @property
    def clean(self) -> bool:
        return not (self.skipped or self.torn_tail or self.odd)

    def describe(self, path: str | Path) -> list[str]:
        """One log line per thing a reader skipped or found out of order."""
        lines = [f"session file {path}: line {number} skipped ({why}, {size} bytes)" for number, why, size in self.skipped]
        if self.torn_tail:
            lines.append(f"session file {path}: its last line is torn ({self.torn_tail} bytes, no newline); the next entry starts on a line of its own")
        lines.extend(f"session file {path}: {note}" for note in self.odd)
        return lines


def inspect_session(path: str | Path) -> SessionReport:
    """Read a session file as :func:`read_entries` does, and say what it skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return SessionReport([], [], 0, [])
    return _parse(data, inspect=True)


def _parse(data: bytes, *, inspect: bool = False) -> SessionReport:
    entries: list[dict[str, Any]] = []
    skipped: list[tuple[int, str, int]] = []
    lines = data.split(b"\n")
    torn_tail = len(lines[-1]) if lines[-1] else 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            if inspect:
                why = "torn last line" if number == len(lines) else "not JSON"
                skipped.append((number, why, len(line)))
            continue
        if isinstance(entry, dict):
            entries.append(entry)
        elif inspect:
            skipped.append((number, f"a JSON {type(entry).__name__}, not an entry", len(line)))
    return SessionReport(entries, skipped, torn_tail, _odd_order(entries) if inspect else [])


def _odd_order(entries: list[dict[str, Any]]) -> list[str]:
    odd = []
    headers = [n for n, entry in enumerate(entries) if entry.get("type") == "session"]
    if entries and (not headers or headers[0] != 0):
        odd.append("no session header first" + (f" (the first is entry {headers[0] + 1})" if headers else " (there is none)"))
    if len(headers) > 1:
        odd.append(f"{len(headers)} session headers")
    known: set[Any] = set()
    orphans = 0
    for entry in entries:
        parent = entry.get("parentId")
        if parent is not None and (not isinstance(parent, str) or parent not in known):
            orphans += 1
        if isinstance(entry.get("id"), str):
            known.add(entry["id"])
    if orphans:
        odd.append(f"{orphans} entries whose parentId names no entry before them")
    seqs = [seq for entry in entries for seq in sorted(seqs_in([entry]))]
    if len(seqs) != len(set(seqs)):
        odd.append(f"queue seqs written more than once: {sorted({s for s in seqs if seqs.count(s) > 1})[:10]}")
    back = [b for a, b in itertools.pairwise(seqs) if b < a]
    if back:
        odd.append(f"queue seqs going back ({len(back)} times, e.g. to {back[0]})")
    return odd


def _dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (foreign entries may hold any
    type where pi writes an object)."""
    return value if isinstance(value, dict) else {}


def seqs_in(entries: list[dict[str, Any]]) -> set[int]:
    """The queue seqs already written into a transcript (the restore check)."""
    seqs: set[int] = set()
    for entry in entries:
        seq = None
        message = _dict(entry.get("message"))
        if entry.get("type") == "custom_message" and entry.get("customType") == AGENT_MESSAGE_TYPE:
            seq = _dict(entry.get("details")).get("seq")
        elif isinstance(entry.get("roost"), dict):
            seq = entry["roost"].get("seq")
        elif isinstance(message.get("roost"), dict):
            seq = message["roost"].get("seq")  # pi: a reply's seq on its user message
        elif entry.get("type") == "custom" and entry.get("customType") == SEQ_ENTRY_TYPE:
            seq = _dict(entry.get("data")).get("seq")  # pi: a dialog answer
        if isinstance(seq, int) and not isinstance(seq, bool):
            seqs.add(seq)
    return seqs


def message_ids_in(entries: list[dict[str, Any]]) -> set[str]:
    """The message ids of the agent messages roost wrote into a pi-format session (each
    one's ``custom_message`` entry's ``details.id``): how a foreground session knows a
    second copy of one it holds. Read from that field only, never from a message's text,
    where a body may name any id (and so make a message not sent yet look held)."""
    ids: set[str] = set()
    for entry in entries:
        if entry.get("type") == "custom_message" and entry.get("customType") == AGENT_MESSAGE_TYPE:
            msg_id = _dict(entry.get("details")).get("id")
            if isinstance(msg_id, str) and identity.is_message_id(msg_id):
                ids.add(msg_id)
    return ids


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
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def parse_entry(raw: dict[str, Any]) -> TranscriptEntry:
    kind = str(raw.get("type", ""))
    if kind == "message":
        message = _dict(raw.get("message"))
        role = message.get("role")
        return TranscriptEntry(type=kind, role=role if isinstance(role, str) else None, text=content_text(message.get("content")), raw=raw)
    if kind == "custom_message":
        custom_type = raw.get("customType")
        return TranscriptEntry(
            type=kind,
            text=content_text(raw.get("content")),
            custom_type=custom_type if isinstance(custom_type, str) else None,
            details=dict(_dict(raw.get("details"))),
            raw=raw,
        )
    return TranscriptEntry(type=kind, raw=raw)


class SessionWriter:
    """Appends entries to one session file, chaining ``id``/``parentId`` as pi does.

    Each entry is written with one ``write`` call on an ``O_APPEND`` descriptor, so a crash
    leaves at most a torn last line, which readers skip. A write that fails (a full disk,
    an I/O error) raises ``OSError``, and what it wrote is cut off again, so the next entry
    never sticks to a torn one; the entry does not count as written.
    """

    def __init__(self, path: str | Path, *, cwd: str | None = None, session_id: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = read_entries(self.path)
        self.entries = existing
        self.session_id = session_id
        self.last_id: str | None = None
        for entry in existing:
            # Foreign or damaged entries may hold anything: only strings are ids.
            if entry.get("type") == "session":
                if isinstance(entry.get("id"), str) and entry["id"]:
                    self.session_id = entry["id"]
            elif isinstance(entry.get("id"), str) and entry["id"]:
                self.last_id = entry["id"]
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        #: A failed write left bytes that could not be cut off: the next write ends them first.
        self._torn = self._has_torn_tail()
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
        data = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        if self._torn:
            data = b"\n" + data
        size = os.fstat(self._fd).st_size
        try:
            if faults.armed("io.session.write"):
                # Fail mid-line, as a disk that fills up during the write does.
                os.write(self._fd, data[: len(data) // 2])
                faults.io("io.session.write")
                data = data[len(data) // 2:]
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            try:
                os.ftruncate(self._fd, size)
            except OSError:
                self._torn = True
            raise
        self._torn = False
        self.entries.append(entry)
        return entry

    def append(self, entry_type: str, **fields: Any) -> dict[str, Any]:
        entry_id = uuid.uuid4().hex[:8]
        entry = {"type": entry_type, "id": entry_id, "parentId": self.last_id, "timestamp": now_iso(), **fields}
        self._write(entry)
        self.last_id = entry_id  # only once written: a failed entry is no one's parent
        return entry

    def message(self, role: str, content: Any, **extra: Any) -> dict[str, Any]:
        return self.append("message", message={"role": role, "content": content, **extra.pop("message_extra", {})}, **extra)

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


def parse_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of a session file in roost's own format (pi's v3 shape) as the entries
    the render plugin sees: one. A host that writes another format reads its lines with
    its own ``HostSpec.transcript_entries`` (:func:`roost_core.hosts.transcript_reader`)."""
    return [parse_entry(raw)]


#: How one parsed line of a session file reads: a host's ``transcript_entries``.
LineReader = Callable[[dict[str, Any]], list[TranscriptEntry]]


def iter_rendered(
    pm: Any,
    path: str | Path,
    read: LineReader = parse_entries,
    receipts: dict[int, dict[str, Any]] | None = None,
    lines: list[dict[str, Any]] | None = None,
) -> Iterator[str]:
    """The rendered text of each entry of a session file that shows something, its
    lines read by ``read`` (the host's reader). ``receipts``: the receipts of the items
    the session received, by seq (the ``log`` op's ``received``): an agent item's text
    ends with what its sender's receipt says (:func:`receipt_note`). ``lines`` are the
    session's lines when the caller has them already (a host's ``transcript_lines``),
    else the file's."""
    from roost_core.policy import render_entry

    for raw in read_entries(path) if lines is None else lines:
        for entry in read(raw):
            text = render_entry(pm, entry)
            if text and receipts and entry.custom_type == AGENT_MESSAGE_TYPE:
                receipt = receipts.get(entry.details.get("seq"))  # type: ignore[arg-type]
                if receipt is not None:
                    text += "\n" + receipt_note(receipt)
            if text:
                yield text


def receipt_note(receipt: dict[str, Any], now: float | None = None) -> str:
    """One line on what became of a received item, as its sender's receipt says:
    ``↳ answered · seen 14:02:07 · answered 14:02:09`` (a day other than today by date)."""
    parts = [f"↳ {receipt.get('state')}"]
    for key in ("seen", "answered"):
        when = receipt.get(key)
        if isinstance(when, (int, float)):
            parts.append(f"{key} {clock_time(when, now)}")
    return " · ".join(parts)


def clock_time(epoch: float, now: float | None = None) -> str:
    """``epoch`` as local time of day (with the date when it is not today)."""
    then = _dt.datetime.fromtimestamp(epoch)
    today = _dt.datetime.fromtimestamp(now) if now is not None else _dt.datetime.now()
    return then.strftime("%H:%M:%S" if then.date() == today.date() else "%b %d %H:%M:%S")


def received_by_seq(received: Any) -> dict[int, dict[str, Any]]:
    """The ``log`` op's ``received`` receipts by seq (none from an older daemon)."""
    return {r["seq"]: r for r in received or () if isinstance(r, dict) and isinstance(r.get("seq"), int)}
