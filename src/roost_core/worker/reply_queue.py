"""The worker's ReplyQueue: the single ordered queue of everything the daemon delivers.

Items arrive in seq order (and again after a reconnect). The queue drops what the
transcript already holds, keeps the rest in order, and gates it: nothing is applied
while the session is starting (``awaiting_start``) or compacting, and agent items wait
while a dialog is open (a user reply answers the dialog). A run takes everything that
waits when it starts; at a tool boundary only what may be steered in goes (follow-up items
wait for the run to end, and start the next one). The ack watermark is cumulative: the
largest seq such that every item received up to it is in the transcript.

An agent item whose message id the transcript holds already is a second copy of it (a
daemon that died after pushing a message, before making it durable, is asked for it again
by its sender, and numbers it anew): it is dropped and acked like a resend of its seq.
"""

from __future__ import annotations

import anyio

from roost_core.queue import Item


class ReplyQueue:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.in_transcript: set[int] = set()
        #: Message ids of the agent items in the transcript (and of those this worker
        #: wrote there), and of the items held or taken: id -> the first copy's seq.
        self.ids_in_transcript: set[str] = set()
        self._held_ids: dict[str, int] = {}
        #: A first copy's seq -> the seqs of second copies that arrived while it was held.
        self._copies: dict[int, list[int]] = {}
        self._id_of: dict[int, str] = {}
        self._received: list[int] = []
        self.watermark = 0
        #: Seqs handed to the host and not yet in the transcript: a resend is ignored.
        self._taken: set[int] = set()
        #: Items handed to an agent that died before its transcript showed them: they go
        #: first in the next run, which something else starts (:meth:`keep`).
        self.kept: list[Item] = []
        self.awaiting_start = True
        self.compacting = False
        self.dialog_open = False
        self._changed = anyio.Event()

    def start(self, in_transcript: set[int], ids: set[str] | frozenset[str] = frozenset()) -> None:
        """The session is open: ``in_transcript`` are the seqs its file already holds,
        ``ids`` the message ids of its agent items."""
        self.in_transcript |= in_transcript
        self.ids_in_transcript |= ids
        for item in self.items:
            if item.seq in self.in_transcript or (item.msg_id is not None and item.msg_id in self.ids_in_transcript):
                # Written before this worker started: so are the second copies of it that
                # arrived meanwhile (dropped and acked with it, never left pending).
                self._written(item.seq)
        self.items = [item for item in self.items if item.seq not in self.in_transcript]
        self.awaiting_start = False
        self._advance()
        self._notify()

    def push(self, item: Item) -> None:
        if item.seq <= self.watermark or item.seq in self._taken or any(held.seq == item.seq for held in (*self.items, *self.kept)):
            return  # acked, handed to the host already, or held
        if item.seq not in self._received:
            self._received.append(item.seq)
            self._received.sort()
        msg_id = item.msg_id
        if msg_id is not None:
            if msg_id in self.ids_in_transcript:
                self.in_transcript.add(item.seq)  # a second copy of what is written
            elif msg_id in self._held_ids:
                # A second copy of one held or taken: done when the first is written.
                self._copies.setdefault(self._held_ids[msg_id], []).append(item.seq)
                self._notify()
                return
            else:
                self._held_ids[msg_id] = item.seq
                self._id_of[item.seq] = msg_id
        if not self.awaiting_start and item.seq in self.in_transcript:
            # A resend of what the transcript holds: dropped, acked (and a later copy of
            # it, by its id, too).
            self._written(item.seq)
            self._advance()
        else:
            self.items.append(item)
            self.items.sort(key=lambda it: it.seq)
        self._notify()

    def highest_seq(self) -> int | None:
        """The highest seq this worker holds (received, handed to the host, or in the
        transcript), or None before its session is open (it does not know yet what its
        transcript holds): a daemon started again after a crash numbers on after it."""
        if self.awaiting_start:
            return None
        held = [self.watermark, *self.in_transcript, *self._received, *self._taken, *(item.seq for item in (*self.items, *self.kept))]
        return max(held)

    @property
    def gated(self) -> bool:
        return self.awaiting_start or self.compacting

    def runnable(self) -> bool:
        return not self.gated and not self.dialog_open and bool(self.items)

    def take_all(self) -> list[Item]:
        """Everything deliverable now (a new run's prompt, or a tool boundary's steer)."""
        if self.gated or self.dialog_open:
            return []
        if self.kept:
            taken = sorted([*self.kept, *self.items], key=lambda it: it.seq)
            self.items, self.kept = [], []
        else:
            taken, self.items = self.items, []
        self._taken.update(item.seq for item in taken)
        return taken

    def take_steer(self) -> list[Item]:
        """What may go in at a tool boundary of a running run: everything but follow-up
        items, which keep their place until the run has ended."""
        if self.gated or self.dialog_open:
            return []
        taken = [item for item in self.items if not item.follow_up]
        if taken:
            self.items = [item for item in self.items if item.follow_up]
            self._taken.update(item.seq for item in taken)
        return taken

    def take_reply(self) -> Item | None:
        """The first user reply, which answers an open dialog; agent items stay."""
        for index, item in enumerate(self.items):
            if item.kind == "reply":
                self._taken.add(item.seq)
                return self.items.pop(index)
        return None

    def give_back(self, items: list[Item]) -> list[Item]:
        """Items a run took but could not write into the transcript (its file refused
        them): back in the queue, in order, for the next run. Returns those given back."""
        back = [item for item in items if item.seq not in self.in_transcript and item.seq in self._taken]
        for item in back:
            self._taken.discard(item.seq)
        if back:
            self.items = sorted(self.items + back, key=lambda it: it.seq)
            self._notify()
        return back

    def keep(self, items: list[Item]) -> list[Item]:
        """Items a run handed to its agent, which ended before its transcript showed them
        (killed, crashed): kept, in order, to go first in the next run. Unlike
        :meth:`give_back` they start no run by themselves (``runnable`` ignores them): a
        dead agent is started again by the next item, so one that dies of a prompt does
        not loop. Returns those kept (an item the transcript shows is not)."""
        kept = [item for item in items if item.seq not in self.in_transcript and item.seq in self._taken]
        for item in kept:
            self._taken.discard(item.seq)
        self.kept = sorted(self.kept + kept, key=lambda it: it.seq)
        return kept

    def mark_done(self, seq: int) -> int:
        """``seq`` is in the transcript. Returns the new ack watermark."""
        self._written(seq)
        self._advance()
        return self.watermark

    def _written(self, seq: int) -> None:
        """``seq`` is in the transcript, and with it every second copy of it held."""
        self.in_transcript.add(seq)
        self.in_transcript.update(self._copies.pop(seq, ()))
        msg_id = self._id_of.pop(seq, None)
        if msg_id is not None:
            self._held_ids.pop(msg_id, None)
            self.ids_in_transcript.add(msg_id)

    def _advance(self) -> None:
        while self._received and self._received[0] in self.in_transcript:
            seq = self._received.pop(0)
            self._taken.discard(seq)
            self.watermark = max(self.watermark, seq)

    async def changed(self) -> None:
        await self._changed.wait()

    def wake(self) -> None:
        """Wake whoever waits in :meth:`changed` (shutdown)."""
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
