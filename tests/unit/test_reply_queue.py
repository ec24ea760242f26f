"""The worker's ReplyQueue: drops what the transcript holds, gates, and a cumulative watermark."""

from __future__ import annotations

import anyio

from roost_core.queue import Item
from roost_core.worker.reply_queue import ReplyQueue


def reply(seq: int) -> Item:
    return Item(seq=seq, kind="reply", content=f"reply {seq}", text=f"reply {seq}")


def message(seq: int) -> Item:
    return Item(seq=seq, kind="message", content=f"message {seq}", sender="a1b2c3d4")


def seqs(items):
    return [item.seq for item in items]


def test_nothing_is_taken_while_awaiting_start():
    queue = ReplyQueue()
    queue.push(reply(1))
    assert queue.awaiting_start and queue.gated
    assert not queue.runnable()
    assert queue.take_all() == []
    assert seqs(queue.items) == [1]


def test_start_drops_seqs_already_in_the_transcript_and_acks_them():
    queue = ReplyQueue()
    for item in (reply(1), message(2), reply(3)):
        queue.push(item)
    queue.start({1, 2})
    assert seqs(queue.items) == [3]
    assert queue.watermark == 2
    assert queue.runnable()
    assert seqs(queue.take_all()) == [3]
    assert queue.items == []


def test_a_resend_of_what_the_transcript_holds_is_dropped_and_acked():
    queue = ReplyQueue()
    queue.start({5})
    queue.push(reply(5))
    assert queue.items == []
    assert queue.watermark == 5


def test_duplicates_and_seqs_under_the_watermark_are_ignored():
    queue = ReplyQueue()
    queue.start(set())
    queue.push(reply(1))
    queue.push(reply(1))
    assert seqs(queue.items) == [1]
    assert queue.mark_done(seqs(queue.take_all())[0]) == 1
    queue.push(reply(1))  # resent after a reconnect: already done
    assert queue.items == []


def test_items_are_kept_in_seq_order():
    queue = ReplyQueue()
    for seq in (3, 1, 2):
        queue.push(reply(seq))
    queue.start(set())
    assert seqs(queue.take_all()) == [1, 2, 3]


def test_compaction_gates_everything():
    queue = ReplyQueue()
    queue.start(set())
    queue.push(reply(1))
    queue.compacting = True
    assert queue.gated and not queue.runnable()
    assert queue.take_all() == []
    queue.compacting = False
    assert seqs(queue.take_all()) == [1]


def test_an_open_dialog_holds_agent_items_and_take_reply_answers_it():
    queue = ReplyQueue()
    queue.start(set())
    queue.push(message(1))
    queue.push(reply(2))
    queue.push(message(3))
    queue.push(reply(4))
    queue.dialog_open = True
    assert not queue.runnable()
    assert queue.take_all() == []
    answer = queue.take_reply()
    assert answer is not None and answer.seq == 2
    assert seqs(queue.items) == [1, 3, 4]
    assert queue.take_reply().seq == 4
    assert queue.take_reply() is None
    assert not any(item.kind == "reply" for item in queue.items)
    assert seqs(queue.items) == [1, 3]
    queue.dialog_open = False
    assert queue.runnable()
    assert seqs(queue.take_all()) == [1, 3]


def test_the_watermark_is_cumulative_when_items_finish_out_of_order():
    queue = ReplyQueue()
    queue.start(set())
    for seq in (1, 2, 3, 4):
        queue.push(reply(seq))
    queue.take_all()
    assert queue.mark_done(3) == 0
    assert queue.mark_done(4) == 0
    assert queue.mark_done(1) == 1
    assert queue.mark_done(2) == 4


def test_the_watermark_covers_gaps_in_what_was_received():
    # Seqs need not be contiguous (another kind acked elsewhere, a restart gap): the
    # watermark is over what this worker received.
    queue = ReplyQueue()
    queue.start(set())
    queue.push(reply(1001))
    queue.push(message(1005))
    queue.take_all()
    assert queue.mark_done(1005) == 0
    assert queue.mark_done(1001) == 1005


def test_a_watermark_never_goes_back():
    queue = ReplyQueue()
    queue.start(set())
    queue.push(reply(5))
    queue.take_all()
    assert queue.mark_done(5) == 5
    queue.push(reply(6))
    queue.push(reply(7))
    queue.take_all()
    assert queue.mark_done(7) == 5
    assert queue.mark_done(6) == 7


def test_changed_wakes_a_waiter_on_push_and_wake():
    queue = ReplyQueue()
    woke = []

    async def waiter():
        await queue.changed()
        woke.append(True)

    async def main():
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                # Each step runs until every task waits (no guessed time).
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                assert woke == []
                queue.push(reply(1))
                await anyio.wait_all_tasks_blocked()
                assert woke == [True]
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                queue.wake()
                await anyio.wait_all_tasks_blocked()
                assert woke == [True, True]

    anyio.run(main)


def test_items_a_dead_agent_never_wrote_wait_for_the_next_run_and_go_first():
    queue = ReplyQueue()
    queue.start(set())
    for item in (reply(1), message(2), message(3)):
        queue.push(item)
    taken = queue.take_all()
    queue.mark_done(2)  # the agent wrote 2 before it died
    assert seqs(queue.keep(taken)) == [1, 3]
    assert not queue.runnable()  # kept items start no run by themselves
    queue.push(reply(1))  # a resend after a reconnect: held already
    queue.push(message(3))
    assert seqs(queue.kept) == [1, 3] and queue.items == []
    assert queue.highest_seq() == 3 and queue.watermark == 0
    queue.push(reply(4))
    assert queue.runnable()
    assert seqs(queue.take_all()) == [1, 3, 4]
    assert queue.kept == []
    for seq in (1, 3, 4):
        queue.mark_done(seq)
    assert queue.watermark == 4


def copy_of(seq: int, msg_id: str) -> Item:
    return Item(seq=seq, kind="message", content=f"message {seq}", sender="a1b2c3d4", msg_id=msg_id)


def test_a_second_copy_pushed_before_start_is_acked_with_the_first_the_transcript_holds():
    """A worker killed after writing an item, before acking it: the daemon pushes that item
    and a second copy of it (the same message id, numbered anew) to the next worker before
    its session is open. Both are dropped, and the watermark moves past both: the job is
    left with nothing pending (the copy stayed unacked, its job ``queued``, for good)."""
    queue = ReplyQueue()
    queue.push(copy_of(2, "m0000abcd"))
    queue.push(copy_of(3, "m0000abcd"))
    queue.push(reply(4))
    queue.start({1, 2}, {"m0000abcd"})
    assert seqs(queue.items) == [4]
    assert queue.watermark == 3


def test_a_second_copy_of_an_item_whose_id_the_transcript_holds_is_acked_at_start():
    """The same, when the transcript shows the first copy only by its message id."""
    queue = ReplyQueue()
    queue.push(copy_of(5, "m0000abcd"))
    queue.push(copy_of(6, "m0000abcd"))
    queue.start({1, 2, 3, 4}, {"m0000abcd"})
    assert queue.items == []
    assert queue.watermark == 6


def test_a_copy_of_a_resend_the_transcript_holds_by_seq_is_acked():
    """A resend of a seq the transcript holds (its id not read there), then a second copy
    of it by id: both dropped, the watermark past both."""
    queue = ReplyQueue()
    queue.start({1, 2})
    queue.push(copy_of(2, "m0000abcd"))
    queue.push(copy_of(3, "m0000abcd"))
    assert queue.items == []
    assert queue.watermark == 3
