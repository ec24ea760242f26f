"""The send limits' two shapes, as the core asks them (``policy.admit_send``,
``withdraw_send``, ``note_sent``): a plugin that admits (checks and counts in one call,
as the default limits plugin does) beside plugins that only check or only observe, each
asked what it implements, none bypassed, nothing counted twice or for a refused send."""

from __future__ import annotations

from collections import Counter

from roost_core import hookimpl, policy
from roost_core.records import Refusal
from roost_core.testing import make_config, make_item, make_manager, make_peer
from roost_plugins.limits import LimitsPlugin

alice = make_peer(id="a0000001", name="alice", session="/s/a.jsonl")
bob = make_peer(id="b0000001", name="bob", session="/s/b.jsonl")


class CountedLimits(LimitsPlugin):
    """The default limits, with a count of the calls the core makes into it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    @hookimpl
    def roost_admit_send(self, item, now, config):
        self.calls["admit"] += 1
        return super().roost_admit_send(item, now, config)

    @hookimpl
    def roost_check_send(self, item, now, config):
        self.calls["check"] += 1
        return super().roost_check_send(item, now, config)

    @hookimpl
    def roost_note_sent(self, item, now):
        self.calls["note"] += 1
        super().roost_note_sent(item, now)


class Observer:
    """Counts what went out, with the hook of old."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def roost_note_sent(self, item, now):
        self.seen.append(item.text)


class NoSecrets:
    """Checks, with the hook of old."""

    @hookimpl
    def roost_check_send(self, item, now, config):
        return Refusal("secret", "no secrets") if "secret" in item.text else None


class Quota:
    """A second admitting plugin: at most ``limit`` messages in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counted: list[object] = []

    @hookimpl
    def roost_admit_send(self, item, now, config):
        if len(self.counted) >= self.limit:
            return Refusal("quota", "quota spent")
        self.counted.append(item)
        return None

    @hookimpl
    def roost_withdraw_send(self, item, now):
        if self.counted and self.counted[-1] is item:
            self.counted.pop()


def send(pm, text: str = "hi", now: float = 0.0) -> Refusal | None:
    """What the send desk does once the item is made: admit it, and when nothing refused
    it and it was taken, note it."""
    item = make_item(alice, bob, text=text)
    refusal = policy.admit_send(pm, item, now, make_config())
    if refusal is None:
        policy.note_sent(pm, item, now)
    return refusal


def test_the_default_limits_are_asked_once_per_send():
    limits = CountedLimits()
    pm = make_manager(limits)
    for n in range(30):
        assert send(pm, now=float(n)) is None
    assert send(pm, now=30.0).code == "rate_limited"
    assert limits.calls == {"admit": 31}


def test_a_plugin_that_only_checks_is_asked_first_and_its_refusal_counts_nothing():
    limits = CountedLimits()
    pm = make_manager(limits, NoSecrets())
    assert send(pm, "a secret").code == "secret"
    assert limits.calls == {}  # not admitted, so not counted
    assert send(pm, "hello") is None
    assert limits.calls == {"admit": 1}


def test_a_plugin_that_only_observes_sees_each_accepted_send_once_and_nothing_counts_twice():
    limits, observer = CountedLimits(), Observer()
    pm = make_manager(limits, observer)
    for n in range(30):
        assert send(pm, f"m{n}", now=float(n)) is None
    assert send(pm, "one too many", now=30.0).code == "rate_limited"
    assert observer.seen == [f"m{n}" for n in range(30)]
    assert limits.calls == {"admit": 31}  # its own note is not asked: it counted on admission


def test_an_admission_refused_by_another_admitting_plugin_is_taken_back():
    quota = Quota(limit=2)
    pm = make_manager(LimitsPlugin(), quota)
    config = make_config(messages_per_minute=3)
    items = [make_item(alice, bob) for _ in range(4)]
    assert [policy.admit_send(pm, item, 0.0, config) for item in items[:2]] == [None, None]
    # The quota refuses the third (whichever plugin was asked first); had the limits
    # kept its admission, a fourth would pass their rate of three.
    assert policy.admit_send(pm, items[2], 0.0, config).code == "quota"
    quota.limit = 3
    assert policy.admit_send(pm, items[3], 0.0, config) is None
    assert policy.admit_send(pm, make_item(alice, bob), 0.0, config).code in ("rate_limited", "quota")
    assert quota.counted == [items[0], items[1], items[3]]


def test_a_send_refused_after_its_admission_is_taken_back():
    pm = make_manager(LimitsPlugin())
    config = make_config(messages_per_minute=1)
    item = make_item(alice, bob)
    assert policy.admit_send(pm, item, 0.0, config) is None
    policy.withdraw_send(pm, item, 0.0)  # the receiver's queue was full
    assert policy.admit_send(pm, make_item(alice, bob), 0.0, config) is None
    assert policy.admit_send(pm, make_item(alice, bob), 0.0, config).code == "rate_limited"
