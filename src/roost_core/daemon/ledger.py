"""The first answer to each keyed request: what makes a request safe to ask again.

A client whose connection dies between a request and its answer cannot know whether the
request took effect: resending may do it twice, not resending may lose it. So every
request that changes something (``send``, ``reply``, ``spawn``, ``start``, ``tool_call``)
may carry a ``key`` the client chose (a random string, new per request). After
reconnecting, the client asks again with the same key, and the ledger answers with what
the first request with that key was answered (or will be, if it still waits for its
commit) instead of doing it again.

Answers are kept per caller (the session a connection speaks as; ``user`` for the CLI),
the newest :data:`KEEP_PER_CALLER` of each for :data:`KEEP_SECONDS`, and written to the
journal as ``answer`` records, so a question asked again after a daemon restart still
gets the first answer. A refused request is not kept: it changed nothing, so asking again
does it anew. No I/O here: the daemon hands in a ``write`` for the records.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from roost_core import faults
from roost_core.daemon.delivery import HeldPush, Pending
from roost_core.store import Commit

#: Answers kept per caller: a client asks again only for the few requests it had in
#: flight when its connection died.
KEEP_PER_CALLER = 256
#: How long an answer is kept: a client asks again once it has reconnected, seconds after
#: a daemon restart, or minutes at worst (a worker gives up on a daemon after 5 minutes).
KEEP_SECONDS = 3600.0
#: The longest key a client may choose.
KEY_CHARS = 100


def message_id_for(caller: str, key: str) -> str:
    """The message id of a send keyed ``key`` by ``caller``: ``m`` + 8 hex, the same for
    every ask of that send, so that a receiver that already holds the message (a daemon
    that died before it made the message durable, but after it pushed it) can tell the
    second copy by its id and drop it."""
    return "m" + hashlib.sha256(f"{caller}\0{key}".encode()).hexdigest()[:8]


class Once:
    """``fn()`` called once; every call after answers the same result or raises the same
    error (a repeated request gets the first request's outcome, never a second run)."""

    __slots__ = ("called", "error", "fn", "result")

    def __init__(self, fn: Callable[[], dict[str, Any]]) -> None:
        self.fn = fn
        self.called = False
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def __call__(self) -> dict[str, Any]:
        if not self.called:
            self.called = True
            try:
                self.result = self.fn()
            except BaseException as exc:  # noqa: BLE001 - kept, then raised to every caller
                self.error = exc
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class AnswerLedger:
    """The first answers of keyed requests (see the module docstring). ``write(record)``
    hands an ``answer`` record to the journal (the commit that will make it durable, or
    None); ``clock`` is wall-clock time, so that an
    answer's age counts across daemon restarts."""

    def __init__(self, write: Callable[[dict[str, Any]], Commit | None], clock: Callable[[], float] = time.time) -> None:
        self.write = write
        self.clock = clock
        #: caller -> {(op, key): (when, answer, push or None)}, oldest first.
        self.kept: dict[str, collections.OrderedDict[tuple[str, str], tuple[float, dict[str, Any], tuple[str, Any] | None]]] = {}
        #: (caller, op, key) -> the first request's outcome while it is not over yet.
        self.waiting: dict[tuple[str, str, str], Once | asyncio.Future[dict[str, Any]]] = {}
        #: The commit each pending first ask (a :class:`Once` in ``waiting``) waits for.
        self.commits: dict[tuple[str, str, str], Commit] = {}

    def answer_of(self, caller: str, op: str, key: str) -> dict[str, Any] | None:
        """The kept answer of the request ``key`` of ``caller``, if any."""
        kept = self.kept.get(caller)
        found = kept.get((op, key)) if kept is not None else None
        if found is None or self.clock() - found[0] > KEEP_SECONDS:
            return None
        return found[1]

    def accept(self, caller: str, op: str, key: str, do: Callable[[], dict[str, Any] | Pending | HeldPush]) -> dict[str, Any] | Pending:
        """An op done with no wait (``do``; it may return a :class:`Pending` answer), unless
        ``key`` was asked before: then the first answer, or the first request's pending one."""
        answer = self.answer_of(caller, op, key)
        if answer is not None:
            return answer
        slot = (caller, op, key)
        first = self.waiting.get(slot)
        if isinstance(first, Once):
            # The first ask still waits for its commit (its connection may be gone): this
            # one is answered with it, in the same commit's callbacks.
            return Pending(self.commits[slot], first)
        result = do()
        if isinstance(result, HeldPush):
            # Done with nothing stored (a push to a foreground peer): pushed and answered
            # once its record is durable, so a repeat after a crash finds the first
            # answer, and never a message the receiver got without one.
            commit = self.keep(caller, op, key, result.answer, push=(result.peer.id, result.event))
            result.peer.recorded[result.seq] = (caller, op, key)
            if commit is None:
                result.push()
                return result.answer
            return Pending(commit, functools.partial(_push_then_answer, result))
        if not isinstance(result, Pending):
            self.keep(caller, op, key, result)
            return result
        once = Once(result.finish)
        self.waiting[slot] = once
        self.commits[slot] = result.commit
        # Added before the answer's own callback (the caller adds that after this returns),
        # so the outcome is kept before any answer with it leaves.
        result.commit.when_done(lambda _commit: self._settled(slot, once))
        return Pending(result.commit, once)

    def _settled(self, slot: tuple[str, str, str], once: Once) -> None:
        self.waiting.pop(slot, None)
        self.commits.pop(slot, None)
        try:
            answer = once()
        except BaseException:  # noqa: BLE001 - a refusal is not kept; its ask answers it
            return
        self.keep(*slot, answer)

    async def run(self, caller: str, op: str, key: str, do: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """An op that awaits its result (``do``), unless ``key`` was asked before: then the
        first answer, waiting for it if the first ask is not over."""
        answer = self.answer_of(caller, op, key)
        if answer is not None:
            return answer
        slot = (caller, op, key)
        first = self.waiting.get(slot)
        if isinstance(first, asyncio.Future):
            return await asyncio.shield(first)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[slot] = future
        try:
            answer = await do()
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting for it
            raise
        finally:
            self.waiting.pop(slot, None)
        commit = self.keep(caller, op, key, answer)
        future.set_result(answer)
        if commit is not None:
            # Answered once its record is durable, so a repeat after a crash finds it.
            await commit.wait()
        return answer

    def keep(
        self,
        caller: str,
        op: str,
        key: str,
        answer: dict[str, Any],
        *,
        when: float | None = None,
        write: bool = True,
        push: tuple[str, Any] | None = None,
    ) -> Commit | None:
        """Keep ``answer`` as the first answer of ``key``, and write its record: the commit
        that makes it durable (None when nothing was written). ``push``: the foreground
        peer and the ``deliver`` event (bytes, or as a dict) the answer says was
        delivered, kept on record until the peer acks it (:meth:`pushed`)."""
        when = self.clock() if when is None else when
        kept = self.kept.setdefault(caller, collections.OrderedDict())
        if push is not None and isinstance(push[1], bytes):
            push = (push[0], json.loads(push[1]))
        kept[(op, key)] = (when, answer, push)
        # Oldest first: what is past its time, or past the caller's share, goes.
        while len(kept) > KEEP_PER_CALLER or next(iter(kept.values()))[0] < when - KEEP_SECONDS:
            kept.popitem(last=False)
        if write:
            return self.write(answer_record(caller, op, key, when, answer, push))
        return None

    def pushed(self, slot: tuple[str, str, str]) -> None:
        """The foreground peer acked the item ``slot``'s answer says was delivered: its
        record keeps the answer only (a record written anew, which replay takes last)."""
        caller, op, key = slot
        kept = self.kept.get(caller)
        found = kept.get((op, key)) if kept is not None else None
        if found is not None and found[2] is not None:
            kept[(op, key)] = (found[0], found[1], None)  # type: ignore[index]
            self.write(answer_record(caller, op, key, found[0], found[1], None))

    def unpushed(self) -> list[tuple[tuple[str, str, str], str, dict[str, Any]]]:
        """The answers on record whose push no peer has acked: (slot, peer id, deliver
        event), for a daemon that starts to push again when each peer registers."""
        return [
            ((caller, op, key), push[0], push[1])
            for caller, kept in self.kept.items()
            for (op, key), (_when, _answer, push) in kept.items()
            if push is not None
        ]

    def restore(self, record: dict[str, Any]) -> None:
        """Keep an ``answer`` record read back from the journal (``ValueError`` for one
        roost did not write)."""
        caller, op, key, when, answer, push = (record.get(name) for name in ("who", "req", "key", "at", "answer", "push"))
        if not (isinstance(caller, str) and isinstance(op, str) and isinstance(key, str)):
            raise ValueError("an answer record names its caller, op and key")
        if not isinstance(when, (int, float)) or isinstance(when, bool) or not isinstance(answer, dict):
            raise ValueError("an answer record holds its time and answer")
        if push is not None and not (isinstance(push, dict) and isinstance(push.get("peer"), str) and isinstance(push.get("event"), dict)):
            raise ValueError("an answer record's push names its peer and event")
        if self.clock() - when <= KEEP_SECONDS:
            pending = (push["peer"], push["event"]) if push is not None else None
            self.keep(caller, op, key, answer, when=float(when), write=False, push=pending)

    def records(self) -> list[dict[str, Any]]:
        """The ``answer`` records of every answer still kept (the journal's snapshot)."""
        now = self.clock()
        return [
            answer_record(caller, op, key, when, answer, push)
            for caller, kept in self.kept.items()
            for (op, key), (when, answer, push) in kept.items()
            if now - when <= KEEP_SECONDS
        ]


def _push_then_answer(held: HeldPush) -> dict[str, Any]:
    """A held push, once its answer is on record: pushed, then answered."""
    faults.point("daemon.after_persist_before_answer")
    held.push()
    return held.answer


def answer_record(caller: str, op: str, key: str, when: float, answer: dict[str, Any], push: tuple[str, Any] | None = None) -> dict[str, Any]:
    """The journal record of a kept answer (with the push it says happened, until acked)."""
    record = {"op": "answer", "who": caller, "req": op, "key": key, "at": when, "answer": answer}
    if push is not None:
        record["push"] = {"peer": push[0], "event": push[1]}
    return record
