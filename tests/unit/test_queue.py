"""A job's one ordered queue: the seq counter, the caps, the cumulative ack."""

from __future__ import annotations

import json

import msgspec
import pytest

from roost_core.protocol import QUEUE_FULL, ProtocolError, encode
from roost_core.queue import MAX_AGENT_ITEMS, MAX_USER_REPLIES, Item, JobQueue


def test_caps_are_the_specs():
    assert MAX_USER_REPLIES == 50
    assert MAX_AGENT_ITEMS == 20


def test_every_kind_takes_its_seq_from_one_counter():
    queue = JobQueue()
    seqs = [queue.enqueue(kind, f"c{n}").seq for n, kind in enumerate(["reply", "message", "report", "reply"])]
    assert seqs == [1, 2, 3, 4]
    assert queue.reply_seq == 4
    assert queue.next_seq() == 5
    assert [item.kind for item in queue.items] == ["reply", "message", "report", "reply"]


def test_the_counter_continues_from_a_restored_value():
    queue = JobQueue(reply_seq=1000, acked=990)
    assert queue.enqueue("reply", "x").seq == 1001


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        JobQueue().enqueue("bogus", "x")


def test_user_replies_are_capped_at_50():
    queue = JobQueue()
    for n in range(MAX_USER_REPLIES):
        queue.enqueue("reply", f"r{n}")
    with pytest.raises(ProtocolError) as info:
        queue.enqueue("reply", "one too many")
    assert info.value.code == QUEUE_FULL
    assert len(queue.items) == MAX_USER_REPLIES
    assert queue.reply_seq == MAX_USER_REPLIES  # a refused item takes no seq
    # Agents are not crowded out by the user.
    assert queue.enqueue("message", "m").seq == MAX_USER_REPLIES + 1


def test_agent_items_are_capped_at_20_across_messages_and_reports():
    queue = JobQueue()
    for n in range(MAX_AGENT_ITEMS):
        queue.enqueue("message" if n % 2 else "report", f"a{n}")
    for kind in ("message", "report"):
        with pytest.raises(ProtocolError) as info:
            queue.enqueue(kind, "too many")
        assert info.value.code == QUEUE_FULL
    # The user is not crowded out by agents.
    assert queue.enqueue("reply", "mine").kind == "reply"


def test_an_ack_makes_room_again():
    queue = JobQueue()
    for n in range(MAX_AGENT_ITEMS):
        queue.enqueue("message", f"a{n}")
    queue.ack(1)
    assert queue.enqueue("message", "fits now").seq == MAX_AGENT_ITEMS + 1


def test_ack_is_cumulative_and_returns_what_it_removed():
    queue = JobQueue()
    for n in range(5):
        queue.enqueue("reply" if n % 2 else "message", f"c{n}")
    done = queue.ack(3)
    assert [item.seq for item in done] == [1, 2, 3]
    assert [item.seq for item in queue.items] == [4, 5]
    assert queue.acked == 3
    # An older or repeated ack changes nothing.
    assert queue.ack(2) == []
    assert queue.ack(3) == []
    assert queue.acked == 3
    assert [item.seq for item in queue.pending()] == [4, 5]


def test_ack_past_the_counter_is_clamped_so_later_items_are_not_swallowed():
    queue = JobQueue()
    queue.enqueue("reply", "a")
    queue.ack(100)
    assert queue.acked == 1
    item = queue.enqueue("reply", "b")
    assert item.seq == 2
    assert queue.items == [item]


def test_pending_after_a_watermark():
    queue = JobQueue()
    for n in range(4):
        queue.enqueue("reply", str(n))
    assert [item.seq for item in queue.pending(after=2)] == [3, 4]
    assert queue.pending(after=4) == []


def test_reapable_only_when_nothing_waits():
    queue = JobQueue()
    assert queue.reapable()
    queue.enqueue("message", "m")
    assert not queue.reapable()
    queue.ack(1)
    assert queue.reapable()


def test_add_is_idempotent_keeps_seq_order_and_ignores_acked_items():
    queue = JobQueue()
    for seq in (5, 3, 4, 3, 5):
        queue.add(Item(seq=seq, kind="reply", content=f"c{seq}"))
    assert [item.seq for item in queue.items] == [3, 4, 5]
    assert queue.reply_seq == 5
    queue.ack(4)
    queue.add(Item(seq=2, kind="reply", content="old"))
    queue.add(Item(seq=4, kind="reply", content="old"))
    assert [item.seq for item in queue.items] == [5]
    assert queue.next_seq() == 6


def test_clear_drops_everything_and_moves_the_watermark():
    queue = JobQueue()
    for n in range(3):
        queue.enqueue("reply", str(n))
    dropped = queue.clear()
    assert [item.seq for item in dropped] == [1, 2, 3]
    assert queue.items == []
    assert queue.acked == 3
    assert queue.clear() == []


def test_item_json_round_trip_ignores_unknown_fields():
    item = Item(seq=3, kind="message", content="framed", text="hi", sender="a1b2c3d4", sender_name="x", relation="child", trace="t", hops=2)
    data = item.as_fields()
    assert Item.from_json({**data, "future_field": 1}) == item
    assert item.is_agent_item
    assert not Item(seq=1, kind="reply", content="x").is_agent_item


def test_an_item_round_trips_through_its_deliver_event_with_every_field():
    item = Item(
        seq=7, kind="message", content="framed", text="hi", sender="a1b2c3d4", sender_name="lead", relation="parent",
        created=1700000000.5, trace="t-1", hops=3, msg_id="m0000000a", reply_to="m00000009", scope="children",
        broadcast_chain=True, delivery="followUp", reply_quote="the question",
    )
    event = item.to_event()
    # The line pushed and stored is that event, key for key and in the same order.
    assert item.encoded() == encode(event)
    assert item.encoded() == item.encoded().splitlines()[0] + b"\n"
    assert (event["event"], event["from"], event["fromName"], event["id"], event["replyTo"], event["broadcastChain"], event["replyQuote"]) == (
        "deliver", "a1b2c3d4", "lead", "m0000000a", "m00000009", True, "the question")
    assert Item.from_event(json.loads(json.dumps(event))) == item
    # Checked as a journal record is: anything else is not an item roost wrote.
    for bad in ({**event, "event": "shutdown"}, {**event, "seq": "7"}, {**event, "from": 5}, [event]):
        with pytest.raises(ValueError):
            Item.from_event(bad)


def test_a_client_reads_a_deliver_event_back_into_the_item_it_carries():
    item = Item(
        seq=9, kind="message", content="framed", text="hi", sender="a1b2c3d4", sender_name="lead", relation="parent",
        trace="t-1", hops=3, msg_id="m0000000a", reply_to="m00000009", scope="children",
        broadcast_chain=True, delivery="followUp", reply_quote="the question",
    )
    received = Item.received(json.loads(item.encoded()))
    # Every field but the time it was made (a client's item is made when it arrives).
    assert msgspec.structs.replace(received, created=item.created) == item
    # Leniently: what an event lacks takes its default, the kind the reader's.
    bare = Item.received({"seq": "4"})
    assert bare == Item(seq=4, kind="reply", content="", created=bare.created)
    sparse = Item.received({"seq": 5, "delivery": "later", "hops": None}, kind="message")
    assert (sparse.kind, sparse.delivery, sparse.hops, sparse.msg_id) == ("message", "steer", 0, None)
