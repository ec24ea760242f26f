"""The answer ledger from records alone: what a key asked again is answered, how long,
and what the journal keeps (``roost_core.daemon.ledger``)."""

from __future__ import annotations

import hashlib
import stat
from typing import Any, ClassVar

import anyio
import pytest

from roost_core.daemon.delivery import HeldPush, Pending
from roost_core.daemon.ledger import (
    KEEP_PER_CALLER,
    KEEP_SECONDS,
    SECRET_FILE,
    AnswerLedger,
    KeyedIds,
)
from roost_core.protocol import KEY_REUSED, ProtocolError
from roost_core.store import Commit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


#: A send's arguments.
TO_B = {"to": "b", "message": "hi", "key": "k"}


def ledger() -> tuple[AnswerLedger, list[dict], Clock]:
    written: list[dict] = []
    clock = Clock()

    def write(record: dict) -> None:
        written.append(record)

    return AnswerLedger(write, clock), written, clock


def test_a_key_asked_again_gets_the_first_answer_and_the_op_runs_once() -> None:
    book, written, _ = ledger()
    runs = []

    def do() -> dict:
        runs.append(1)
        return {"result": "delivered", "n": len(runs)}

    assert book.accept("alice", "send", "k1", do, args=TO_B) == {"result": "delivered", "n": 1}
    assert book.accept("alice", "send", "k1", do, args=TO_B) == {"result": "delivered", "n": 1}
    assert len(runs) == 1
    # Another caller's same key, or another key, is another request.
    assert book.accept("bob", "send", "k1", do, args=TO_B)["n"] == 2
    assert book.accept("alice", "send", "k2", do, args=TO_B)["n"] == 3
    assert [(r["who"], r["key"]) for r in written] == [("alice", "k1"), ("bob", "k1"), ("alice", "k2")]


def test_a_pending_first_ask_answers_its_repeat_once_its_commit_is_over() -> None:
    book, written, _ = ledger()
    commit = Commit()
    calls = []

    def do() -> Pending:
        return Pending(commit, lambda: calls.append(1) or {"result": "queued", "seq": 7})

    first = book.accept("j1", "send", "k", do, args=TO_B)
    again = book.accept("j1", "send", "k", lambda: pytest.fail("asked twice"), args={**TO_B, "again": True})
    assert isinstance(first, Pending) and isinstance(again, Pending) and again.commit is commit
    commit.finish()
    assert first.finish() == again.finish() == {"result": "queued", "seq": 7}
    assert calls == [1]  # made once, for both answers
    assert [r["answer"] for r in written] == [{"result": "queued", "seq": 7}]


def test_a_refusal_is_not_kept_so_asking_again_does_it_anew() -> None:
    book, written, _ = ledger()

    def refuse() -> dict:
        raise ProtocolError("rate_limited", "too many")

    with pytest.raises(ProtocolError):
        book.accept("a", "send", "k", refuse, args=TO_B)
    assert book.accept("a", "send", "k", lambda: {"result": "delivered"}, args={"to": "c", "message": "other"}) == {"result": "delivered"}
    assert len(written) == 1


def test_answers_are_kept_for_their_time_and_the_callers_share() -> None:
    book, _, clock = ledger()
    book.accept("a", "send", "old", lambda: {"n": 0}, args=TO_B)
    clock.now += KEEP_SECONDS + 1
    assert book.answer_of("a", "send", "old") is None
    for n in range(KEEP_PER_CALLER + 5):
        book.keep("a", "send", f"k{n}", {"n": n})
    assert book.answer_of("a", "send", "k0") is None and book.answer_of("a", "send", f"k{KEEP_PER_CALLER + 4}") == {"n": KEEP_PER_CALLER + 4}
    assert len(book.kept["a"]) == KEEP_PER_CALLER


def test_records_restore_into_a_new_ledger_with_their_pushes() -> None:
    book, _, clock = ledger()
    book.keep("a", "send", "k", {"result": "delivered", "seq": 3}, push=("fabc1234", b'{"event":"deliver","seq":3}\n'))
    records = book.records()
    again = AnswerLedger(lambda record: None, clock)
    for record in records:
        again.restore(record)
    assert again.answer_of("a", "send", "k") == {"result": "delivered", "seq": 3}
    assert again.unpushed() == [(("a", "send", "k"), "fabc1234", {"event": "deliver", "seq": 3})]
    again.pushed(("a", "send", "k"))
    assert again.unpushed() == [] and again.answer_of("a", "send", "k") == {"result": "delivered", "seq": 3}
    with pytest.raises(ValueError):
        again.restore({"op": "answer", "who": "a"})


def test_a_held_push_goes_out_once_its_answer_is_on_record() -> None:
    commit = Commit()
    book = AnswerLedger(lambda record: commit)
    pushed = []

    class Peer:
        id = "fabc1234"
        recorded: ClassVar[dict[int, Any]] = {}

    held = HeldPush({"result": "delivered", "seq": 4}, lambda: pushed.append(4), Peer(), 4, b'{"seq":4}\n')
    answer = book.accept("a", "send", "k", lambda: held, args=TO_B)
    assert isinstance(answer, Pending) and pushed == []
    commit.finish()
    assert answer.finish() == {"result": "delivered", "seq": 4} and pushed == [4]
    assert Peer.recorded == {4: ("a", "send", "k")}


def test_an_async_op_asked_again_while_it_runs_waits_for_its_answer() -> None:
    book, _, _ = ledger()
    started = anyio.Event()
    release = anyio.Event()
    runs = []

    async def do() -> dict:
        runs.append(1)
        started.set()
        await release.wait()
        return {"id": "j1"}

    async def main() -> list[dict]:
        answers: list[dict] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                answers.append(await book.run("a", "spawn", "k", do, args={"task": "t"}))

            tg.start_soon(ask)
            await started.wait()
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            release.set()
        return answers

    assert anyio.run(main) == [{"id": "j1"}, {"id": "j1"}] and runs == [1]


def test_a_keyed_message_id_is_the_same_for_the_same_caller_and_key_and_secret(tmp_path) -> None:
    ids = KeyedIds(tmp_path / SECRET_FILE)
    assert ids.message_id("a", "k") == ids.message_id("a", "k") != ids.message_id("b", "k")
    assert ids.message_id("a", "k").startswith("m") and len(ids.message_id("a", "k")) == 9


def test_a_keyed_message_id_needs_the_daemons_secret_and_outlives_a_restart(tmp_path) -> None:
    """A peer cannot make a keyed id from caller and key alone (it once was
    ``sha256(caller\\0key)``): it is keyed with the daemon's secret, a file of its own
    (0600) that the next daemon reads, so a key asked again after a restart has its id."""
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other.mkdir()
    first = KeyedIds(home / SECRET_FILE)
    first.load()
    made = first.message_id("j1234567", "report:3")
    assert made != "m" + hashlib.sha256(b"j1234567\0report:3").hexdigest()[:8]
    assert stat.S_IMODE((home / SECRET_FILE).stat().st_mode) == 0o600
    assert len((home / SECRET_FILE).read_bytes()) == 32
    restarted = KeyedIds(home / SECRET_FILE)
    restarted.load()
    assert restarted.message_id("j1234567", "report:3") == made
    assert KeyedIds(other / SECRET_FILE).message_id("j1234567", "report:3") != made  # another daemon's secret


def test_a_damaged_secret_is_made_anew(tmp_path) -> None:
    (tmp_path / SECRET_FILE).write_bytes(b"short")
    ids = KeyedIds(tmp_path / SECRET_FILE)
    ids.load()
    assert len((tmp_path / SECRET_FILE).read_bytes()) == 32


def test_a_key_asked_again_with_another_request_is_refused_key_reused() -> None:
    """A key names one request: asked again with another receiver or body it is refused
    (naming the first request's receiver), not answered with the first answer."""
    book, written, _ = ledger()
    book.accept("a", "send", "k", lambda: {"result": "delivered"}, args=TO_B)
    for other in ({**TO_B, "to": "c"}, {**TO_B, "message": "bye"}):
        with pytest.raises(ProtocolError) as refused:
            book.accept("a", "send", "k", lambda: pytest.fail("done again"), args=other)
        assert refused.value.code == KEY_REUSED and "send to b" in str(refused.value)
    # The same request asked again (``again``, a null field) is the first answer.
    assert book.accept("a", "send", "k", lambda: pytest.fail("done again"), args={**TO_B, "again": True, "urgent": None}) == {"result": "delivered"}
    # What the first request asked outlives a restart (its record).
    again = AnswerLedger(lambda record: None, Clock())
    for record in written:
        again.restore(record)
    with pytest.raises(ProtocolError) as refused:
        again.accept("a", "send", "k", lambda: pytest.fail("done again"), args={**TO_B, "to": "c"})
    assert refused.value.code == KEY_REUSED
    # A record of a daemon that kept no digest answers any ask of its key.
    old = AnswerLedger(lambda record: None, Clock())
    old.restore({**written[0], "asked": None})
    assert old.accept("a", "send", "k", lambda: pytest.fail("done again"), args={**TO_B, "to": "c"}) == {"result": "delivered"}


def test_a_key_reused_while_its_first_ask_waits_is_refused() -> None:
    book, _, _ = ledger()
    commit = Commit()
    book.accept("a", "send", "k", lambda: Pending(commit, lambda: {"result": "queued"}), args=TO_B)
    with pytest.raises(ProtocolError) as refused:
        book.accept("a", "send", "k", lambda: pytest.fail("done again"), args={**TO_B, "to": "c"})
    assert refused.value.code == KEY_REUSED
