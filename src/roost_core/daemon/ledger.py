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
does it anew. A key is for one request: asked again with other arguments (another
receiver, another body) it is refused ``key_reused``, so a second request is never
answered with the first one's outcome and silently dropped. The ledger keeps a digest of
each first request's arguments with its answer (and in its record) to tell.

A keyed send's message id (:class:`KeyedIds`) is an HMAC of caller and key under a secret
the daemon made once and keeps in its state folder: the same on every ask, across daemon
restarts, and unguessable to a peer (who could otherwise name, in a message of its own,
the id of a message or report not sent yet). No I/O here but that secret's file: the
daemon hands in a ``write`` for the records.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from roost_core import faults
from roost_core.daemon.delivery import HeldPush, Pending
from roost_core.protocol import KEY_REUSED, ProtocolError
from roost_core.store import Commit, atomic_write

log = logging.getLogger("roost.daemon")

#: Answers kept per caller: a client asks again only for the few requests it had in
#: flight when its connection died.
KEEP_PER_CALLER = 256
#: How long an answer is kept: a client asks again once it has reconnected, seconds after
#: a daemon restart, or minutes at worst (a worker gives up on a daemon after 5 minutes).
KEEP_SECONDS = 3600.0
#: The longest key a client may choose.
KEY_CHARS = 100
#: The file of the secret keyed message ids are made with, in the daemon's state folder.
SECRET_FILE = "message-id.secret"
#: The secret's length in bytes.
SECRET_BYTES = 32
#: The request fields that are no part of what a request asks (the key itself, and the
#: mark of a request asked again).
NOT_ASKED = frozenset({"key", "again"})


class KeyedIds:
    """The message ids of keyed requests (a ``send``, a ``reply``, a child's report):
    ``m`` + 8 hex of an HMAC-SHA256 of caller and key under the daemon's secret, the same
    for every ask of that request, so that a receiver that already holds the message (a
    daemon that died before it made the message durable, but after it pushed it) can tell
    the second copy by its id and drop it.

    The secret is made once (random, mode 0600, at ``path``) and read by every daemon
    after, so a key asked again after a restart gets the same id. With no ``path``, or
    when its file cannot be written (a full disk), the secret lives in memory only, with a
    log line: ids stay unguessable, but a key asked again across the next restart gets
    another id (a receiver then cannot drop that one copy by its id)."""

    def __init__(self, path: Path | None = None, *, durable: bool = True) -> None:
        self.path = path
        self.durable = durable
        self._secret: bytes | None = None

    def load(self) -> None:
        """Read the secret, or make it if there is none (or only a damaged one)."""
        if self.path is not None:
            try:
                kept = self.path.read_bytes()
            except FileNotFoundError:
                kept = b""
            except OSError as exc:
                log.warning("the message-id secret %s cannot be read (%s): keyed ids of this daemon are not kept across a restart", self.path, exc)
                self._secret = secrets.token_bytes(SECRET_BYTES)
                return
            if len(kept) == SECRET_BYTES:
                self._secret = kept
                return
            if kept:
                log.warning("the message-id secret %s is damaged (%d bytes): a new one is made", self.path, len(kept))
        self._secret = secrets.token_bytes(SECRET_BYTES)
        if self.path is None:
            return
        try:
            atomic_write(self.path, self._secret, durable=self.durable, kind="secret")
        except OSError as exc:
            log.warning("the message-id secret %s cannot be written (%s): keyed ids of this daemon are not kept across a restart", self.path, exc)

    def message_id(self, caller: str, key: str) -> str:
        """The message id of the request keyed ``key`` by ``caller``."""
        if self._secret is None:
            self.load()
        assert self._secret is not None
        return "m" + hmac.new(self._secret, f"{caller}\0{key}".encode(), hashlib.sha256).hexdigest()[:8]


def request_digest(args: dict[str, Any]) -> str:
    """What a keyed request asks, as a digest of its arguments (its key and ``again``
    aside; a null field counts as absent, as the op's check reads it): a key asked again
    with another digest is another request."""
    asked = {name: value for name, value in args.items() if name not in NOT_ASKED and value is not None}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()[:32]


def request_target(op: str, args: dict[str, Any]) -> str:
    """Whom or what a keyed request is for, as a refusal names it: the receiver of a
    ``send`` (or of a ``roost_send`` tool call), the job of a ``reply``, else the op."""
    inner = args.get("args")
    for value in (args.get("to"), args.get("job"), inner.get("to") if isinstance(inner, dict) else None):
        if isinstance(value, str):
            return f"{op} to {value[:80]}"
    name = args.get("name")
    return f"{op} {name[:80]}" if op == "tool_call" and isinstance(name, str) else op


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


@attrs.frozen
class Asked:
    """What a keyed request asked: its arguments' digest, and whom it was for (named in
    the refusal of the key asked again with other arguments)."""

    digest: str
    target: str

    @classmethod
    def of(cls, op: str, args: dict[str, Any]) -> Asked:
        return cls(request_digest(args), request_target(op, args))


@attrs.frozen
class Kept:
    """A kept first answer: when it was given, the answer, the push it says happened
    (peer id, ``deliver`` event) until the peer acks it, and what the request asked (None
    in a record of a daemon that did not keep it: any ask of that key gets the answer)."""

    when: float
    answer: dict[str, Any]
    push: tuple[str, Any] | None
    asked: Asked | None


class AnswerLedger:
    """The first answers of keyed requests (see the module docstring). ``write(record)``
    hands an ``answer`` record to the journal (the commit that will make it durable, or
    None); ``clock`` is wall-clock time, so that an
    answer's age counts across daemon restarts; ``ids`` makes keyed message ids."""

    def __init__(self, write: Callable[[dict[str, Any]], Commit | None], clock: Callable[[], float] = time.time, ids: KeyedIds | None = None) -> None:
        self.write = write
        self.clock = clock
        self.ids = ids if ids is not None else KeyedIds()
        #: caller -> {(op, key): kept answer}, oldest first.
        self.kept: dict[str, collections.OrderedDict[tuple[str, str], Kept]] = {}
        #: (caller, op, key) -> the first request's outcome while it is not over yet.
        self.waiting: dict[tuple[str, str, str], Once | asyncio.Future[dict[str, Any]]] = {}
        #: What each first ask in ``waiting`` asked.
        self.asked: dict[tuple[str, str, str], Asked] = {}
        #: The commit each pending first ask (a :class:`Once` in ``waiting``) waits for.
        self.commits: dict[tuple[str, str, str], Commit] = {}

    def _kept(self, caller: str, op: str, key: str) -> Kept | None:
        kept = self.kept.get(caller)
        found = kept.get((op, key)) if kept is not None else None
        if found is None or self.clock() - found.when > KEEP_SECONDS:
            return None
        return found

    def answer_of(self, caller: str, op: str, key: str) -> dict[str, Any] | None:
        """The kept answer of the request ``key`` of ``caller``, if any."""
        found = self._kept(caller, op, key)
        return None if found is None else found.answer

    def _first_answer(self, slot: tuple[str, str, str], asked: Asked) -> dict[str, Any] | None:
        """The kept answer of ``slot``'s first ask, if any; ``key_reused`` when the first
        ask (answered or still waiting) asked something else."""
        found = self._kept(*slot)
        first = found.asked if found is not None else self.asked.get(slot)
        if first is not None and first.digest != asked.digest:
            raise ProtocolError(
                KEY_REUSED,
                f"key {slot[2][:40]!r} was used already for another request ({first.target}): "
                "a key names one request, asked again only as it was; make a new key for a new request",
            )
        return None if found is None else found.answer

    def accept(
        self, caller: str, op: str, key: str, do: Callable[[], dict[str, Any] | Pending | HeldPush], *, args: dict[str, Any]
    ) -> dict[str, Any] | Pending:
        """An op done with no wait (``do``, asked with ``args``; it may return a
        :class:`Pending` answer), unless ``key`` was asked before: then the first answer,
        or the first request's pending one (``key_reused`` if it asked something else)."""
        slot = (caller, op, key)
        asked = Asked.of(op, args)
        answer = self._first_answer(slot, asked)
        if answer is not None:
            return answer
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
            commit = self.keep(caller, op, key, result.answer, push=(result.peer.id, result.event), asked=asked)
            result.peer.recorded[result.seq] = slot
            if commit is None:
                result.push()
                return result.answer
            return Pending(commit, functools.partial(_push_then_answer, result))
        if not isinstance(result, Pending):
            self.keep(caller, op, key, result, asked=asked)
            return result
        once = Once(result.finish)
        self.waiting[slot] = once
        self.asked[slot] = asked
        self.commits[slot] = result.commit
        # Added before the answer's own callback (the caller adds that after this returns),
        # so the outcome is kept before any answer with it leaves.
        result.commit.when_done(lambda _commit: self._settled(slot, once))
        return Pending(result.commit, once)

    def _settled(self, slot: tuple[str, str, str], once: Once) -> None:
        self.waiting.pop(slot, None)
        self.commits.pop(slot, None)
        asked = self.asked.pop(slot, None)
        try:
            answer = once()
        except BaseException:  # noqa: BLE001 - a refusal is not kept; its ask answers it
            return
        self.keep(*slot, answer, asked=asked)

    async def run(self, caller: str, op: str, key: str, do: Callable[[], Awaitable[dict[str, Any]]], *, args: dict[str, Any]) -> dict[str, Any]:
        """An op that awaits its result (``do``, asked with ``args``), unless ``key`` was
        asked before: then the first answer, waiting for it if the first ask is not over
        (``key_reused`` if it asked something else)."""
        slot = (caller, op, key)
        asked = Asked.of(op, args)
        answer = self._first_answer(slot, asked)
        if answer is not None:
            return answer
        first = self.waiting.get(slot)
        if isinstance(first, asyncio.Future):
            return await asyncio.shield(first)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[slot] = future
        self.asked[slot] = asked
        try:
            answer = await do()
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting for it
            raise
        finally:
            self.waiting.pop(slot, None)
            self.asked.pop(slot, None)
        commit = self.keep(caller, op, key, answer, asked=asked)
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
        asked: Asked | None = None,
    ) -> Commit | None:
        """Keep ``answer`` as the first answer of ``key`` (a request that asked
        ``asked``), and write its record: the commit that makes it durable (None when
        nothing was written). ``push``: the foreground peer and the ``deliver`` event
        (bytes, or as a dict) the answer says was delivered, kept on record until the peer
        acks it (:meth:`pushed`)."""
        when = self.clock() if when is None else when
        kept = self.kept.setdefault(caller, collections.OrderedDict())
        if push is not None and isinstance(push[1], bytes):
            push = (push[0], json.loads(push[1]))
        kept[(op, key)] = Kept(when, answer, push, asked)
        # Oldest first: what is past its time, or past the caller's share, goes.
        while len(kept) > KEEP_PER_CALLER or next(iter(kept.values())).when < when - KEEP_SECONDS:
            kept.popitem(last=False)
        if write:
            return self.write(answer_record(caller, op, key, when, answer, push, asked))
        return None

    def pushed(self, slot: tuple[str, str, str]) -> None:
        """The foreground peer acked the item ``slot``'s answer says was delivered: its
        record keeps the answer only (a record written anew, which replay takes last)."""
        caller, op, key = slot
        kept = self.kept.get(caller)
        found = kept.get((op, key)) if kept is not None else None
        if kept is not None and found is not None and found.push is not None:
            kept[(op, key)] = attrs.evolve(found, push=None)
            self.write(answer_record(caller, op, key, found.when, found.answer, None, found.asked))

    def unpushed(self) -> list[tuple[tuple[str, str, str], str, dict[str, Any]]]:
        """The answers on record whose push no peer has acked: (slot, peer id, deliver
        event), for a daemon that starts to push again when each peer registers."""
        return [
            ((caller, op, key), found.push[0], found.push[1])
            for caller, kept in self.kept.items()
            for (op, key), found in kept.items()
            if found.push is not None
        ]

    def restore(self, record: dict[str, Any]) -> None:
        """Keep an ``answer`` record read back from the journal (``ValueError`` for one
        roost did not write)."""
        caller, op, key, when, answer, push, asked = (record.get(name) for name in ("who", "req", "key", "at", "answer", "push", "asked"))
        if not (isinstance(caller, str) and isinstance(op, str) and isinstance(key, str)):
            raise ValueError("an answer record names its caller, op and key")
        if not isinstance(when, (int, float)) or isinstance(when, bool) or not isinstance(answer, dict):
            raise ValueError("an answer record holds its time and answer")
        if push is not None and not (isinstance(push, dict) and isinstance(push.get("peer"), str) and isinstance(push.get("event"), dict)):
            raise ValueError("an answer record's push names its peer and event")
        if asked is not None and not (isinstance(asked, dict) and isinstance(asked.get("digest"), str) and isinstance(asked.get("target"), str)):
            raise ValueError("an answer record's request names its digest and target")
        if self.clock() - when <= KEEP_SECONDS:
            pending = (push["peer"], push["event"]) if push is not None else None
            first = Asked(asked["digest"], asked["target"]) if asked is not None else None
            self.keep(caller, op, key, answer, when=float(when), write=False, push=pending, asked=first)

    def records(self) -> list[dict[str, Any]]:
        """The ``answer`` records of every answer still kept (the journal's snapshot)."""
        now = self.clock()
        return [
            answer_record(caller, op, key, found.when, found.answer, found.push, found.asked)
            for caller, kept in self.kept.items()
            for (op, key), found in kept.items()
            if now - found.when <= KEEP_SECONDS
        ]


def _push_then_answer(held: HeldPush) -> dict[str, Any]:
    """A held push, once its answer is on record: pushed, then answered."""
    faults.point("daemon.after_persist_before_answer")
    held.push()
    return held.answer


def answer_record(
    caller: str, op: str, key: str, when: float, answer: dict[str, Any], push: tuple[str, Any] | None = None, asked: Asked | None = None
) -> dict[str, Any]:
    """The journal record of a kept answer (with the push it says happened, until acked,
    and what its request asked)."""
    record: dict[str, Any] = {"op": "answer", "who": caller, "req": op, "key": key, "at": when, "answer": answer}
    if push is not None:
        record["push"] = {"peer": push[0], "event": push[1]}
    if asked is not None:
        record["asked"] = {"digest": asked.digest, "target": asked.target}
    return record
