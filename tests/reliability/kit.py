"""Helpers of the reliability suite: a raw socket client, starting a daemon that is meant
to die, reading what arrived in transcripts, and the delivery invariant checks.

Imported as ``reliability.kit`` (``tests`` is on the pytest pythonpath).
"""

from __future__ import annotations

import json
import os
import socket
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
from conftest import wait_until

from roost_core.transcript import AGENT_MESSAGE_TYPE, read_entries
from roost_plugins.envelope import parse_envelopes

# --------------------------------------------------------------------------- raw socket


class Raw:
    """A raw connection to the daemon: bytes out, newline-delimited JSON answers in."""

    def __init__(self, path: Path, timeout: float = 15.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buffer = b""
        self.events: list[dict[str, Any]] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, frame: dict[str, Any]) -> None:
        self.send(json.dumps(frame).encode() + b"\n")

    def read(self) -> dict[str, Any]:
        """The next answer; pushed events are kept in :attr:`events`."""
        return self._answer()[1]

    def read_line(self) -> bytes:
        """The next answer as the bytes the daemon wrote (without the newline)."""
        return self._answer()[0]

    def _answer(self) -> tuple[bytes, dict[str, Any]]:
        while True:
            while b"\n" not in self.buffer:
                chunk = self.sock.recv(256 * 1024)
                if not chunk:
                    raise EOFError("the daemon closed the connection without an answer")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            frame = json.loads(line)
            if "event" in frame:
                self.events.append(frame)
                continue
            return line, frame

    def request(self, frame: dict[str, Any] | bytes) -> dict[str, Any]:
        if isinstance(frame, bytes):
            self.send(frame if frame.endswith(b"\n") else frame + b"\n")
        else:
            self.send_frame(frame)
        return self.read()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- daemons


def start_expect_death(handle: Any, timeout: float = 20.0) -> int:
    """Start ``handle``'s daemon when a fault point will kill it during start-up; wait
    for it to die and return its exit status (``-9`` for SIGKILL)."""
    return handle.launch().wait(timeout)


def wait_dead(handle: Any, timeout: float = 30.0) -> int:
    """Wait for the daemon process of ``handle`` to exit (a fault point fired)."""
    assert handle.process is not None
    return handle.process.wait(timeout)


def daemon_alive(handle: Any) -> bool:
    return handle.process is not None and handle.process.poll() is None


def rss_bytes(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


# --------------------------------------------------------------------------- transcripts


def agent_entries(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("type") == "custom_message" and e.get("customType") == AGENT_MESSAGE_TYPE]


def envelope(entry: dict[str, Any]) -> dict[str, str]:
    found = parse_envelopes(entry.get("content", ""))
    assert len(found) == 1, f"not exactly one envelope in {entry.get('content', '')[:200]!r}"
    return found[0]


def of_kind(entries: Iterable[dict[str, Any]], kind: str | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(entry, its details)`` of the agent items of ``kind`` (None: all kinds), in
    transcript order."""
    out = []
    for entry in agent_entries(entries):
        details = entry.get("details") if isinstance(entry.get("details"), dict) else {}
        if kind is None or details.get("kind") == kind:
            out.append((entry, details))
    return out


def bodies(entries: Iterable[dict[str, Any]], kind: str | None = "message") -> list[str]:
    """The bodies of the agent items of ``kind`` (None: all kinds), in transcript order."""
    return [envelope(entry)["body"] for entry, _details in of_kind(entries, kind)]


def reports_in(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report items of a transcript: ``from`` (peer id), ``name`` and ``body``."""
    return [{"from": details.get("from"), "name": (env := envelope(entry))["from"], "body": env["body"]} for entry, details in of_kind(entries, "report")]


def tool_pairs(entries: Iterable[dict[str, Any]], tool: str = "roost_send") -> list[tuple[dict[str, Any], str | None]]:
    """``(arguments, result text)`` of every call of ``tool`` in a transcript, in call
    order; the text is None for a call whose result never made it (the worker died)."""
    calls: dict[str, list[Any]] = {}
    pairs: list[list[Any]] = []
    for entry in entries:
        if entry.get("type") != "message":
            continue
        message = entry.get("message") or {}
        if message.get("role") == "assistant":
            for part in message.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "toolCall" and part.get("name") == tool:
                    pair = [part.get("arguments") or {}, None]
                    calls[part["id"]] = pair
                    pairs.append(pair)
        elif message.get("role") == "toolResult" and message.get("toolName") == tool:
            pair = calls.pop(message.get("toolCallId"), None)
            if pair is not None:
                pair[1] = "".join(p.get("text", "") for p in message.get("content") or [] if isinstance(p, dict))
    return [(args, text) for args, text in pairs]


def user_texts(entries: Iterable[dict[str, Any]]) -> list[str]:
    out = []
    for entry in entries:
        message = entry.get("message") or {}
        if entry.get("type") == "message" and message.get("role") == "user":
            out.append("".join(p.get("text", "") for p in message.get("content") or [] if isinstance(p, dict)))
    return out


ACCEPTED = ("delivered", "queued", "started")


def accepted(result: str | None) -> bool:
    """A send answer that promises delivery (``stopped`` keeps the item too)."""
    return result in ACCEPTED or result == "stopped"


def tool_text_accepted(text: str) -> bool:
    return text.startswith(("delivered to ", "queued for ", "started ", "stopped: "))


# --------------------------------------------------------------------------- the invariant


@attrs.define
class Ledger:
    """What senders were told, per (sender, receiver): ``promised`` bodies in send order,
    ``unknown`` ones (the answer was lost) and how many were refused."""

    promised: dict[tuple[str, str], list[str]] = attrs.field(factory=lambda: defaultdict(list))
    unknown: dict[tuple[str, str], set[str]] = attrs.field(factory=lambda: defaultdict(set))
    refused: Counter = attrs.field(factory=Counter)

    def told(self, sender: str, receiver: str, body: str, result: str | None) -> None:
        if result is None:
            self.unknown[(sender, receiver)].add(body)
        elif accepted(result):
            self.promised[(sender, receiver)].append(body)
        else:
            self.refused[result] += 1

    @property
    def promised_count(self) -> int:
        return sum(len(v) for v in self.promised.values())

    @property
    def unknown_count(self) -> int:
        return sum(len(v) for v in self.unknown.values())


@attrs.define
class Verdict:
    promised: int = 0
    arrived: int = 0
    lost: list[str] = attrs.field(factory=list)
    duplicated: list[str] = attrs.field(factory=list)
    out_of_order: list[str] = attrs.field(factory=list)
    unexpected: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.unexpected)

    def summary(self) -> str:
        return (
            f"{self.promised} promised, {self.arrived} arrived; lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
            f"out of order {len(self.out_of_order)}, unexpected {len(self.unexpected)}"
        )

    def explain(self) -> str:
        parts = [self.summary()]
        for label in ("lost", "duplicated", "out_of_order", "unexpected"):
            values = getattr(self, label)
            if values:
                parts.append(f"{label}: {values[:10]}")
        return "\n".join(parts)


def check_delivery(ledger: Ledger, received: dict[str, list[tuple[str, str]]]) -> Verdict:
    """``received[receiver]`` = ``(sender id, body)`` of every agent message in its
    transcript, in order. Every promised body arrives exactly once, per-sender order is
    kept, and a body nobody sent (or sent twice) never shows up."""
    verdict = Verdict(promised=ledger.promised_count)
    for receiver, items in received.items():
        verdict.arrived += len(items)
        counts = Counter(items)
        for (sender, body), n in counts.items():
            if n > 1:
                verdict.duplicated.append(f"{sender}->{receiver}: {body} x{n}")
        by_sender: dict[str, list[str]] = defaultdict(list)
        for sender, body in items:
            by_sender[sender].append(body)
        for sender, got in by_sender.items():
            promised = ledger.promised.get((sender, receiver), [])
            allowed = set(promised) | ledger.unknown.get((sender, receiver), set())
            for body in got:
                if body not in allowed:
                    verdict.unexpected.append(f"{sender}->{receiver}: {body}")
            # Order: the promised bodies, as they appear, keep the send order.
            position = {body: index for index, body in enumerate(promised)}
            seen = [position[body] for body in dict.fromkeys(got) if body in position]
            if seen != sorted(seen):
                verdict.out_of_order.append(f"{sender}->{receiver}")
    for (sender, receiver), promised in ledger.promised.items():
        got = {body for s, body in received.get(receiver, []) if s == sender}
        for body in promised:
            if body not in got:
                verdict.lost.append(f"{sender}->{receiver}: {body}")
    return verdict


def received_messages(entries: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(sender id, body)`` of every agent *message* (not report) of a transcript."""
    return [(str(details.get("from")), envelope(entry)["body"]) for entry, details in of_kind(entries, "message")]


# --------------------------------------------------------------------------- job states


def stuck_jobs(rows: list[dict[str, Any]]) -> list[str]:
    """Jobs that claim to run with no worker, or hold items nobody will deliver."""
    stuck = []
    for row in rows:
        if row["state"] == "running" and not row["live"]:
            stuck.append(f"{row['id']} running with no worker")
        elif row["pending"] and not row["live"] and row["state"] != "stopped":
            stuck.append(f"{row['id']} holds {row['pending']} items with no worker ({row['state']})")
    return stuck


def quiet(rows: list[dict[str, Any]]) -> bool:
    """Nothing runs and nothing waits (stopped jobs may keep items)."""
    return all(row["state"] != "running" and (row["pending"] == 0 or row["state"] == "stopped") for row in rows)


def file_mode(path: Path) -> int:
    return os.stat(path, follow_symlinks=False).st_mode & 0o777


#: The suite-wide poller (tests/conftest.py), under the name this kit's callers use.
wait_for = wait_until


def transcript(path: str | Path) -> list[dict[str, Any]]:
    return read_entries(path)
