"""The mailroom (``roost_core.daemon.delivery``): the op logic of every message's path,
run with no daemon, no socket and no disk write of the journal.

Its outputs are what the tests read: the events queued on detached connections, the
journal records it buffers (a recording journal stands in for the writer: the records it
was given are the output, and the test ends each commit, as the writer thread would, with
or without an error), the receipts and dead letters, the answers, and the workers it asks
its owner to start."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from recording_journal import RecordingJournal

from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom, Pending
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.persistence import apply_journal_record
from roost_core.daemon.receipts import MessageQuotes, Receipts
from roost_core.protocol import BAD_ARGS, NOT_STORED, QUEUE_FULL, ProtocolError
from roost_core.queue import MAX_AGENT_ITEMS, MAX_UNDURABLE_SEQS
from roost_core.records import OutgoingItem, PeerInfo
from roost_core.store import JournalError

SENDER = PeerInfo(id="f-sender", name="sender", kind="foreground", state="connected", live=True)


class Room:
    """A mailroom with its journal, its receipts on ``tmp_path`` and a record of the
    workers it asked to start (``can_start`` says whether a start succeeds)."""

    def __init__(self, tmp_path) -> None:
        self.dead_file = tmp_path / "dead.jsonl"
        self.receipts = Receipts(self.dead_file, durable=False)
        self.started: list[str] = []
        self.can_start = True
        self.journal = RecordingJournal()
        self.mailroom = Mailroom(self.receipts, MessageQuotes(), self.start)
        self.mailroom.journal = self.journal

    def start(self, job: Job) -> bool:
        self.started.append(job.id)
        return self.can_start

    def receipts_of(self, sender: str = SENDER.id) -> list[tuple[Any, ...]]:
        return [(r["to"], r["seq"], r["state"], r["reason"]) for r in self.receipts.sent_by(sender)]

    def dead_letters(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.dead_file.read_text().splitlines()] if self.dead_file.exists() else []


def run(story: Callable[[], Awaitable[None]]) -> None:
    anyio.run(story)


def a_job(job_id: str = "j-receiver", **fields: Any) -> Job:
    return Job(id=job_id, name="receiver", host="scripted", cwd="/", session=f"/s/{job_id}.jsonl", token="t", task="wait", **fields)


def target_of(job: Job) -> PeerInfo:
    return PeerInfo(id=job.id, name=job.name, kind="job", state=job.state, session=job.session)


def message(target: PeerInfo, text: str = "hello", *, msg_id: str = "m00000001", reply_to: str | None = None) -> OutgoingItem:
    return OutgoingItem(sender=SENDER, target=target, text=text, kind="message", relation="peer", hops=1, id=msg_id, reply_to=reply_to)


def worker_conn() -> Connection:
    return Connection.detached(1, pid=os.getpid(), uid=os.getuid())


def send_to_job(room: Room, job: Job, item: OutgoingItem | None = None, *, wake: bool = True) -> Pending:
    target = target_of(job)
    answer = room.mailroom.to_job(job, target, item or message(target), "<framed>", "steer", {"to": job.id}, trace="t-1", wake=wake)
    assert isinstance(answer, Pending)
    return answer


def test_a_send_to_a_connected_worker_is_pushed_before_it_is_durable_and_answered_after(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        pending = send_to_job(room, job)
        # Out at once: the deliver event (before the fsync) and the journal record.
        (event,) = job.conn.take_sent()
        assert event["event"] == "deliver" and event["seq"] == 1 and event["content"] == "<framed>"
        assert event["from"] == SENDER.id and event["trace"] == "t-1" and event["id"] == "m00000001"
        assert [r["op"] for r in room.journal.records] == ["item"]
        # The record holds the item as its deliver event: the same bytes the worker got.
        assert room.journal.records[0]["deliver"] == event
        assert not pending.commit.over
        room.journal.commit_over()
        assert pending.finish() == {"to": job.id, "result": "delivered", "seq": 1}
        assert room.receipts_of() == [(job.id, 1, "delivered", None)]
        assert job.queue.durable == 1 and room.started == []

    run(story)


@pytest.mark.parametrize(
    ("state", "worker_pid", "wake", "can_start", "outcome", "asked"),
    [
        ("idle", None, True, True, "started", True),
        ("idle", None, True, False, "queued", True),
        ("idle", None, False, True, "queued", False),
        ("idle", 4242, True, True, "queued", False),
        ("stopped", None, True, True, "stopped", False),
    ],
)
def test_a_send_to_a_job_with_no_worker_is_kept_and_starts_one_only_when_it_may(tmp_path, state, worker_pid, wake, can_start, outcome, asked):
    async def story() -> None:
        room, job = Room(tmp_path), a_job(state=state, worker_pid=worker_pid)
        room.can_start = can_start
        pending = send_to_job(room, job, wake=wake)
        assert room.started == []  # never before the item is durable
        room.journal.commit_over()
        assert pending.finish()["result"] == outcome
        assert room.started == ([job.id] if asked else [])
        assert [item.seq for item in job.queue.items] == [1]
        assert room.receipts_of() == [(job.id, 1, "queued", None)]

    run(story)


def test_an_item_whose_commit_fails_is_dropped_and_its_sender_told_not_stored(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        pending = send_to_job(room, job)
        room.journal.commit_over(JournalError("disk full"))
        with pytest.raises(ProtocolError) as refused:
            pending.finish()
        assert refused.value.code == NOT_STORED
        assert job.queue.items == [] and room.started == []

    run(story)


def test_while_the_journal_fails_a_worker_gets_only_durable_items(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        room.journal.healthy = room.journal.steady = False
        pending = send_to_job(room, job)
        assert job.conn.take_sent() == []  # held back: its sender may yet hear not_stored
        room.journal.healthy = room.journal.steady = True
        room.journal.commit_over()
        assert pending.finish()["result"] == "delivered"
        assert [event["seq"] for event in job.conn.take_sent()] == [1]

    run(story)


def test_a_full_queue_refuses_with_queue_full_and_buries_a_dead_letter(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        for n in range(MAX_AGENT_ITEMS):
            send_to_job(room, job, message(target_of(job), f"m{n}", msg_id=f"m{n:08x}"))
        with pytest.raises(ProtocolError) as refused:
            send_to_job(room, job, message(target_of(job), "one too many", msg_id="mffffffff"))
        assert refused.value.code == QUEUE_FULL
        assert len(job.queue.items) == MAX_AGENT_ITEMS and len(room.journal.records) == MAX_AGENT_ITEMS
        (letter,) = room.dead_letters()
        assert (letter["to"], letter["state"], letter["reason"], letter["preview"]) == (job.id, "dead", "queue full", "one too many")

    run(story)


def test_a_reply_carries_a_quote_of_the_message_it_answers(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        send_to_job(room, job, message(target_of(job), "the question", msg_id="m0000000a"))
        send_to_job(room, job, message(target_of(job), "the answer", msg_id="m0000000b", reply_to="m0000000a"))
        first, second = job.conn.take_sent()
        assert (first["replyQuote"], second["replyQuote"], second["replyTo"]) == (None, "the question", "m0000000a")

    run(story)


def test_acks_take_items_off_the_queue_and_only_new_ones_make_a_record(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        for n in range(3):
            send_to_job(room, job, message(target_of(job), f"m{n}", msg_id=f"m{n:08x}"))
        room.journal.commit_over()
        with pytest.raises(ProtocolError) as refused:
            room.mailroom.ack_job(job, 4)
        assert refused.value.code == BAD_ARGS
        answer = room.mailroom.ack_job(job, 2)
        assert isinstance(answer, Pending)
        assert room.journal.records[-1] == {"op": "ack", "job": job.id, "seq": 2}
        room.journal.commit_over()
        assert answer.finish() == {"acked": 2}
        assert [item.seq for item in job.queue.items] == [3]
        records = len(room.journal.records)
        assert room.mailroom.ack_job(job, 1) == {"acked": 2}  # nothing new: at once, no record
        assert len(room.journal.records) == records

    run(story)


def test_a_foreground_peer_gets_a_numbered_event_it_holds_until_acked(tmp_path):
    async def story() -> None:
        room = Room(tmp_path)
        peer = ForegroundPeer(id="f-peer", name="peer", session=None, cwd=None, pid=os.getpid())
        target = PeerInfo(id=peer.id, name=peer.name, kind="foreground", state="connected")
        answer = room.mailroom.to_peer(peer, target, message(target), "<framed>", "followUp", {"to": peer.id}, trace=None)
        assert answer == {"to": peer.id, "result": "not running"}
        (letter,) = room.dead_letters()
        assert (letter["to"], letter["reason"]) == (peer.id, "receiver not running")
        peer.conn = worker_conn()
        for n in range(2):
            answer = room.mailroom.to_peer(peer, target, message(target, f"m{n}"), "<framed>", "followUp", {"to": peer.id}, trace=None)
            assert answer == {"to": peer.id, "result": "delivered", "seq": n + 1}
        events = peer.conn.take_sent()
        assert [(e["seq"], e["delivery"], e["text"]) for e in events] == [(1, "followUp", "m0"), (2, "followUp", "m1")]
        assert sorted(peer.in_flight) == [1, 2]
        assert room.mailroom.ack_peer(peer, 1) == {"acked": 1}
        assert sorted(peer.in_flight) == [2]
        assert room.receipts_of()[-2:] == [(peer.id, 1, "acknowledged", None), (peer.id, 2, "delivered", None)]
        assert room.journal.records == []  # a foreground peer has no mailbox: nothing is journaled

    run(story)


def test_the_dead_letter_files_stay_bounded_and_a_start_lists_the_newest(tmp_path, monkeypatch):
    """Before a write would take ``dead.jsonl`` past ``DEAD_FILE_BYTES`` it is set aside as
    ``dead.jsonl.1`` (the one before is dropped): the disk holds two files at most, and
    receipts made anew (a restart) list the newest ``MAX_DEAD`` letters across both,
    oldest first."""
    monkeypatch.setattr("roost_core.daemon.receipts.DEAD_FILE_BYTES", 4096)
    monkeypatch.setattr("roost_core.daemon.receipts.MAX_DEAD", 10)  # fewer than a file holds
    dead_file = tmp_path / "dead.jsonl"
    receipts = Receipts(dead_file, durable=False)
    for n in range(200):
        receipts.record(SENDER.id, "j-1", "full", "message", "dead", reason="queue full", text=f"letter {n}")
        sizes = [path.stat().st_size for path in (dead_file, tmp_path / "dead.jsonl.1") if path.exists()]
        assert all(size <= 4096 for size in sizes) and len(sizes) <= 2
    assert (tmp_path / "dead.jsonl.1").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["dead.jsonl", "dead.jsonl.1"]
    on_disk = [json.loads(line)["preview"] for path in (tmp_path / "dead.jsonl.1", dead_file) for line in path.read_text().splitlines()]
    assert 10 < len(on_disk) < 200 and on_disk == [f"letter {n}" for n in range(200 - len(on_disk), 200)]
    listed = [letter["preview"] for letter in Receipts(dead_file, durable=False).dead]
    assert listed == [f"letter {n}" for n in range(190, 200)]


def test_quotes_keep_the_newest_messages_and_their_first_words(monkeypatch):
    monkeypatch.setattr("roost_core.daemon.receipts.MAX_QUOTES", 3)
    quotes = MessageQuotes()
    for n in range(5):
        quotes.remember(f"m{n:08x}", f"message {n} " + "x" * 200)
    quotes.remember("m00000004", "remembered once: a second text for the same id is ignored")
    quotes.remember(None, "no id, nothing kept")
    assert [quotes.quote(f"m{n:08x}") for n in range(2)] == [None, None]
    assert quotes.quote("m00000004") == ("message 4 " + "x" * 200)[:80]
    assert [bool(quotes.quote(f"m{n:08x}")) for n in range(2, 5)] == [True, True, True]
    assert quotes.quote(None) is None


def test_an_items_journal_record_replays_into_the_same_item_and_old_records_still_do(tmp_path):
    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        send_to_job(room, job, message(target_of(job), "kept across a restart", msg_id="m0000000c"))
        (record,) = room.journal.records
        (queued,) = job.queue.items
        replayed = a_job()
        apply_journal_record(replayed, record)
        assert replayed.queue.items == [queued]
        # A journal written before items were stored as their deliver events.
        older = a_job()
        apply_journal_record(older, {"op": "item", "job": job.id, "item": queued.as_fields()})
        assert older.queue.items == [queued]
        with pytest.raises(ValueError):
            apply_journal_record(a_job(), {"op": "item", "job": job.id, "deliver": {**record["deliver"], "event": "other"}})

    run(story)


def test_in_a_disk_stall_pushes_stop_at_the_undurable_bound_and_sends_are_queued_not_refused(tmp_path):
    """While no commit ends (a stalled disk) a connected worker gets items before they are
    durable, and acks them, so the caps never fill: at most ``MAX_UNDURABLE_SEQS`` past
    the durable watermark are pushed (the restart gap must stay above every seq a worker
    may hold). The next sends are queued, not refused, and go out once their commit ends."""

    async def story() -> None:
        room, job = Room(tmp_path), a_job()
        job.conn = worker_conn()
        target = target_of(job)
        answers = []
        for n in range(MAX_UNDURABLE_SEQS + 5):
            answers.append(send_to_job(room, job, message(target, f"m{n}", msg_id=f"m{n:08d}")))
            for event in job.conn.take_sent():
                room.mailroom.ack_job(job, event["seq"])
        assert job.sent == MAX_UNDURABLE_SEQS and [item.seq for item in job.queue.items] == list(range(MAX_UNDURABLE_SEQS + 1, MAX_UNDURABLE_SEQS + 6))
        room.journal.commit_over()
        results = [answer.finish()["result"] for answer in answers]
        assert results == ["delivered"] * len(answers)
        assert [event["seq"] for event in job.conn.take_sent()] == list(range(MAX_UNDURABLE_SEQS + 1, MAX_UNDURABLE_SEQS + 6))

    run(story)
