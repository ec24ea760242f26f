"""Receipts and dead letters: every agent item has a visible life.

``queued`` (stored, the receiver is not connected) → ``delivered`` (pushed to the
receiver) → ``acknowledged`` (read into its transcript) → ``seen`` (the receiving model
had it in a model request) → ``answered`` (a message naming it in ``reply_to`` came back
from its receiver to its sender); or ``refused`` (the sender was told why) or ``dead``
(it can never be delivered: the target was removed, its queue was full, a foreground
receiver was not running). How a receipt moves is :data:`~roost_core.daemon.itemlife.RECEIPT_MOVES`.
Dead letters are kept in ``dead.jsonl`` so ``roost dead`` shows them after a restart;
receipts are kept in memory, the last :data:`PER_SENDER` per sender, and those seen or
answered in the journal too (``receipt`` records, :meth:`Receipts.restore`), so a daemon
restart keeps what the sender learned of them.

Every ``queue_full`` refusal is a dead letter, so a client that retries into a full queue
makes thousands a second. So the letters of one loop pass share a write, and the file is
bounded: before a write would take it past :data:`DEAD_FILE_BYTES` it is set aside as
``dead.jsonl.1`` (replacing the one before) and a new one begun, so the disk holds at most
two files of letters and a start reads at most those two.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from roost_core import faults, platform
from roost_core.daemon.itemlife import RECEIPT_MOVES, Sighting
from roost_core.protocol import encode
from roost_core.store import atomic_write, fsync_dir, write_all

log = logging.getLogger("roost.daemon")

PER_SENDER = 100
#: Dead letters kept in memory (the newest); the files keep more (:data:`DEAD_FILE_BYTES`).
MAX_DEAD = 1000
#: ``dead.jsonl`` is set aside as ``dead.jsonl.1`` before a write would take it past this
#: (about 4,000 letters; far more than :data:`MAX_DEAD`, so the two files always hold the
#: newest ``MAX_DEAD``): the one set aside before is dropped.
DEAD_FILE_BYTES = 1 << 20
PREVIEW_CHARS = 80


class Receipt(msgspec.Struct, gc=False):
    """What happened to one agent item, as its sender sees it. (A msgspec struct: one is
    made per send, in C; its fields are strings, numbers and None, so it can hold no cycle
    and the garbage collector need not track it.)"""

    sender: str
    to: str
    to_name: str
    kind: str
    state: str
    seq: int | None
    reason: str | None
    preview: str
    created: float
    updated: float
    #: The item's message id (what a reply names in ``reply_to``), when it has one.
    msg_id: str | None = None
    #: When the receiving model first had it in a model request; when an answer came.
    seen: float | None = None
    answered: float | None = None
    #: The message id this item answers (its ``reply_to``), when it answers one.
    reply_to: str | None = None
    #: This daemon's number for the receipt (a watch names a receipt that moved by it).
    number: int = msgspec.field(default_factory=itertools.count(1).__next__)

    def to_json(self) -> dict[str, Any]:
        return {
            "sender": self.sender,
            "to": self.to,
            "toName": self.to_name,
            "kind": self.kind,
            "seq": self.seq,
            "id": self.msg_id,
            "state": self.state,
            "reason": self.reason,
            "preview": self.preview,
            "created": self.created,
            "updated": self.updated,
            "seen": self.seen,
            "answered": self.answered,
            "replyTo": self.reply_to,
        }

    @classmethod
    def from_json(cls, data: Any) -> Receipt:
        """A receipt as :meth:`to_json` wrote it (``ValueError`` for anything else)."""
        if not is_letter(data):
            raise ValueError("not a receipt")
        times = [data.get(key) for key in ("seen", "answered")]
        if not all(t is None or (isinstance(t, (int, float)) and not isinstance(t, bool)) for t in times) or not isinstance(data.get("id"), (str, type(None))):
            raise ValueError("a receipt's id and times")
        reply_to = data.get("replyTo")
        return cls(
            data["sender"], data["to"], data.get("toName") or "", data["kind"], data["state"], data["seq"], data.get("reason"),
            data.get("preview") or "", float(data["created"]), float(data["updated"]), data.get("id"), times[0], times[1],
            reply_to if isinstance(reply_to, str) else None,
        )


#: Receipt states a sender counts per receiver (``roost_agents``), by what it is called there.
TALLY = {"queued": "queued", "delivered": "unseen", "acknowledged": "unseen", "seen": "seen", "answered": "answered"}


#: Message ids whose first words the daemon keeps, for the quote a reply carries.
MAX_QUOTES = 10_000


class MessageQuotes:
    """The first :data:`PREVIEW_CHARS` characters of recent messages by message id, so a
    reply can carry a quote of what it answers (for ``roost log``). In memory only: after
    a restart a reply still names the id, without the quote."""

    def __init__(self) -> None:
        self._quotes: dict[str, str] = {}
        #: The ids in ``_quotes``, oldest first. (A dict and a deque, not an OrderedDict:
        #: one is remembered per message, and this costs 0.2 µs less.)
        self._order: deque[str] = deque()

    def remember(self, message_id: str | None, text: str) -> None:
        if message_id is None or message_id in self._quotes:
            return
        self._quotes[message_id] = text[:PREVIEW_CHARS]
        self._order.append(message_id)
        if len(self._order) > MAX_QUOTES:
            del self._quotes[self._order.popleft()]

    def quote(self, message_id: str) -> str | None:
        return self._quotes.get(message_id)


class Receipts:
    def __init__(self, dead_file: Path, *, durable: bool = True, later: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.dead_file = dead_file
        self.durable = durable
        #: Runs a callable soon (the daemon's loop, at its next pass): letters buried
        #: meanwhile share one write and fsync. None: each is written as it is buried.
        self.later = later
        self._flush_due = False
        self._by_sender: dict[str, deque[Receipt]] = {}
        #: Every kept receipt with a seq, by (receiver, seq): what a move finds.
        self._by_item: dict[tuple[str, int], Receipt] = {}
        #: Hands a ``receipt`` record to the journal (set once it is loaded; the
        #: persistence's): a receipt that is seen or answered is kept across restarts.
        self.write: Callable[[dict[str, Any]], Any] | None = None
        #: Told of every receipt made or moved (the ``watch`` stream's: :class:`Watchers`).
        self.changed: Callable[[Receipt], None] | None = None
        self.dead: deque[dict[str, Any]] = deque(maxlen=MAX_DEAD)
        for path in (self.set_aside_file, dead_file):
            self.dead.extend(self.read_letters(path))
        #: Dead letters the file has not taken yet: buried since the last write, or
        #: refused by the disk (a full disk; then ``_refused``), written with the next.
        self.unwritten: list[bytes] = []
        self._refused = False

    @property
    def set_aside_file(self) -> Path:
        """Where ``dead.jsonl`` goes once it passes :data:`DEAD_FILE_BYTES`."""
        return self.dead_file.with_name(self.dead_file.name + ".1")

    def read_letters(self, path: Path) -> list[dict[str, Any]]:
        """The dead letters of the file ``path``. Lines that are no letter roost writes
        (damaged, foreign) are set aside: appended to ``dead.jsonl.bad``, and the file is
        written anew without them (a torn last line, from a crash mid-write, is only
        dropped)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("dead letters: cannot read %s (%s); starting without them", path, exc)
            return []
        lines = data.split(b"\n")
        letters: list[dict[str, Any]] = []
        good: list[bytes] = []
        bad: list[bytes] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                letter = json.loads(line)
            except (ValueError, RecursionError):
                letter = None
            if is_letter(letter):
                letters.append(letter)
                good.append(line + b"\n")
            elif number < len(lines):
                bad.append(line + b"\n")
        if bad or not data.endswith(b"\n"):
            self._set_aside(path, good, bad)
        return letters

    def _set_aside(self, path: Path, good: list[bytes], bad: list[bytes]) -> None:
        aside = self.dead_file.with_name(self.dead_file.name + ".bad")
        try:
            if bad:
                fd = os.open(aside, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    write_all(fd, b"".join(bad))
                finally:
                    os.close(fd)
            atomic_write(path, b"".join(good), durable=self.durable, kind="receipts")
        except OSError as exc:
            log.error("dead letters: %d lines of %s are no letters and could not be set aside (%s); they are skipped", len(bad), path, exc)
            return
        if bad:
            log.error("dead letters: %d lines of %s are no letters: set aside in %s, the rest is served", len(bad), path.name, aside.name)

    def record(
        self, sender: str, to: str, to_name: str, kind: str, state: str, *, seq: int | None = None, reason: str | None = None, text: str = "",
        msg_id: str | None = None, reply_to: str | None = None,
    ) -> Receipt:
        """Keep the receipt of an item ``sender`` sent to ``to`` (``seq`` there, its
        message id ``msg_id``). ``reply_to``: the item answers the message of that id
        that ``to`` sent ``sender``, whose receipt says ``answered`` from now on."""
        now = time.time()
        receipt = Receipt(sender, to, to_name, kind, state, seq, reason, text[:PREVIEW_CHARS], now, now, msg_id, reply_to=reply_to)
        box = self._by_sender.get(sender)
        if box is None:  # (not setdefault: that would make a deque per call)
            box = self._by_sender[sender] = deque(maxlen=PER_SENDER)
        if len(box) == PER_SENDER:
            # The oldest leaves the box: its indexes go ((receiver, seq) is never reused).
            old = box[0]
            if old.seq is not None:
                self._by_item.pop((old.to, old.seq), None)
        box.append(receipt)
        if seq is not None:
            self._by_item[(to, seq)] = receipt
        if state == "dead":
            self.bury(receipt)
        if reply_to is not None:
            self.answer(reply_to, sender, to, now)
        if self.changed is not None:
            self.changed(receipt)
        return receipt

    def move(self, to: str, seq: int, sighting: Sighting, reason: str | None = None) -> Receipt | None:
        """The item ``seq`` of ``to`` was sighted (pushed, acked, seen by the model,
        dropped); the receipt if it moved (:data:`~roost_core.daemon.itemlife.RECEIPT_MOVES`)."""
        receipt = self._by_item.get((to, seq))
        if receipt is None:
            return None
        after = RECEIPT_MOVES.get((receipt.state, sighting))
        if after is None:
            return None
        receipt.state, receipt.reason, receipt.updated = after, reason, time.time()
        if after == "dead":
            self.bury(receipt)
        if self.changed is not None:
            self.changed(receipt)
        return receipt

    def saw(self, to: str, seqs: list[int]) -> int:
        """The model of ``to`` had the items ``seqs`` in a model request: the receipts
        not seen before say ``seen`` (journaled). How many moved."""
        moved = 0
        for seq in seqs:
            receipt = self.move(to, seq, Sighting.MODEL_SAW)
            if receipt is not None:
                receipt.seen = receipt.updated
                self.keep(receipt)
                moved += 1
        return moved

    def answer(self, msg_id: str, by: str, to: str, when: float | None = None) -> Receipt | None:
        """``by`` sent ``to`` a message naming ``msg_id`` in ``reply_to``: when ``to``
        sent ``by`` that message, its receipt says ``answered`` (journaled). A reply from
        anyone else, to anyone else, or to a message whose receipt is no longer kept
        moves nothing. (Looked for among ``to``'s last receipts, newest first: a reply
        costs that, a send nothing.)"""
        receipt = next((r for r in reversed(self._by_sender.get(to, ())) if r.msg_id == msg_id and r.to == by), None)
        if receipt is None:
            return None
        after = RECEIPT_MOVES.get((receipt.state, Sighting.ANSWER))
        if after is None:
            return None
        receipt.state = after
        receipt.answered = receipt.updated = time.time() if when is None else when
        if receipt.seen is None:
            # The answer names the item's id, which only the item told: its model had it
            # in a request. Its host's ``seen`` may come after the answer (a host reads the
            # model's output and serves its tool call side by side), or never: a receipt
            # never skips seen.
            receipt.seen = receipt.answered
        self.keep(receipt)
        if self.changed is not None:
            self.changed(receipt)
        return receipt

    def keep(self, receipt: Receipt) -> None:
        """Write ``receipt`` as it is now to the journal (its next commit): a daemon that
        starts reads it back (:meth:`restore`). Not waited for: a receipt tells, it
        promises nothing; one the journal cannot take stays in memory."""
        if self.write is not None:
            self.write(receipt_record(receipt))

    def restore(self, record: dict[str, Any]) -> None:
        """Keep a ``receipt`` record read back from the journal (``ValueError`` for one
        roost did not write). A later record of the same item replaces the earlier."""
        receipt = Receipt.from_json(record.get("receipt"))
        if receipt.seq is None:
            raise ValueError("a kept receipt has a seq")
        known = self._by_item.get((receipt.to, receipt.seq))
        if known is not None and known.sender == receipt.sender:
            known.state, known.updated, known.seen, known.answered = receipt.state, receipt.updated, receipt.seen, receipt.answered
            return
        box = self._by_sender.get(receipt.sender)
        if box is None:
            box = self._by_sender[receipt.sender] = deque(maxlen=PER_SENDER)
        if len(box) == PER_SENDER and box[0].seq is not None:
            self._by_item.pop((box[0].to, box[0].seq), None)
        box.append(receipt)
        self._by_item[(receipt.to, receipt.seq)] = receipt

    def recall(self, to: str, to_name: str, seq: int, sender: str, kind: str, text: str, created: float, msg_id: str | None) -> None:
        """A daemon that starts finds an agent item of ``to`` still queued in its journal:
        its sender's receipt says ``queued`` again (unless a ``receipt`` record kept it)."""
        if (to, seq) in self._by_item:
            return
        receipt = self.record(sender, to, to_name, kind, "queued", seq=seq, text=text, msg_id=msg_id)
        receipt.created = receipt.updated = created

    def records(self) -> list[dict[str, Any]]:
        """The ``receipt`` records of every kept receipt that is seen or answered (the
        journal's snapshot)."""
        return [receipt_record(r) for box in self._by_sender.values() for r in box if r.seen is not None or r.answered is not None]

    def bury(self, receipt: Receipt) -> None:
        """Keep a dead letter: in memory at once, in ``dead.jsonl`` as soon as the disk
        takes it. A letter records a refusal the sender was told already, so a write that
        fails (a full disk, an I/O error) refuses nothing: it is kept and written with the
        next one (:meth:`flush`)."""
        letter = receipt.to_json()
        self.dead.append(letter)
        self.unwritten.append(encode(letter))
        if self.later is None:
            self.flush()
        elif not self._flush_due:
            # A burst of refusals (a client pipelining into a full queue) would otherwise
            # cost a write and an fsync each, on the loop.
            self._flush_due = True
            self.later(self.write_due)

    def write_due(self) -> None:
        """Write the letters buried since the last write, if there are any: at the loop's
        next pass, and before any byte of this pass reaches a client (the daemon calls
        it then, as it writes job records), so a refusal's answer never reaches its
        sender before its letter is on disk."""
        if self._flush_due:
            self._flush_due = False
            self.flush()

    def flush(self) -> bool:
        """Write the dead letters the file has not taken yet; False if it still cannot."""
        if not self.unwritten:
            return True
        data = b"".join(self.unwritten)
        try:
            size = os.stat(self.dead_file).st_size
        except FileNotFoundError:
            size = 0
        except OSError as exc:
            return self._failed(exc)
        if size and size + len(data) > DEAD_FILE_BYTES:
            self._begin_anew()
        try:
            fd = os.open(self.dead_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            return self._failed(exc)
        size = os.fstat(fd).st_size
        try:
            faults.io("io.receipts.write")
            write_all(fd, data)
            if self.durable:
                faults.io("io.receipts.fsync")
                platform.sync_file(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)  # no torn letter for the next one to stick to
            except OSError:
                pass
            return self._failed(exc)
        finally:
            os.close(fd)
        if self._refused:
            log.warning("dead letters: %d kept while the disk refused them are written now", len(self.unwritten))
            self._refused = False
        self.unwritten.clear()
        return True

    def _begin_anew(self) -> None:
        """Set ``dead.jsonl`` aside (replacing the one set aside before): the letters this
        write would take past :data:`DEAD_FILE_BYTES` begin a new one. If the disk refuses,
        the file grows on until a later write tries again."""
        try:
            os.replace(self.dead_file, self.set_aside_file)
            if self.durable:
                fsync_dir(self.dead_file.parent)
        except OSError as exc:
            log.warning("dead letters: cannot set %s aside (%s); it grows until the next try", self.dead_file, exc)

    def _failed(self, exc: OSError) -> bool:
        if not self._refused:
            self._refused = True
            log.warning("dead letters: cannot write %s (%s); kept in memory and written with the next", self.dead_file, exc)
        # Bounded as the letters in memory are: the oldest unwritten ones go first.
        del self.unwritten[:-MAX_DEAD]
        return False

    def sent_by(self, sender: str, limit: int = 20) -> list[dict[str, Any]]:
        return [receipt.to_json() for receipt in list(self._by_sender.get(sender, ()))[-limit:]]

    def tally(self, sender: str) -> dict[str, dict[str, int]]:
        """Per receiver, how many of the items ``sender`` sent (its last :data:`PER_SENDER`)
        are still ``queued``, delivered but ``unseen``, ``seen`` and ``answered`` (only
        the counts that are not 0): what ``roost_agents`` shows the sender."""
        counts: dict[str, dict[str, int]] = {}
        for receipt in self._by_sender.get(sender, ()):
            name = TALLY.get(receipt.state)
            if name is not None:
                row = counts.setdefault(receipt.to, {})
                row[name] = row.get(name, 0) + 1
        return counts

    def every(self) -> list[Receipt]:
        """Every kept receipt, oldest first (a ``watch`` with ``receipts``)."""
        return sorted((r for box in self._by_sender.values() for r in box), key=lambda r: r.number)

    def received_by(self, to: str) -> list[dict[str, Any]]:
        """The kept receipts of the items sent to ``to``, by seq (``roost log``)."""
        return [receipt.to_json() for receipt in sorted((r for (receiver, _seq), r in self._by_item.items() if receiver == to), key=lambda r: r.seq or 0)]


def receipt_record(receipt: Receipt) -> dict[str, Any]:
    """The journal record of a receipt (:meth:`Receipts.restore` reads it back)."""
    return {"op": "receipt", "receipt": receipt.to_json()}


def is_letter(value: Any) -> bool:
    """A dead letter as :meth:`Receipt.to_json` writes it (what ``roost dead`` shows)."""
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(key), str) for key in ("sender", "to", "kind", "state"))
        and all(isinstance(value.get(key), (str, type(None))) for key in ("toName", "reason", "preview"))
        and isinstance(value.get("seq"), (int, type(None)))
        and all(isinstance(value.get(key), (int, float)) for key in ("created", "updated"))
    )
