"""Delivery of agent items: the op logic every message takes, with no I/O.

:class:`Mailroom` hands an accepted item to its receiver and settles what follows (the
commit that makes it durable, the receiver's ack). What goes in is an item and the record
of who receives it; what comes out are values: the events queued on connections
(``Connection.send`` only queues them; the wire layer writes), the journal records
(``journal.add`` only buffers them; the journal's writer thread writes), the receipts, and
the answer. Starting a worker for an item is the one effect it asks of its owner: it calls
``start(job)``, which the daemon answers by starting one (a test records the wish).

Each item's life is the state machine of :mod:`~roost_core.daemon.itemlife`: the mailroom
keeps a job item's stage (``Job.stages``) and steps it at every event (pushed, committed,
acked, its ack committed, dropped); what a commit answers is that machine's output.

It is the hot path of the daemon: one send is :meth:`to_peer` (a foreground receiver) or
:meth:`to_job` then :meth:`committed` (a job, once the commit is over), and one ack is
:meth:`ack_job` or :meth:`ack_peer`. Each builds the item's record once: the queue item,
and from it the ``deliver`` event, encoded once for a job's item: the same bytes are
pushed to the worker and stored inside the item's journal record.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec

from roost_core import faults
from roost_core.daemon.itemlife import Committed, Event, Receiver, Sighting, Stage, on_commit, step
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.receipts import MessageQuotes, Receipts
from roost_core.protocol import (
    BAD_ARGS,
    NOT_STORED,
    QUEUE_FULL,
    TOO_LARGE,
    ProtocolError,
    encode_string,
)
from roost_core.queue import MAX_UNDURABLE_SEQS, Item
from roost_core.records import OutgoingItem, PeerInfo
from roost_core.store import Commit, JournalError

#: A worker that crashes with work pending is started again at most this many times.
MAX_CRASH_RESTARTS = 3


class JournalSink(Protocol):
    """What the mailroom needs of the journal: buffer a record for the next commit."""

    #: Whether a record handed over now is all but sure to be stored (``Journal.steady``).
    steady: bool

    def add(self, *records: dict[str, Any]) -> Commit: ...

    def add_line(self, line: bytes) -> Commit: ...


class Pending(msgspec.Struct):
    """An op's result that waits for a journal commit: ``finish()`` makes it once
    ``commit`` is over (and raises what the op would have raised then). The server
    answers it from the commit's callback, so requests pipelined on one connection join
    one commit; :func:`settle` awaits it where an op needs the result itself. (A msgspec
    struct: one is made per durable send, in C.)"""

    commit: Commit
    finish: Callable[[], dict[str, Any]]


class HeldPush(msgspec.Struct):
    """The answer to a keyed send to a foreground peer, whose push waits: the daemon
    pushes it (``push()``) only once the answer is on record (``daemon.ledger``), so that a
    sender that asks again after a crash is never told ``not running`` about a message
    the receiver got. Pushed at once by a caller that keeps no record (:func:`settle`)."""

    answer: dict[str, Any]
    push: Callable[[], None]
    #: The receiving peer, the item's seq there and its ``deliver`` event: the record of
    #: the answer keeps the event, so a daemon that dies before the push (or before the
    #: receiver acks it) pushes it again when the receiver registers with the next one.
    peer: Any = None
    seq: int = 0
    event: bytes = b""


T = TypeVar("T")


async def once_committed(commit: Commit, finish: Callable[[], T]) -> T:
    """``finish()``, made once ``commit`` is over: in the commit's callbacks, in order
    with every other answer of that commit (as the answers of pipelined requests are), not
    whenever the awaiting task runs next; raises what ``finish`` raised."""
    made: list[T] = []
    failed: list[BaseException] = []

    def make(_commit: Commit) -> None:
        try:
            made.append(finish())
        except BaseException as exc:  # noqa: BLE001 - raised again in the awaiting task
            failed.append(exc)

    commit.when_done(make)
    await commit.wait()
    if failed:
        raise failed[0]
    return made[0]


async def settle(answer: dict[str, Any] | Pending | HeldPush) -> dict[str, Any]:
    """An op's result, waiting for its commit if it is :class:`Pending` (a
    :class:`HeldPush` is pushed now)."""
    if isinstance(answer, Pending):
        return await once_committed(answer.commit, answer.finish)
    if isinstance(answer, HeldPush):
        answer.push()
        return answer.answer
    return answer


def release_held(peer: ForegroundPeer, conn: Any, seq: int) -> None:
    """The push of ``seq`` (a keyed send's) may go, its answer on record: push it and every
    item numbered after it that waited only for it, in seq order, up to the next item that
    still waits for its own record. Nothing when ``conn`` is no longer the peer's (the
    connection that registered since was pushed all of ``in_flight``)."""
    peer.held.discard(seq)
    if peer.conn is not conn:
        return
    waiting = peer.queued_pushes
    while waiting and waiting[0] not in peer.held:
        event = peer.in_flight.get(waiting.pop(0))
        if event is not None:  # acked or put back meanwhile: nothing to push
            conn.push(event)


class Mailroom:
    """Hands agent items on and settles them (see the module docstring).

    ``journal`` is set once the daemon has loaded its journal; ``start(job)`` starts a
    worker for ``job`` and says whether it did."""

    def __init__(self, receipts: Receipts, quotes: MessageQuotes, start: Callable[[Job], bool]) -> None:
        self.receipts = receipts
        self.quotes = quotes
        self.start = start
        self.journal: JournalSink | None = None
        #: Told when a foreground peer acks an item whose push is on record in the
        #: ledger (``AnswerLedger.pushed``): the record need not keep it any more.
        self.pushed: Callable[[Any], None] | None = None

    def to_peer(
        self,
        peer: ForegroundPeer,
        target: PeerInfo,
        item: OutgoingItem,
        content: str,
        delivery: str,
        answer: dict[str, Any],
        *,
        trace: str | None,
        hold: bool = False,
    ) -> dict[str, Any] | HeldPush:
        """Push ``item`` to a foreground peer, which has no mailbox: ``delivered`` (it
        waits in the peer's ``in_flight`` until acked) or ``not running``. ``answer`` is
        the start of the sender's answer (who and how related). The item is written at
        once (``Connection.push``): a session waiting for it does not wait for the rest
        of the daemon's pass, the sender's answer among it, nor for the bookkeeping that
        follows the push here."""
        sender = item.sender
        conn = peer.conn
        if conn is None:
            step(Stage.ACCEPTED, Event.DROP)
            self.receipts.record(sender.id, target.id, target.name, item.kind, "dead", reason="receiver not running", text=item.text)
            answer["result"] = "not running"
            return answer
        pushed = self.item_of(peer.seq + 1, item, content, delivery, trace)
        try:
            event = pushed.checked_event()
        except ProtocolError as exc:
            self.receipts.record(sender.id, target.id, target.name, item.kind, "refused", reason=exc.code, text=item.text)
            raise
        # Accepted and pushed at once: a foreground peer keeps it in ``in_flight`` (its
        # stage's store) until it acks it.
        step(Stage.ACCEPTED, Event.PUSH)
        seq = peer.seq = pushed.seq
        peer.in_flight[seq] = event
        peer.last_message = pushed.created
        self.quotes.remember(item.id, item.text)
        self.receipts.record(sender.id, target.id, target.name, item.kind, "delivered", seq=seq, text=item.text, msg_id=item.id, reply_to=item.reply_to)
        answer["result"] = "delivered"
        answer["seq"] = seq
        if hold:
            # In flight already: a connection that registers meanwhile gets it pushed.
            peer.queued_pushes.append(seq)
            peer.held.add(seq)
            return HeldPush(answer, lambda: release_held(peer, conn, seq), peer, seq, event)
        if peer.queued_pushes:
            # Numbered after an item whose push waits for its record: pushed after it.
            peer.queued_pushes.append(seq)
            return answer
        conn.push(event)
        return answer

    def to_job(
        self, job: Job, target: PeerInfo, item: OutgoingItem, content: str, delivery: str, answer: dict[str, Any], *, trace: str | None, wake: bool, past_cap: bool = False
    ) -> Pending:
        """Queue ``item`` on ``job`` (pushed at once to a connected worker, its record to
        the journal); the sender's answer once the record's commit is over: what
        :meth:`outcome` says, with the seq (raises ``queue_full`` at the cap, unless
        ``past_cap``: see :meth:`SendDesk.send <roost_core.daemon.sending.SendDesk.send>`)."""
        queued = self.item_of(job.queue.next_seq(), item, content, delivery, trace)
        try:
            commit = self.queue(job, queued, past_cap=past_cap)
        except ProtocolError as exc:
            sender = item.sender
            if exc.code == QUEUE_FULL:
                self.receipts.record(sender.id, target.id, target.name, item.kind, "dead", reason="queue full", text=item.text)
            elif exc.code in (TOO_LARGE, NOT_STORED):
                self.receipts.record(sender.id, target.id, target.name, item.kind, "refused", reason=exc.code, text=item.text)
            raise
        self.quotes.remember(item.id, item.text)
        return Pending(commit, QueuedAnswer(self, job, target, item, queued, commit, answer, wake))

    def item_of(self, seq: int, item: OutgoingItem, content: str, delivery: str, trace: str | None) -> Item:
        """The queue item (numbered ``seq``) that carries ``item`` to its receiver, with
        the first words of the message it answers. (Its own words are kept for the
        replies to come by the caller, once the item is taken.)"""
        sender = item.sender
        quote = self.quotes.quote(item.reply_to) if item.reply_to else None
        return Item(
            seq, item.kind, content, item.text, sender.id, sender.name, item.relation, time.time(), trace, item.hops,
            item.id, item.reply_to, item.scope, item.broadcast_chain, delivery, quote,
        )

    def queue(self, job: Job, item: Item, *, past_cap: bool = False) -> Commit:
        """Queue ``item`` (its seq the queue's next), push it to a connected worker and
        hand its record to the journal; the commit that will make it durable (raises
        ``queue_full`` at the cap unless ``past_cap``, ``too_large`` for an item longer
        than a frame: nothing queued)."""
        # The item's one encoding: its deliver event, pushed as it is and stored inside
        # its journal record. Made first: one longer than a frame is refused here,
        # before it takes a seq (the receiver's decoder would discard it unseen).
        event = item.checked_event()
        try:
            job.queue.append(item, past_cap=past_cap)
        except ProtocolError as exc:
            if exc.code == QUEUE_FULL and job.write_failing:
                # Full because its worker cannot write what it holds: the disk's doing.
                raise ProtocolError(NOT_STORED, f"not stored: {job.name or job.id} cannot write its session file (the disk is full, or failing); nothing was kept, try again later") from None
            raise
        stages = job.stages
        stages[item.seq] = Stage.ACCEPTED
        # Push before the fsync (the receiver acks only what is in its transcript, and
        # the restart seq gap keeps a lost undurable seq from ever being reused), but
        # answer only once the item is durable.
        faults.point("daemon.after_accept_before_persist")
        try:
            assert self.journal is not None
            conn = job.conn
            if conn is not None and job.sent == item.seq - 1 and self.journal.steady and item.seq - job.queue.durable <= MAX_UNDURABLE_SEQS:
                # The usual case, push_pending's in short (the test of JobQueue.may_push
                # written out here: it runs for every item): the worker has every earlier
                # item, so this one alone goes (and has no receipt to move yet: that is
                # made once it is durable).
                conn.send(event)
                job.sent = item.seq
                stages[item.seq] = step(Stage.ACCEPTED, Event.PUSH)
            else:
                self.push_pending(job)
            return self.journal.add_line(item_record(job.id, event))
        except Exception:
            job.queue.drop(item.seq)
            stages.pop(item.seq, None)
            raise

    def push_pending(self, job: Job) -> None:
        """Send every item the current worker connection has not had yet, in seq order.

        Items go out before they are durable (answers wait for that), except while the
        journal fails or the disk is nearly full (``Journal.steady``): then only durable
        ones, so an item whose sender is told it was not stored does not reach the
        receiver either; and never more than
        ``MAX_UNDURABLE_SEQS`` past the durable watermark (:meth:`JobQueue.may_push`):
        the rest follow as their commits end (:meth:`outcome`)."""
        conn = job.conn
        if conn is None:
            return
        journal_ok = self.journal is None or self.journal.steady
        queue = job.queue
        stages = job.stages
        for item in queue.pending(after=job.sent):
            if not queue.may_push(item.seq, journal_ok):
                break
            stages[item.seq] = step(stages[item.seq], Event.PUSH)
            conn.send(item.encoded())
            job.sent = item.seq
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, Sighting.PUSH)

    def outcome(self, job: Job, item: Item, commit: Commit, *, wake: bool = True) -> str:
        """What happened to ``item`` once ``commit`` is over: ``delivered`` (pushed to a
        connected worker), ``queued`` (kept; the worker is starting or reconnecting, or
        ``wake`` is False), ``started`` (a worker was started for it) or ``stopped``
        (kept; a stopped job is not woken). Raises ``not_stored``, the item dropped, if
        it is not durable."""
        return self.committed(job, item, commit, wake=wake)[0]

    def committed(self, job: Job, item: Item, commit: Commit, *, wake: bool = True) -> tuple[str, Committed]:
        """``item``'s commit is over: its stage steps (:func:`itemlife.on_commit`), and
        the daemon does what that says (push what was held back, start a worker). Returns
        what the sender hears (:meth:`outcome`) and the machine's outputs."""
        stages = job.stages
        # (Not there: dropped with its job, removed while the commit was being written.)
        stage = stages.get(item.seq, Stage.DEAD)
        if commit.error is not None:
            stage = step(stage, Event.COMMIT_FAILED)
            job.queue.drop(item.seq)
            if stage is Stage.DEAD:
                stages.pop(item.seq, None)
            else:
                stages[item.seq] = stage
            raise not_stored(commit.error, "the message")
        job.queue.mark_durable(item.seq)
        faults.point("daemon.after_persist_before_answer")
        done = on_commit(stage, receiver_of(job, item, wake))
        if done.stage is not Stage.DEAD:
            stages[item.seq] = done.stage
        if done.push:
            self.push_pending(job)  # held back while the journal failed, or past the bound
        if done.outcome != "start":
            return done.outcome, done
        if job.crashes > MAX_CRASH_RESTARTS:
            job.crashes = 0
        # The item is stored: it is queued even when no worker can be started right now.
        return ("started" if self.start(job) else "queued"), done

    def ack_job(self, job: Job, seq: int) -> dict[str, Any] | Pending:
        """A worker's cumulative ack: the items up to ``seq`` leave the queue (their
        receipts say ``acknowledged``); answered once its record is durable, at once when
        it acks nothing new."""
        queue = job.queue
        if seq > queue.reply_seq:
            raise ProtocolError(BAD_ARGS, f"ack: seq {seq} was never queued")
        done = queue.ack(seq)
        stages = job.stages
        for item in done:
            stages[item.seq] = step(stages[item.seq], Event.RECEIVER_ACK)
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, Sighting.RECEIVER_ACK)
        acked = queue.acked
        result = {"acked": acked}
        if not done:
            return result
        assert self.journal is not None
        try:
            commit = self.journal.add({"op": "ack", "job": job.id, "seq": acked})
        except JournalError as exc:
            raise not_stored(exc, "the ack") from exc
        return Pending(commit, lambda: self.ack_stored(job, acked, commit, result))

    def ack_stored(self, job: Job, acked: int, commit: Commit, result: dict[str, Any]) -> dict[str, Any]:
        """An ack's answer once its record's commit is over: the items it covers are
        settled (``acked``), and forgotten."""
        if commit.error is not None:
            # The items are in the transcript either way; a restart before the next stored
            # ack only pushes them again, and the worker drops them.
            raise not_stored(commit.error, "the ack")
        stages = job.stages
        for seq in [seq for seq in stages if seq <= acked]:
            step(stages.pop(seq), Event.ACK_COMMIT)
        return result

    def drop_all(self, job: Job) -> list[Item]:
        """``job`` is removed: every item it holds is dead (their receipts say so)."""
        stages = job.stages
        dropped = job.queue.clear()
        for item in dropped:
            step(stages[item.seq], Event.DROP)
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, Sighting.DROP, "target removed")
        stages.clear()
        return dropped

    def ack_peer(self, peer: ForegroundPeer, seq: int) -> dict[str, Any]:
        """A foreground peer's cumulative ack: what it holds leaves ``in_flight``."""
        in_flight = peer.in_flight
        for key in [s for s in in_flight if s <= seq]:
            in_flight.pop(key)
            step(Stage.PUSHED, Event.RECEIVER_ACK)  # in the transcript: nothing more to keep
            peer.reports_in_flight.pop(key, None)
            recorded = peer.recorded.pop(key, None)
            if recorded is not None and self.pushed is not None:
                self.pushed(recorded)
            self.receipts.move(peer.id, key, Sighting.RECEIVER_ACK)
        return {"acked": seq}


class QueuedAnswer(msgspec.Struct):
    """The answer to a send queued on a job, made once the item's commit is over (a
    :class:`Pending` answer's ``finish``): what :meth:`Mailroom.outcome` says, with the
    seq, and the sender's receipt. (A msgspec struct with a ``__call__`` rather than a
    closure: one is made per message, in C.)"""

    mailroom: Mailroom
    job: Job
    target: PeerInfo
    item: OutgoingItem
    queued: Item
    commit: Commit
    answer: dict[str, Any]
    wake: bool

    def __call__(self) -> dict[str, Any]:
        job, queued, item, target, answer = self.job, self.queued, self.item, self.target, self.answer
        outcome, done = self.mailroom.committed(job, queued, self.commit, wake=self.wake)
        job.last_message = time.time()
        # (``acknowledged`` when the worker acked it while it was being made durable:
        # its ack found no receipt to move yet.)
        self.mailroom.receipts.record(item.sender.id, target.id, target.name, item.kind, done.receipt, seq=queued.seq, text=item.text, msg_id=item.id, reply_to=item.reply_to)
        answer["result"] = outcome
        answer["seq"] = queued.seq
        if job.dialog and outcome in ("delivered", "queued"):
            answer["waiting"] = "waiting on a dialog"
        return answer


def receiver_of(job: Job, item: Item, wake: bool) -> Receiver:
    """Where ``item``'s receiver is as its commit ends (:class:`itemlife.Receiver`)."""
    if job.conn is not None:
        return Receiver.CONNECTED
    if job.state == "stopped" and item.kind != "reply":
        return Receiver.STOPPED
    if job.worker_pid is not None or job.attach is not None:
        # (Attached: pushed once the interactive session has registered.)
        return Receiver.STARTING
    return Receiver.ASLEEP if wake else Receiver.NOT_WOKEN


def not_stored(exc: BaseException, what: str) -> ProtocolError:
    """The answer to an op whose change could not be made durable: nothing of it stays."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ProtocolError(NOT_STORED, f"not stored: the daemon could not write {what} to disk ({reason}); nothing was kept, try again later")


def item_record(job_id: str, event: bytes) -> bytes:
    """The journal record of an item of ``job_id`` queued as ``event`` (its encoded
    ``deliver`` event): ``{"op": "item", "job": ..., "deliver": {...}}``, made around the
    event's bytes rather than encoded again (``base.apply_journal_record`` reads it)."""
    return b'{"op":"item","job":' + _job_key(job_id) + b',"deliver":' + event[:-1] + b"}\n"


#: A job id as its records write it (``encode_string``), kept for the jobs messaged most
#: lately: every item's record starts with it.
_job_key = functools.lru_cache(maxsize=1024)(encode_string)
