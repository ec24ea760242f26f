"""Receipts and dead letters: every agent item has a visible life.

``queued`` (stored, the receiver is not connected) → ``delivered`` (pushed to the
receiver) → ``acknowledged`` (read into its transcript); or ``refused`` (the sender was
told why) or ``dead`` (it can never be delivered: the target was removed, its queue was
full, a foreground receiver was not running). Dead letters are kept in ``dead.jsonl`` so
``roost dead`` shows them after a restart; receipts are kept in memory, the last
:data:`PER_SENDER` per sender.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import attrs

from roost_core.transcript import read_entries

PER_SENDER = 100
#: Dead letters kept in memory (the newest); the file keeps them all.
MAX_DEAD = 1000
PREVIEW_CHARS = 80


@attrs.define
class Receipt:
    sender: str
    to: str
    to_name: str
    kind: str
    state: str
    seq: int | None = None
    reason: str | None = None
    preview: str = ""
    created: float = attrs.field(factory=time.time)
    updated: float = attrs.field(factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "sender": self.sender,
            "to": self.to,
            "toName": self.to_name,
            "kind": self.kind,
            "seq": self.seq,
            "state": self.state,
            "reason": self.reason,
            "preview": self.preview,
            "created": self.created,
            "updated": self.updated,
        }


#: Message ids whose first words the daemon keeps, for the quote a reply carries.
MAX_QUOTES = 10_000


class MessageQuotes:
    """The first :data:`PREVIEW_CHARS` characters of recent messages by message id, so a
    reply can carry a quote of what it answers (for ``roost log``). In memory only: after
    a restart a reply still names the id, without the quote."""

    def __init__(self) -> None:
        self._quotes: OrderedDict[str, str] = OrderedDict()

    def remember(self, message_id: str | None, text: str) -> None:
        if message_id is None or message_id in self._quotes:
            return
        self._quotes[message_id] = text[:PREVIEW_CHARS]
        if len(self._quotes) > MAX_QUOTES:
            self._quotes.popitem(last=False)

    def quote(self, message_id: str | None) -> str | None:
        return self._quotes.get(message_id) if message_id else None


class Receipts:
    def __init__(self, dead_file: Path, *, durable: bool = True) -> None:
        self.dead_file = dead_file
        self.durable = durable
        self._by_sender: dict[str, deque[Receipt]] = {}
        self._by_item: dict[tuple[str, int], Receipt] = {}
        self.dead: deque[dict[str, Any]] = deque(read_entries(dead_file), maxlen=MAX_DEAD)

    def record(self, sender: str, to: str, to_name: str, kind: str, state: str, *, seq: int | None = None, reason: str | None = None, text: str = "") -> Receipt:
        receipt = Receipt(sender=sender, to=to, to_name=to_name, kind=kind, state=state, seq=seq, reason=reason, preview=text[:PREVIEW_CHARS])
        box = self._by_sender.setdefault(sender, deque(maxlen=PER_SENDER))
        if len(box) == box.maxlen and box[0].seq is not None:
            self._by_item.pop((box[0].to, box[0].seq), None)
        box.append(receipt)
        if seq is not None:
            self._by_item[(to, seq)] = receipt
        if state == "dead":
            self.bury(receipt)
        return receipt

    def move(self, to: str, seq: int, state: str, reason: str | None = None) -> None:
        """An item of ``to`` changed state (delivered, acknowledged, dead)."""
        receipt = self._by_item.get((to, seq))
        if receipt is None or receipt.state in ("acknowledged", "dead"):
            return
        if state == "delivered" and receipt.state == "delivered":
            return
        receipt.state, receipt.reason, receipt.updated = state, reason, time.time()
        if state in ("acknowledged", "dead"):
            self._by_item.pop((to, seq), None)
        if state == "dead":
            self.bury(receipt)

    def bury(self, receipt: Receipt) -> None:
        letter = receipt.to_json()
        self.dead.append(letter)
        fd = os.open(self.dead_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, json.dumps(letter, ensure_ascii=False).encode("utf-8") + b"\n")
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def sent_by(self, sender: str, limit: int = 20) -> list[dict[str, Any]]:
        return [receipt.to_json() for receipt in list(self._by_sender.get(sender, ()))[-limit:]]
