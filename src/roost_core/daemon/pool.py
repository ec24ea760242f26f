"""Warm pi processes: a new pi job starts on a pi that is already up.

A cold pi takes ~1–2 s to start (mostly importing its code); a child spawned on a warm one
makes its first model request within milliseconds. The pool keeps up to ``piPoolSize``
*warm slots*, each a worker process (forked like any worker) that has started pi and
waits:

* a slot is made for one future job: it has that job's id, token and session file
  already (reserved here, so no job can take them), and starts exactly the pi a cold
  start of that job would run (``pi --mode rpc --session FILE [--model M] [--thinking
  T]`` in the job's cwd, with the job's environment and process mark) — so a pooled pi
  *is* the cold-started one, only earlier;
* a new pi job whose host, cwd, model and thinking level equal a ready slot's (its *key*)
  takes the slot: the job is made with the slot's id, token and session, and the slot's
  worker becomes the job's worker (``adopt``, then its ordinary ``worker_hello``);
* a slot serves that one job and is never given back: nothing of one child (model,
  thinking level, settings, environment, token, cwd) can reach another, by construction.

The pool learns what to warm from the jobs that start: after each new pi job (warm or
cold) the next slot is made for that job's key. It learns how many from them too: jobs
that start within :data:`BURST_SECONDS` of each other are a burst (a parent fanning out to
several children, a broadcast waking several), and the pool keeps as many slots as the
largest burst of the last ``reapAfterSeconds``, at least ``piPoolSize`` and at most
``piPoolMax``. Slots are made in the background (the daemon's monitor), at most
:data:`MAX_WARMING` at a time, never on a send's path.

A *wake* (a hibernated, reaped or crashed job started again on its session file) takes a
ready slot of its key too: the slot's worker becomes that job's worker and switches its
pi to the job's session file (pi's ``switch_session``: the same code path as a cold
``pi --session FILE`` with the same flags, in the session's cwd). The slot's own id,
token and session file are then never used: a slot still serves exactly one job.

A slot that waits longer than
``reapAfterSeconds`` is ended, as an idle job would be; one whose worker dies before it
is ready is not made again until a job asks for its key. Slots live only in this daemon's
memory: a warm worker whose daemon connection drops exits (and ends its pi).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from roost_core import identity

if TYPE_CHECKING:
    from roost_core.daemon.connection import Connection

log = logging.getLogger("roost.daemon")

#: After a job takes a slot, the next slot is started this much later: a pi start is a
#: second or two of CPU, which would otherwise compete with the job's first model request
#: right when its latency is what the pool is for.
REFILL_DELAY = 1.0
#: Jobs that ask for a slot within this many seconds of each other are one burst.
BURST_SECONDS = 10.0
#: At most this many slots warm up at once: each pi start is 1-2 CPU-seconds, and the
#: jobs that just started want the CPU for their first model requests.
MAX_WARMING = 2


@attrs.frozen
class WarmKey:
    """What a warm pi was started with; a job takes a slot only when all of it is equal."""

    host: str
    cwd: str
    model: str | None
    thinking: str | None


@attrs.define(eq=False)
class WarmSlot:
    """One warm worker and the job it is waiting to become."""

    id: str
    token: str
    session: str
    key: WarmKey
    mark: str = ""
    process: Any = None
    pid: int | None = None
    create_time: float | None = None
    started: float = attrs.field(factory=time.monotonic)
    #: Its connection once it said ``warm_hello``; ``ready`` once its pi is up.
    conn: Connection | None = None
    ready: bool = False
    ready_since: float | None = None

    def info(self) -> dict[str, Any]:
        """What the warm worker is told in the ``warm_hello`` answer (the job it will be)."""
        return {
            "id": self.id,
            "name": "",
            "host": self.key.host,
            "cwd": self.key.cwd,
            "session": self.session,
            "task": "",
            "model": self.key.model,
            "thinking": self.key.thinking,
        }


class WarmPool:
    """The daemon's warm slots (see the module docstring)."""

    def __init__(
        self, *, enabled: bool, size: int, idle_seconds: float, sessions_dir: Path, cap: int | None = None, hosts: frozenset[str] = frozenset()
    ) -> None:
        self.enabled = enabled and size > 0 and bool(hosts)
        #: The hosts with warm workers (``HostSpec.warm_pool``: roost's pi).
        self.hosts = hosts
        #: The fewest slots kept (``piPoolSize``) and the most (``piPoolMax``).
        self.floor = size
        self.cap = max(size, cap if cap is not None else size)
        self.idle_seconds = idle_seconds
        self.sessions_dir = sessions_dir
        self.slots: dict[str, WarmSlot] = {}
        #: The keys to keep warm, the most recently asked first (at most ``cap``).
        self.wanted: list[WarmKey] = []
        self.adopted = 0
        self.missed = 0
        self.wakes_warm = 0
        self.wakes_cold = 0
        self.last_taken = float("-inf")
        #: When jobs asked for a slot, within the last :data:`BURST_SECONDS`.
        self.asks: deque[float] = deque()
        #: The largest burst learnt and when it was (forgotten after ``idle_seconds``).
        self.peak = 0
        self.peak_at = float("-inf")

    @property
    def size(self) -> int:
        """How many slots the pool keeps now (:meth:`size_at`)."""
        return self.size_at(time.monotonic())

    def size_at(self, now: float) -> int:
        """How many slots the pool keeps at ``now``: the largest burst of the last
        ``idle_seconds``, within ``floor``..``cap``."""
        peak = self.peak if now - self.peak_at < self.idle_seconds else 0
        return min(self.cap, max(self.floor, peak))

    def learn(self, now: float) -> None:
        """A job asked for a slot: count it into the burst it belongs to."""
        while self.asks and now - self.asks[0] > BURST_SECONDS:
            self.asks.popleft()
        self.asks.append(now)
        if len(self.asks) >= self.peak or now - self.peak_at >= self.idle_seconds:
            self.peak, self.peak_at = len(self.asks), now

    @property
    def reserved(self) -> set[str]:
        """Job ids that warm slots hold: no new job may take one."""
        return set(self.slots)

    def key_for(self, host: str, cwd: str, model: str | None, thinking: str | None) -> WarmKey | None:
        if not self.enabled or host not in self.hosts:
            return None
        return WarmKey(host, cwd, model, thinking)

    def take(self, key: WarmKey, *, wake: bool = False) -> WarmSlot | None:
        """A ready slot for ``key``, now out of the pool; or None (a miss). Either way
        ``key`` is what the next slot is made for, and the ask counts into a burst.
        ``wake``: for a job that continues its session file (counted apart)."""
        now = time.monotonic()
        self.learn(now)
        self.want(key)
        for slot in sorted(self.slots.values(), key=lambda s: s.ready_since or 0):
            if slot.ready and slot.key == key and slot.conn is not None and not slot.conn.closed:
                del self.slots[slot.id]
                self.adopted += 1
                self.wakes_warm += wake
                self.last_taken = now
                return slot
        self.missed += 1
        self.wakes_cold += wake
        return None

    def want(self, key: WarmKey) -> None:
        if key in self.wanted:
            self.wanted.remove(key)
        self.wanted.insert(0, key)
        del self.wanted[self.cap:]

    def plan(self, now: float) -> tuple[list[WarmSlot], list[WarmKey]]:
        """What to change now: the slots to end and the keys to make slots for.

        The pool holds ``size`` slots, shared round-robin by the wanted keys, the most
        recent first (one key: all of them). A ready slot that waited ``idle_seconds``
        ends and its key is no longer wanted (nobody used it for that long); a slot whose
        key lost its share ends too. New slots wait :data:`REFILL_DELAY` after a take,
        and at most :data:`MAX_WARMING` warm up at once."""
        for slot in self.slots.values():
            if slot.ready and slot.ready_since is not None and now - slot.ready_since >= self.idle_seconds and slot.key in self.wanted:
                self.wanted.remove(slot.key)
        size = self.size_at(now)
        target = [self.wanted[n % len(self.wanted)] for n in range(size)] if self.wanted else []
        ending: list[WarmSlot] = []
        for slot in sorted(self.slots.values(), key=lambda s: s.started, reverse=True):
            if slot.key in target:
                target.remove(slot.key)
            else:
                ending.append(slot)
        if now - self.last_taken < REFILL_DELAY:
            target = []
        warming = sum(1 for slot in self.slots.values() if not slot.ready and slot not in ending)
        return ending, target[: max(0, MAX_WARMING - warming)]

    def new_slot(self, key: WarmKey, taken: set[str]) -> WarmSlot:
        """Reserve a job id, token and session file for a slot of ``key``."""
        slot_id = identity.new_job_id(taken | self.reserved)
        slot = WarmSlot(id=slot_id, token=identity.new_token(), session=str(self.sessions_dir / f"{slot_id}.jsonl"), key=key)
        self.slots[slot_id] = slot
        return slot

    def drop(self, slot: WarmSlot) -> None:
        """Forget a slot whose worker exited; one that never got ready is not made again
        until a job asks for its key (a pi that cannot start must not be retried forever)."""
        self.slots.pop(slot.id, None)
        if not slot.ready and slot.key in self.wanted:
            self.wanted.remove(slot.key)

    def hello(self, conn: Connection, slot_id: Any, token: Any, pid: int) -> WarmSlot | None:
        """The slot a ``warm_hello`` speaks for, if its token and process check out."""
        slot = self.slots.get(slot_id) if isinstance(slot_id, str) else None
        if slot is None or not isinstance(token, str) or not hmac.compare_digest(slot.token.encode(), token.encode()):
            return None
        if slot.pid is None or pid != slot.pid or slot.conn is not None:
            return None
        slot.conn = conn
        return slot

    def mark_ready(self, slot: WarmSlot) -> None:
        slot.ready = True
        slot.ready_since = time.monotonic()

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "size": self.size,
            "max": self.cap,
            "warming": sum(1 for s in self.slots.values() if not s.ready),
            "ready": sum(1 for s in self.slots.values() if s.ready),
            "adopted": self.adopted,
            "missed": self.missed,
            "wakesWarm": self.wakes_warm,
            "wakesCold": self.wakes_cold,
        }
