"""An item's life, as a state machine with no I/O (the h11 way: an event in, the item's
next stage and what to do out).

An item is what one message, reply, task, report or notice becomes on its way to one
receiver. Its stages:

- ``accepted``: taken from its sender, numbered, its record handed to the journal;
- ``pushed``: on the receiver's connection, not durable yet (a job's items go out before
  their commit; the sender's answer waits for it);
- ``journaled``: durable, not on the receiver's connection (it is away, or starting);
- ``delivered``: durable and pushed;
- ``in the transcript``: the receiver acked it (a receiver acks only what its transcript
  holds); a foreground peer's item ends here, having no record to keep;
- ``acked``: the ack of a job's item is durable too: nothing is left to do for it;
- ``dead``: it can never be delivered (its commit failed, its receiver was removed or is
  not running).

The events are :class:`Event`; :data:`TRANSITIONS` says, for each stage, which events may
happen and where each leads, and :func:`step` refuses every other one
(:class:`ItemLifeError`: a bug of its caller, never the sender's). A commit's outputs
(what the sender is answered, what its receipt says, whether the daemon must push or
start a worker) are :func:`on_commit`'s, from the item's stage and where its receiver is
(:class:`Receiver`).

The daemon drives it: :class:`~roost_core.daemon.delivery.Mailroom` keeps each job
item's stage (``Job.stages``, by seq, until its ack is durable; an item no longer there
was dropped with its job) and asks :func:`step` at each event, and :func:`on_commit` for
a commit's answer. A foreground peer's item needs no
store: it is ``pushed`` while it is in the peer's ``in_flight``.

An agent item's life goes on after its ack, as its sender sees it (its receipt,
:class:`~roost_core.daemon.receipts.Receipt`): the receiving model may have it in a model
request (``seen``: its host tells the daemon, op ``seen``), and a message naming it in
``reply_to`` may come back from its receiver to its sender (``answered``).
:data:`RECEIPT_MOVES` is that machine: its states are the receipt's (``queued``,
``delivered``, ``acknowledged``, ``seen``, ``answered``; ``refused`` and ``dead`` are
final), its events what happened to the item (:class:`Sighting`). An event a state does
not take leaves the receipt as it is (a late push, an ack after the model saw it): a
receipt never goes back.
"""

from __future__ import annotations

import enum

import attrs


class Stage(enum.Enum):
    # A member is its own key (members are singletons): the C hash of object, not
    # Enum's Python one, which every transition's lookup would call twice.
    __hash__ = object.__hash__

    ACCEPTED = "accepted"
    PUSHED = "pushed"
    JOURNALED = "journaled"
    DELIVERED = "delivered"
    IN_TRANSCRIPT = "in the transcript"
    ACKED = "acked"
    DEAD = "dead"


class Event(enum.Enum):
    # A member is its own key (members are singletons): the C hash of object, not
    # Enum's Python one, which every transition's lookup would call twice.
    __hash__ = object.__hash__

    #: The item went out on the receiver's connection (again, after a reconnect).
    PUSH = "push"
    #: The commit that holds its record is over, written.
    COMMIT = "commit"
    #: That commit failed: the item is not stored (its sender is told so).
    COMMIT_FAILED = "commit failed"
    #: The receiver acked it: a cumulative ack covers its seq.
    RECEIVER_ACK = "receiver ack"
    #: The record of that ack is durable.
    ACK_COMMIT = "ack commit"
    #: It can never be delivered: its receiver is removed, or (a foreground peer) not running.
    DROP = "drop"


class ItemLifeError(RuntimeError):
    """An event its item's stage does not take (see :data:`TRANSITIONS`)."""


S, E = Stage, Event

#: Every transition an item may take: (stage, event) -> next stage. Any other is refused.
TRANSITIONS: dict[tuple[Stage, Event], Stage] = {
    (S.ACCEPTED, E.PUSH): S.PUSHED,
    (S.ACCEPTED, E.COMMIT): S.JOURNALED,
    (S.ACCEPTED, E.COMMIT_FAILED): S.DEAD,
    (S.ACCEPTED, E.DROP): S.DEAD,
    # A worker acks what its transcript holds: one that acks an item this daemon has not
    # pushed it yet (it had it from a connection before, or says so wrongly) is taken at
    # its word, as its ack is.
    (S.ACCEPTED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    # Pushed again when the receiver reconnects (it drops a copy it holds by its seq).
    (S.PUSHED, E.PUSH): S.PUSHED,
    (S.PUSHED, E.COMMIT): S.DELIVERED,
    (S.PUSHED, E.COMMIT_FAILED): S.DEAD,
    # In the transcript before its own record was durable (the push goes before the fsync),
    # or a foreground peer's ack (its items have no record).
    (S.PUSHED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.PUSHED, E.DROP): S.DEAD,
    (S.JOURNALED, E.PUSH): S.DELIVERED,
    # After a daemon restart: the receiver holds what the last daemon pushed it.
    (S.JOURNALED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.JOURNALED, E.DROP): S.DEAD,
    (S.DELIVERED, E.PUSH): S.DELIVERED,
    (S.DELIVERED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.DELIVERED, E.DROP): S.DEAD,
    # Acked while its commit was being written: the commit ends (its sender is answered,
    # its receipt says acknowledged); or fails (its sender is told not stored, as for any
    # failed commit, though the receiver has it: a resend is dropped by its id).
    (S.IN_TRANSCRIPT, E.COMMIT): S.IN_TRANSCRIPT,
    (S.IN_TRANSCRIPT, E.COMMIT_FAILED): S.IN_TRANSCRIPT,
    (S.IN_TRANSCRIPT, E.ACK_COMMIT): S.ACKED,
    # Its receiver was removed while its commit was being written: the commit still ends,
    # and its sender is answered as the job stands (its receipt says dead).
    (S.DEAD, E.COMMIT): S.DEAD,
    (S.DEAD, E.COMMIT_FAILED): S.DEAD,
}


def step(stage: Stage, event: Event) -> Stage:
    """The stage an item in ``stage`` goes to on ``event``; :class:`ItemLifeError` for an
    event that stage must refuse."""
    try:
        return TRANSITIONS[stage, event]
    except KeyError:
        raise ItemLifeError(f"an item {stage.value} takes no {event.value}") from None


class Receiver(enum.Enum):
    """Where a job item's receiver is when the item's commit ends."""

    # A member is its own key (members are singletons): the C hash of object, not
    # Enum's Python one, which every transition's lookup would call twice.
    __hash__ = object.__hash__


    #: A worker connection takes pushes now.
    CONNECTED = "connected"
    #: The job is stopped and the item does not wake it (only a user reply does).
    STOPPED = "stopped"
    #: Its worker runs but is not connected yet (starting, or reconnecting).
    STARTING = "starting"
    #: No worker, and the item must not start one (a tree whose budget is spent).
    NOT_WOKEN = "not woken"
    #: No worker: one is started for the item.
    ASLEEP = "asleep"


@attrs.frozen
class Committed:
    """A job item's commit is over, written: its next ``stage``; the sender's ``outcome``
    (``delivered``, ``queued``, ``stopped``; ``start``: a worker is started for it, and
    the sender hears ``started``, or ``queued`` when none can be started now); the state
    its ``receipt`` records; and whether items held back must be ``push``\\ed now."""

    stage: Stage
    outcome: str
    receipt: str
    push: bool = False


_OUTCOMES = {
    Receiver.CONNECTED: "delivered",
    Receiver.STOPPED: "stopped",
    Receiver.STARTING: "queued",
    Receiver.NOT_WOKEN: "queued",
    Receiver.ASLEEP: "start",
}


def _committed(stage: Stage, receiver: Receiver) -> Committed:
    outcome = _OUTCOMES[receiver]
    if stage is Stage.IN_TRANSCRIPT:
        receipt = "acknowledged"
    elif stage is Stage.DEAD:
        receipt = "dead"
    else:
        receipt = "delivered" if outcome == "delivered" else "queued"
    # An item the receiver's connection has not had yet (held back while the journal
    # failed, or past the bound of undurable pushes) goes now.
    return Committed(step(stage, Event.COMMIT), outcome, receipt, push=receiver is Receiver.CONNECTED and stage is Stage.ACCEPTED)


#: Every commit's outputs, made once (one lookup per message).
_COMMITS = {(stage, receiver): _committed(stage, receiver) for stage in Stage for receiver in Receiver if (stage, Event.COMMIT) in TRANSITIONS}


def on_commit(stage: Stage, receiver: Receiver) -> Committed:
    """The outputs of a job item's ``commit`` (see :class:`Committed`);
    :class:`ItemLifeError` when its stage takes no commit."""
    try:
        return _COMMITS[stage, receiver]
    except KeyError:
        raise ItemLifeError(f"an item {stage.value} takes no {Event.COMMIT.value}") from None


class Sighting(enum.Enum):
    """What happens to an agent item as its sender sees it (:data:`RECEIPT_MOVES`); each
    member's value is the receipt state it leads to."""

    __hash__ = object.__hash__

    #: On the receiver's connection.
    PUSH = "delivered"
    #: In the receiver's transcript (its ack).
    RECEIVER_ACK = "acknowledged"
    #: The receiving model had it in a model request (op ``seen``).
    MODEL_SAW = "seen"
    #: A message naming it in ``reply_to`` came back from its receiver to its sender.
    ANSWER = "answered"
    #: It can never be delivered.
    DROP = "dead"


_BEFORE_SEEN = ("queued", "delivered", "acknowledged")

#: Every move of a receipt: (state, sighting) -> next state. Any other leaves it as it is.
RECEIPT_MOVES: dict[tuple[str, Sighting], str] = {
    ("queued", Sighting.PUSH): "delivered",
    ("queued", Sighting.RECEIVER_ACK): "acknowledged",
    ("delivered", Sighting.RECEIVER_ACK): "acknowledged",
    ("queued", Sighting.DROP): "dead",
    ("delivered", Sighting.DROP): "dead",
    # Seen before its ack is possible: a host writes the item, the model call follows,
    # and the ack's round trip may come after it.
    **{(state, Sighting.MODEL_SAW): "seen" for state in _BEFORE_SEEN},
    # An answer says its receiver read it, whether or not its host told when.
    **{(state, Sighting.ANSWER): "answered" for state in (*_BEFORE_SEEN, "seen")},
}
