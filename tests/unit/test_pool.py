"""The warm pool's bookkeeping (``roost_core.daemon.pool.WarmPool``), without processes:
which slots a job may take, what is warmed next, what ends. The processes themselves are
tested through the daemon in tests/system/test_pool.py and tests/pi/test_pi_pool.py."""

from __future__ import annotations

import time
from pathlib import Path

from roost_core.daemon.pool import WarmKey, WarmPool

A = WarmKey("pi", "/work/a", "fake/kid-a", "low")
B = WarmKey("pi", "/work/b", "fake/kid-b", "high")


class Conn:
    closed = False


def pool(size: int = 1, idle: float = 600.0) -> WarmPool:
    return WarmPool(enabled=True, size=size, idle_seconds=idle, sessions_dir=Path("/sessions"), hosts=frozenset({"pi"}))


def ready_slot(p: WarmPool, key: WarmKey, now: float = 0.0):
    slot = p.new_slot(key, set())
    slot.pid, slot.conn = 4242, Conn()
    p.mark_ready(slot)
    slot.ready_since = now
    return slot


def test_only_pi_jobs_and_only_when_enabled_have_a_key():
    assert pool().key_for("scripted", "/w", None, None) is None
    assert pool().key_for("pi", "/w", "m", "t") == WarmKey("pi", "/w", "m", "t")
    off = WarmPool(enabled=False, size=1, idle_seconds=1, sessions_dir=Path("/s"), hosts=frozenset({"pi"}))
    assert off.key_for("pi", "/w", "m", "t") is None
    assert not WarmPool(enabled=True, size=0, idle_seconds=1, sessions_dir=Path("/s"), hosts=frozenset({"pi"})).enabled
    # No host keeps warm workers (none registers ``warm_pool``): no pool.
    assert not WarmPool(enabled=True, size=1, idle_seconds=1, sessions_dir=Path("/s")).enabled


def test_a_miss_makes_its_key_wanted_and_a_slot_is_planned_for_it():
    p = pool()
    assert p.take(A) is None and p.missed == 1
    ending, starting = p.plan(0.0)
    assert ending == [] and starting == [A]


def test_a_taken_slot_is_made_again_only_after_the_refill_delay():
    from roost_core.daemon.pool import REFILL_DELAY

    p = pool()
    slot = ready_slot(p, A)
    assert p.take(A) is slot
    taken = p.last_taken
    assert p.plan(taken + REFILL_DELAY / 2) == ([], [])
    assert p.plan(taken + REFILL_DELAY) == ([], [A])


def test_a_slot_reserves_a_job_id_and_session_and_is_taken_once_by_an_equal_key_only():
    p = pool()
    slot = ready_slot(p, A)
    assert slot.id in p.reserved and slot.session == f"/sessions/{slot.id}.jsonl"
    assert p.take(B) is None  # another cwd/model/thinking never takes it
    assert p.take(A) is slot and p.adopted == 1
    assert slot.id not in p.reserved and p.take(A) is None


def test_a_slot_that_is_not_ready_or_lost_its_connection_is_not_taken():
    p = pool()
    slot = p.new_slot(A, set())
    assert p.take(A) is None
    p.mark_ready(slot)
    assert p.take(A) is None  # never said warm_hello
    slot.conn = Conn()
    slot.conn.closed = True
    assert p.take(A) is None


def test_new_slot_ids_avoid_taken_job_ids():
    p = pool(size=8)
    taken = {p.new_slot(A, set()).id for _ in range(50)}
    assert len(taken) == 50


def test_the_pool_shares_its_size_among_the_most_recent_keys():
    p = pool(size=2)
    p.want(A)
    assert p.plan(0.0) == ([], [A, A])
    p.want(B)
    assert sorted(p.plan(0.0)[1], key=str) == sorted([A, B], key=str)
    # A third key pushes the oldest out: its slot ends.
    c = WarmKey("pi", "/work/c", None, None)
    slot_a = ready_slot(p, A)
    p.want(c)
    ending, starting = p.plan(0.0)
    assert ending == [slot_a] and sorted(starting, key=str) == sorted([B, c], key=str)


def test_a_slot_unused_for_the_idle_time_ends_and_its_key_is_no_longer_warmed():
    p = pool(idle=10.0)
    p.want(A)
    slot = ready_slot(p, A, now=100.0)
    assert p.plan(105.0) == ([], [])
    ending, starting = p.plan(110.0)
    assert ending == [slot] and starting == []
    assert p.wanted == []


def test_a_slot_that_died_before_it_was_ready_is_not_made_again_until_asked():
    p = pool()
    p.want(A)
    slot = p.new_slot(A, set())
    p.drop(slot)
    assert p.plan(0.0) == ([], [])
    assert p.take(A) is None
    assert p.plan(0.0)[1] == [A]


def test_a_ready_slot_that_died_is_made_again():
    p = pool()
    p.want(A)
    slot = ready_slot(p, A)
    p.drop(slot)
    assert p.plan(0.0)[1] == [A]


def grown(floor: int = 1, cap: int = 4, idle: float = 600.0) -> WarmPool:
    return WarmPool(enabled=True, size=floor, cap=cap, idle_seconds=idle, sessions_dir=Path("/sessions"), hosts=frozenset({"pi"}))


def test_a_burst_of_starts_grows_the_pool_to_its_size_within_the_cap():
    p = grown(cap=4)
    assert p.size == 1
    for _ in range(3):
        p.take(A)
    assert p.size == 3 and p.status()["max"] == 4
    for _ in range(5):
        p.take(A)
    assert p.size == 4  # a burst of eight: the cap
    capped = grown(cap=2)
    for _ in range(4):
        capped.take(A)
    assert capped.size == 2


def test_starts_further_apart_than_a_burst_do_not_add_up(monkeypatch):
    from roost_core.daemon import pool as pool_module

    now = [100.0]
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: now[0])
    p = grown(cap=4)
    for _ in range(4):
        p.take(A)
        now[0] += pool_module.BURST_SECONDS + 1
    assert p.size == 1


def test_a_learnt_burst_is_forgotten_after_idle_seconds(monkeypatch):
    from roost_core.daemon import pool as pool_module

    now = [100.0]
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: now[0])
    p = grown(cap=4, idle=60.0)
    for _ in range(4):
        p.take(A)
    assert p.size == 4
    now[0] += 61.0
    assert p.size == 1


def test_slots_warm_at_most_max_warming_at_a_time():
    from roost_core.daemon.pool import MAX_WARMING

    p = grown(cap=4)
    for _ in range(4):
        p.take(A)
    now = time.monotonic()
    _ending, starting = p.plan(now)
    assert starting == [A] * MAX_WARMING
    for key in starting:
        p.new_slot(key, set())
    assert p.plan(now) == ([], [])


def test_wakes_are_counted_apart_warm_or_cold():
    p = grown()
    ready_slot(p, A)
    assert p.take(A, wake=True) is not None
    assert p.take(A, wake=True) is None
    assert p.take(A) is None
    status = p.status()
    assert (status["wakesWarm"], status["wakesCold"], status["adopted"], status["missed"]) == (1, 1, 1, 2)
