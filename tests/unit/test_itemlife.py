"""An item's life (``daemon.itemlife``): every transition the machine takes, every one it
must refuse, what a commit answers from each stage, and the daemon driving it through a
send, a push, a commit, an ack and the ack's commit (detached connections, the real
daemon's op logic, no socket)."""

from __future__ import annotations

import os

import anyio
import pytest

from roost_core.daemon.connection import Connection
from roost_core.daemon.core import Daemon
from roost_core.daemon.itemlife import (
    TRANSITIONS,
    Event,
    ItemLifeError,
    Receiver,
    Stage,
    on_commit,
    step,
)
from roost_core.paths import resolve_paths
from roost_core.plugins import make_plugin_manager
from roost_core.protocol import encode
from roost_core.testing import make_config

S, E = Stage, Event

#: Every transition an item may take, written out (not read from the table under test).
ALLOWED = {
    (S.ACCEPTED, E.PUSH): S.PUSHED,
    (S.ACCEPTED, E.COMMIT): S.JOURNALED,
    (S.ACCEPTED, E.COMMIT_FAILED): S.DEAD,
    (S.ACCEPTED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.ACCEPTED, E.DROP): S.DEAD,
    (S.PUSHED, E.PUSH): S.PUSHED,
    (S.PUSHED, E.COMMIT): S.DELIVERED,
    (S.PUSHED, E.COMMIT_FAILED): S.DEAD,
    (S.PUSHED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.PUSHED, E.DROP): S.DEAD,
    (S.JOURNALED, E.PUSH): S.DELIVERED,
    (S.JOURNALED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.JOURNALED, E.DROP): S.DEAD,
    (S.DELIVERED, E.PUSH): S.DELIVERED,
    (S.DELIVERED, E.RECEIVER_ACK): S.IN_TRANSCRIPT,
    (S.DELIVERED, E.DROP): S.DEAD,
    (S.IN_TRANSCRIPT, E.COMMIT): S.IN_TRANSCRIPT,
    (S.IN_TRANSCRIPT, E.COMMIT_FAILED): S.IN_TRANSCRIPT,
    (S.IN_TRANSCRIPT, E.ACK_COMMIT): S.ACKED,
    (S.DEAD, E.COMMIT): S.DEAD,
    (S.DEAD, E.COMMIT_FAILED): S.DEAD,
}
REFUSED = [(stage, event) for stage in Stage for event in Event if (stage, event) not in ALLOWED]


def test_the_table_is_the_one_written_here() -> None:
    assert TRANSITIONS == ALLOWED


@pytest.mark.parametrize(("stage", "event"), list(ALLOWED), ids=lambda v: v.value)
def test_each_transition(stage: Stage, event: Event) -> None:
    assert step(stage, event) is ALLOWED[stage, event]


@pytest.mark.parametrize(("stage", "event"), REFUSED, ids=lambda v: v.value)
def test_each_refused_transition(stage: Stage, event: Event) -> None:
    with pytest.raises(ItemLifeError, match=f"an item {stage.value} takes no {event.value}"):
        step(stage, event)


def test_refused_transitions_include_the_ones_that_would_lose_or_repeat_an_item() -> None:
    # Settled items take nothing; a durable item is not committed twice; an ack of an
    # item's ack needs the receiver's ack first; nothing comes back from the dead.
    for refused in [(S.ACKED, E.PUSH), (S.ACKED, E.RECEIVER_ACK), (S.DELIVERED, E.COMMIT), (S.JOURNALED, E.COMMIT),
                    (S.PUSHED, E.ACK_COMMIT), (S.DEAD, E.PUSH), (S.DEAD, E.RECEIVER_ACK), (S.IN_TRANSCRIPT, E.PUSH)]:
        assert refused in REFUSED


COMMITTING = [stage for stage in Stage if (stage, E.COMMIT) in ALLOWED]


@pytest.mark.parametrize("stage", COMMITTING, ids=lambda v: v.value)
@pytest.mark.parametrize("receiver", list(Receiver), ids=lambda v: v.value)
def test_what_each_commit_answers(stage: Stage, receiver: Receiver) -> None:
    done = on_commit(stage, receiver)
    assert done.stage is ALLOWED[stage, E.COMMIT]
    assert done.outcome == {
        Receiver.CONNECTED: "delivered",
        Receiver.STOPPED: "stopped",
        Receiver.STARTING: "queued",
        Receiver.NOT_WOKEN: "queued",
        Receiver.ASLEEP: "start",
    }[receiver]
    expected_receipt = {S.IN_TRANSCRIPT: "acknowledged", S.DEAD: "dead"}.get(stage, "delivered" if receiver is Receiver.CONNECTED else "queued")
    assert done.receipt == expected_receipt
    # Only an item its receiver's connection has not had yet is pushed at its commit.
    assert done.push == (receiver is Receiver.CONNECTED and stage is S.ACCEPTED)


@pytest.mark.parametrize("stage", [stage for stage in Stage if stage not in COMMITTING], ids=lambda v: v.value)
def test_a_commit_is_refused_where_the_machine_refuses_it(stage: Stage) -> None:
    with pytest.raises(ItemLifeError):
        on_commit(stage, Receiver.CONNECTED)


def line(frame: dict) -> bytes:
    return encode(frame)[:-1]


def test_the_daemon_steps_a_job_items_stage_at_each_event(tmp_path) -> None:
    """A send to a job with a connected worker: accepted and pushed before its commit
    (``pushed``), ``delivered`` once durable, ``in the transcript`` when the worker acks
    it, and forgotten (``acked``) once the ack is durable."""
    paths = resolve_paths({"ROOST_HOME": str(tmp_path / "home")})
    paths.ensure()
    config = make_config({"agentExternalMessages": True})

    async def main() -> None:
        daemon = Daemon(paths, config, make_plugin_manager(config), durable=False)
        daemon.load()
        try:
            dispatcher = daemon.dispatcher
            alice = Connection.detached(1, pid=os.getpid(), uid=os.getuid())
            worker = Connection.detached(2, pid=os.getpid(), uid=os.getuid())
            await dispatcher.run(alice, dispatcher.decode(line({"id": 0, "op": "peer_register", "pid": os.getpid(), "name": "alice", "sessionId": "s-a"})))
            job = daemon.maker.create_job(task="wait", name="bob", cwd=str(paths.home), host="scripted")
            daemon.maker.add_job(job)
            job.state, job.worker_pid, job.conn, worker.job = "idle", os.getpid(), worker, job  # its worker, connected
            alice.take_sent()
            assert dispatcher.accept(alice, dispatcher.decode(line({"id": 1, "op": "send", "to": job.id, "message": "hi"})))
            (seq,) = job.stages
            assert job.stages[seq] is S.PUSHED
            (pushed,) = worker.take_sent()
            assert pushed["event"] == "deliver" and pushed["seq"] == seq
            assert alice.take_sent() == []  # the answer waits for the commit
            assert daemon.journal is not None
            await daemon.journal.flush()
            assert job.stages[seq] is S.DELIVERED
            (answer,) = alice.take_sent()
            assert answer["result"]["result"] == "delivered"
            assert dispatcher.accept(worker, dispatcher.decode(line({"id": 2, "op": "ack", "seq": seq})))
            assert job.stages[seq] is S.IN_TRANSCRIPT
            await daemon.journal.flush()
            assert job.stages == {}
            assert worker.take_sent() == [{"id": 2, "ok": True, "result": {"acked": seq}}]
        finally:
            assert daemon.journal is not None
            await daemon.journal.aclose()

    anyio.run(main)


# ---------------------------------------------------------------------------- receipts

from roost_core.daemon.itemlife import RECEIPT_MOVES, Sighting  # noqa: E402
from roost_core.daemon.receipts import Receipts  # noqa: E402

#: Every move a receipt takes, written out; every other (state, sighting) leaves it as it is.
RECEIPT_ALLOWED = {
    ("queued", Sighting.PUSH): "delivered",
    ("queued", Sighting.RECEIVER_ACK): "acknowledged",
    ("delivered", Sighting.RECEIVER_ACK): "acknowledged",
    ("queued", Sighting.DROP): "dead",
    ("delivered", Sighting.DROP): "dead",
    ("queued", Sighting.MODEL_SAW): "seen",
    ("delivered", Sighting.MODEL_SAW): "seen",
    ("acknowledged", Sighting.MODEL_SAW): "seen",
    ("queued", Sighting.ANSWER): "answered",
    ("delivered", Sighting.ANSWER): "answered",
    ("acknowledged", Sighting.ANSWER): "answered",
    ("seen", Sighting.ANSWER): "answered",
}
RECEIPT_STATES = ("queued", "delivered", "acknowledged", "seen", "answered", "refused", "dead")


def test_the_receipt_table_is_the_one_written_here() -> None:
    assert RECEIPT_MOVES == RECEIPT_ALLOWED


def sighted(tmp_path, state: str, sighting: Sighting) -> str | None:
    """What the daemon's :class:`Receipts` does to a receipt in ``state`` on ``sighting``
    (the path every move takes: ``move``, or ``answer`` for a reply): its state after,
    or None when it stays."""
    receipts = Receipts(tmp_path / "dead.jsonl", durable=False)
    receipts.write = lambda record: None
    receipt = receipts.record("lead", "kid", "kid", "message", state, seq=4, text="hi", msg_id="m00000001")
    if sighting is Sighting.ANSWER:
        moved = receipts.answer("m00000001", "kid", "lead")
    else:
        moved = receipts.move("kid", 4, sighting)
    assert (moved is None) == (receipt.state == state)
    return None if moved is None else receipt.state


@pytest.mark.parametrize("state", RECEIPT_STATES)
@pytest.mark.parametrize("sighting", list(Sighting), ids=lambda v: v.name)
def test_a_receipt_only_moves_forward(tmp_path, state: str, sighting: Sighting) -> None:
    after = sighted(tmp_path, state, sighting)
    assert after == RECEIPT_ALLOWED.get((state, sighting))
    if after is not None and after != "dead":
        assert RECEIPT_STATES.index(after) > RECEIPT_STATES.index(state)


def test_receipts_see_answer_tally_and_come_back_from_their_records(tmp_path) -> None:
    """Seen before the ack stays seen; only the receiver's reply back to its sender answers
    (per receiver of a broadcast's one id), and an answer stamps seen when nothing did
    before (the model had the item: the answer names its id); the counts per receiver; a
    restart's receipts from the journal."""
    written: list[dict] = []
    receipts = Receipts(tmp_path / "dead.jsonl", durable=False)
    receipts.write = written.append
    receipts.record("lead", "kid1", "one", "message", "delivered", seq=4, text="hi", msg_id="m00000001")
    receipts.record("lead", "kid2", "two", "message", "queued", seq=9, text="hi", msg_id="m00000001")
    receipts.record("lead", "kid2", "two", "message", "delivered", seq=10, text="more", msg_id="m00000002")
    assert receipts.saw("kid1", [4, 5]) == 1
    receipts.move("kid1", 4, Sighting.RECEIVER_ACK)  # its ack after the model call: still seen
    assert receipts.saw("kid1", [4]) == 0
    receipts.record("kid2", "lead", "lead", "message", "delivered", seq=1, text="not you", reply_to="m00000002")
    receipts.record("kid1", "lead", "lead", "message", "delivered", seq=2, text="4", reply_to="m00000001")
    assert receipts.answer("m00000001", "nobody", "lead") is None
    assert receipts.answer("m00000001", "kid2", "someone else") is None
    states = {(r["to"], r["seq"]): (r["state"], r["seen"] is not None, r["answered"] is not None) for r in receipts.sent_by("lead")}
    assert states == {("kid1", 4): ("answered", True, True), ("kid2", 9): ("queued", False, False), ("kid2", 10): ("answered", True, True)}
    assert receipts.tally("lead") == {"kid1": {"answered": 1}, "kid2": {"queued": 1, "answered": 1}}
    assert [r["seq"] for r in receipts.received_by("kid2")] == [9, 10]
    # Three records (a seen, two answers): read back, the last of each item wins.
    assert [(w["receipt"]["to"], w["receipt"]["state"]) for w in written] == [("kid1", "seen"), ("kid2", "answered"), ("kid1", "answered")]
    again = Receipts(tmp_path / "dead.jsonl", durable=False)
    for record in written:
        again.restore(record)
    assert {(r["to"], r["seq"], r["state"]) for r in again.sent_by("lead")} == {("kid1", 4, "answered"), ("kid2", 10, "answered")}
    assert again.records() == [{"op": "receipt", "receipt": r} for r in again.sent_by("lead")]
    with pytest.raises(ValueError):
        again.restore({"op": "receipt", "receipt": {"sender": "lead"}})
