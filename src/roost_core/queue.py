"""The one ordered queue of a job: user replies, agent messages and reports.

Every item takes its ``seq`` from one ``reply_seq`` counter, so a single cumulative ack
(``ack(n)``: everything up to ``n`` is in the transcript) settles all kinds at once, and
the reaper, wake-ups and the restore check need not know about kinds.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from roost_core.protocol import MAX_FRAME, QUEUE_FULL, ProtocolError, too_large
from roost_core.records import AGENT_KINDS, ITEM_KINDS

#: Separate caps, so agents can never crowd out the user (or the other way round).
MAX_USER_REPLIES = 50
MAX_AGENT_ITEMS = 20
#: How far past the durable watermark an item may be pushed to a worker before it is
#: durable itself. Acks free room in the caps before anything is durable, so the caps
#: alone do not bound these; the daemon's restart gap (``SEQ_RESTART_GAP``) must stay
#: above this, or a restart could reuse a seq a worker holds. The bound is on pushes,
#: not on queueing: an item past it waits in the queue until it is durable. (It once
#: refused sends ``queue_full``, and a seq refused ``not_stored`` never became durable,
#: so after 500 refusals on a full disk a job refused every send until a restart.)
MAX_UNDURABLE_SEQS = 500


#: An item's fields by the names its ``deliver`` event gives them (where they differ).
EVENT_NAMES = {
    "sender": "from",
    "sender_name": "fromName",
    "msg_id": "id",
    "reply_to": "replyTo",
    "broadcast_chain": "broadcastChain",
    "reply_quote": "replyQuote",
}
#: The other way: a ``deliver`` event's key -> the item's field.
FIELD_NAMES = {event: field for field, event in EVENT_NAMES.items()}


class Item(msgspec.Struct, tag_field="event", tag="deliver", rename=EVENT_NAMES, gc=False):
    """One queued item. ``content`` is what the agent sees (framed for agent items).

    A msgspec struct, not an attrs class: every message makes one and encodes it as its
    ``deliver`` event (:meth:`encoded`), and both happen in C. (``gc=False``: its fields
    are strings, numbers and None, so it can hold no cycle.)"""

    seq: int
    kind: str
    content: str
    #: The unframed text; empty when it is ``content`` itself (a user reply, a task: the
    #: wire and the journal then carry it once, so every reply within
    #: ``protocol.MAX_TEXT_BYTES`` fits in a frame). Read it as ``text or content``.
    text: str = ""
    sender: str | None = None
    sender_name: str | None = None
    relation: str | None = None
    created: float = msgspec.field(default_factory=time.time)
    trace: str | None = None
    hops: int = 0
    #: The message id (agent items), the id it answers, its broadcast scope, whether its
    #: chain already holds a broadcast, and how it reaches a busy receiver.
    msg_id: str | None = None
    reply_to: str | None = None
    scope: str | None = None
    broadcast_chain: bool = False
    delivery: str = "steer"
    #: The first words of the message ``reply_to`` names, when the daemon still knows it
    #: (for people: ``roost log`` shows the thread; agents read the ids in the envelope).
    reply_quote: str | None = None

    def encoded(self) -> bytes:
        """The ``deliver`` event that carries this item to its receiver, as one line of
        the wire (its keys are :data:`EVENT_NAMES`). It is also how the journal stores
        the item: one encoding of it is pushed and written (``daemon.delivery``)."""
        return _encode_item(self) + b"\n"

    def checked_event(self) -> bytes:
        """:meth:`encoded`, refused ``too_large`` when the line is longer than a frame:
        the receiver's decoder would discard it, and the item would never arrive."""
        event = _encode_item(self) + b"\n"
        if len(event) - 1 > MAX_FRAME:
            raise too_large(f"the {self.kind} (as the item its receiver gets)", len(event) - 1, MAX_FRAME)
        return event

    def to_event(self) -> dict[str, Any]:
        """:meth:`encoded`, as the frame dict it decodes to (the same keys, in order)."""
        return {
            "event": "deliver",
            "seq": self.seq,
            "kind": self.kind,
            "content": self.content,
            "text": self.text,
            "from": self.sender,
            "fromName": self.sender_name,
            "relation": self.relation,
            "created": self.created,
            "trace": self.trace,
            "hops": self.hops,
            "id": self.msg_id,
            "replyTo": self.reply_to,
            "scope": self.scope,
            "broadcastChain": self.broadcast_chain,
            "delivery": self.delivery,
            "replyQuote": self.reply_quote,
        }

    @classmethod
    def from_event(cls, data: Any) -> Item:
        """An item from its ``deliver`` event as the journal stores it; ``ValueError``
        for one roost did not write."""
        if not isinstance(data, dict) or data.get("event") != "deliver":
            raise ValueError("an item's event is a JSON object with event 'deliver'")
        return cls.from_json({FIELD_NAMES.get(key, key): value for key, value in data.items() if key != "event"})

    @classmethod
    def received(cls, event: dict[str, Any], *, kind: str = "reply") -> Item:
        """An item from a ``deliver`` event as a client reads it (a worker, an MCP peer):
        leniently, a field the event lacks taking its default (``kind`` for the kind)."""
        return cls(
            seq=int(event["seq"]),
            kind=str(event.get("kind", kind)),
            content=str(event.get("content", "")),
            text=str(event.get("text") or ""),
            sender=event.get("from"),
            sender_name=event.get("fromName"),
            relation=event.get("relation"),
            trace=event.get("trace"),
            hops=int(event.get("hops") or 0),
            msg_id=event.get("id"),
            reply_to=event.get("replyTo"),
            scope=event.get("scope"),
            broadcast_chain=bool(event.get("broadcastChain")),
            delivery="followUp" if event.get("delivery") == "followUp" else "steer",
            reply_quote=event.get("replyQuote"),
        )

    @classmethod
    def from_json(cls, data: Any) -> Item:
        """An item from its fields by their own names (``as_fields`` of one: how the
        journal stored items before it stored their ``deliver`` events, and what
        :meth:`from_event` reads once renamed); ``ValueError`` for one roost did not write."""
        if not isinstance(data, dict):
            raise ValueError("an item is a JSON object")
        seq, kind = data.get("seq"), data.get("kind")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
            raise ValueError(f"item seq {seq!r}")
        if kind not in ITEM_KINDS or not isinstance(data.get("content"), str):
            raise ValueError(f"item of kind {kind!r} with content {type(data.get('content')).__name__}")
        for name in ("text",):
            if not isinstance(data.get(name, ""), str):
                raise ValueError(f"item {name} is not a string")
        for name in ("sender", "sender_name", "relation", "trace", "msg_id", "reply_to", "scope", "reply_quote"):
            if not isinstance(data.get(name), (str, type(None))):
                raise ValueError(f"item {name} is not a string")
        if not isinstance(data.get("hops", 0), int) or not isinstance(data.get("created", 0.0), (int, float)):
            raise ValueError("item hops or created is not a number")
        if not isinstance(data.get("broadcast_chain", False), bool) or not isinstance(data.get("delivery", "steer"), str):
            raise ValueError("item broadcast_chain or delivery of the wrong type")
        return cls(**{key: value for key, value in data.items() if key in cls.__struct_fields__})

    def as_fields(self) -> dict[str, Any]:
        """The item's fields by their own names."""
        return msgspec.structs.asdict(self)

    @property
    def is_agent_item(self) -> bool:
        return self.kind in AGENT_KINDS

    @property
    def follow_up(self) -> bool:
        """Waits for the receiver's current run to end (never steered in mid-run)."""
        return self.delivery == "followUp"


_encode_item = msgspec.json.Encoder().encode


class JobQueue:
    """Pending items of one job, in seq order, with the cumulative ack watermark."""

    def __init__(self, reply_seq: int = 0, acked: int = 0) -> None:
        self.reply_seq = reply_seq
        self.acked = acked
        #: The highest seq known to be on disk (the daemon marks it after each commit).
        self.durable = reply_seq
        self.items: list[Item] = []
        #: After a daemon crash: how far the next seq jumps, unless the receiver first
        #: says which seqs it holds (:meth:`settle_seq`). An item the dead daemon pushed
        #: before it was durable may be in the receiver's hands with a seq the journal
        #: never kept: a new item must not take that seq (the receiver would drop it).
        self.unsure = 0

    def next_seq(self) -> int:
        """The seq the next item takes (after the restart jump, if one is still due)."""
        if self.unsure:
            self.reply_seq += self.unsure
            self.durable = max(self.durable, self.reply_seq)
            self.unsure = 0
        return self.reply_seq + 1

    def settle_seq(self, held: int) -> bool:
        """The receiver holds every seq it was given up to ``held``: numbering goes on
        after it, with no jump (seqs increase by one across a restart). False when no
        jump was due (nothing changes)."""
        if not self.unsure:
            return False
        self.unsure = 0
        self.reply_seq = max(self.reply_seq, held)
        self.durable = max(self.durable, self.reply_seq)
        return True

    @property
    def reserved(self) -> int:
        """The seq the journal must keep as this queue's counter: past any seq a jump
        still due may hand out, so a crash before the receiver has said what it holds
        never lets a later start take one of them."""
        return self.reply_seq + self.unsure

    def check_room(self, kind: str) -> None:
        """Raise ``queue_full`` when an item of ``kind`` would pass its cap."""
        if kind not in ITEM_KINDS:
            raise ValueError(f"unknown item kind {kind!r}")
        agent = kind in AGENT_KINDS
        cap = MAX_AGENT_ITEMS if agent else MAX_USER_REPLIES
        # Fewer items than the cap in all: no need to count them by kind (every send asks).
        if len(self.items) >= cap and sum(1 for item in self.items if item.is_agent_item == agent) >= cap:
            who = "agent items" if agent else "user replies"
            raise ProtocolError(QUEUE_FULL, f"queue full: {cap} {who} already wait for this job")

    def mark_durable(self, seq: int) -> None:
        """Every item queued up to ``seq`` is on disk."""
        self.durable = max(self.durable, seq)

    def may_push(self, seq: int, journal_ok: bool) -> bool:
        """Whether the item ``seq`` may go to a worker now: once it is durable, and before
        that only while the journal writes (an item refused ``not_stored`` must not reach
        its receiver) and within :data:`MAX_UNDURABLE_SEQS` of the durable watermark.
        Only pushed seqs can be in a transcript, so only they must stay below the restart
        gap; a seq handed out and refused before it was pushed is seen by nobody."""
        return seq <= self.durable or (journal_ok and seq - self.durable <= MAX_UNDURABLE_SEQS)

    def enqueue(self, kind: str, content: str, **fields: Any) -> Item:
        return self.enqueue_fields(kind, content, fields)

    def enqueue_fields(self, kind: str, content: str, fields: dict[str, Any]) -> Item:
        """:meth:`enqueue` with the item's other fields in one dict."""
        item = Item(self.next_seq(), kind, content, **fields)
        self.append(item)
        return item

    def append(self, item: Item, *, past_cap: bool = False) -> None:
        """Queue ``item``, made with the next seq (raises ``queue_full`` at the cap, unless
        ``past_cap``: a send asked again, whose first ask had room)."""
        if not past_cap:
            self.check_room(item.kind)
        if item.seq != self.reply_seq + 1:
            raise ValueError(f"item seq {item.seq} is not the next one ({self.reply_seq + 1})")
        # The newest seq: its place is the end.
        self.reply_seq = item.seq
        self.items.append(item)

    def drop(self, seq: int) -> None:
        """Take back an item that could not be made durable (its sender is told so)."""
        self.items = [item for item in self.items if item.seq != seq]

    def add(self, item: Item) -> None:
        """Put an item back (journal replay): keeps order, ignores one already acked or held."""
        self.reply_seq = max(self.reply_seq, item.seq)
        if item.seq <= self.acked or any(existing.seq == item.seq for existing in self.items):
            return
        self.items.append(item)
        self.items.sort(key=lambda it: it.seq)

    def ack(self, seq: int) -> list[Item]:
        """Cumulative: everything with ``seq`` or lower is done. Returns what was removed."""
        if seq <= self.acked:
            return []
        self.acked = min(seq, self.reply_seq)
        done = [item for item in self.items if item.seq <= self.acked]
        self.items = [item for item in self.items if item.seq > self.acked]
        return done

    def holding(self, msg_id: str) -> Item | None:
        """The pending item with message id ``msg_id``, if any (a keyed request asked again
        finds the item its first ask queued)."""
        return next((item for item in self.items if item.msg_id == msg_id), None)

    def pending(self, after: int = 0) -> list[Item]:
        """The items with a seq above ``after``, in order (found from the end: usually
        the newest one alone)."""
        items = self.items
        start = len(items)
        while start and items[start - 1].seq > after:
            start -= 1
        return items[start:]

    def reapable(self) -> bool:
        """True when nothing waits: a worker may be ended without losing an item."""
        return not self.items

    def clear(self) -> list[Item]:
        dropped, self.items = self.items, []
        if dropped:
            self.acked = max(self.acked, dropped[-1].seq)
        return dropped
