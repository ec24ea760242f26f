"""The default limits plugin: self-sends, empty and long messages, the rate window."""

from __future__ import annotations

import pytest

from roost_core.records import Refusal
from roost_core.testing import make_config, make_item, make_peer
from roost_plugins import limits
from roost_plugins.limits import LimitsPlugin

alice = make_peer(id="a0000001", name="alice", session="/s/a.jsonl")
bob = make_peer(id="b0000001", name="bob", session="/s/b.jsonl")
carol = make_peer(id="c0000001", name="carol", session="/s/c.jsonl")


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(LimitsPlugin())


def check(pm, item, now: float = 0.0, **config) -> Refusal | None:
    refusals = [r for r in pm.hook.roost_check_send(item=item, now=now, config=make_config(**config)) if r]
    return refusals[0] if refusals else None


def send(pm, item, now: float, **config) -> Refusal | None:
    """A send as the core asks it: checked, and noted when nothing refused it."""
    refusal = check(pm, item, now, **config)
    if refusal is None:
        pm.hook.roost_note_sent(item=item, now=now)
    return refusal


def test_an_ordinary_message_passes(pm) -> None:
    assert check(pm, make_item(alice, bob)) is None


@pytest.mark.parametrize("kind", ["message", "report"])
def test_sending_to_the_same_id_is_refused(pm, kind: str) -> None:
    assert check(pm, make_item(alice, alice, kind=kind)).code == "self_send"


def test_sending_to_another_record_of_the_same_session_is_refused(pm) -> None:
    same_session = make_peer(id="f7654321", kind="foreground", session="/s/a.jsonl")
    assert check(pm, make_item(alice, same_session)).code == "self_send"


def test_two_no_session_peers_are_not_the_same(pm) -> None:
    assert check(pm, make_item(make_peer(id="f0000001"), make_peer(id="f0000002"))) is None


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_an_empty_message_is_refused(pm, text: str) -> None:
    assert check(pm, make_item(alice, bob, text=text)).code == "empty_message"


def test_length_limit_edges(pm) -> None:
    assert check(pm, make_item(alice, bob, text="x" * 8000)) is None
    refusal = check(pm, make_item(alice, bob, text="x" * 8001))
    assert refusal.code == "message_too_long"
    assert "8000" in refusal.message


def test_length_limit_follows_the_config(pm) -> None:
    assert check(pm, make_item(alice, bob, text="x" * 11), max_message_chars=10).code == "message_too_long"
    assert check(pm, make_item(alice, bob, text="x" * 10), max_message_chars=10) is None


def test_reports_are_exempt_from_size_and_rate(pm) -> None:
    for second in range(40):
        pm.hook.roost_note_sent(item=make_item(alice, bob), now=float(second) / 10)
    assert check(pm, make_item(alice, bob), now=4.0).code == "rate_limited"
    assert check(pm, make_item(alice, bob, kind="report", text="x" * 9000), now=4.0) is None


def test_rate_window_edges(pm) -> None:
    message = make_item(alice, bob)
    for n in range(30):
        assert send(pm, message, now=100.0 + n) is None
    refusal = send(pm, message, now=159.9)
    assert refusal.code == "rate_limited"
    assert "30" in refusal.message
    # The first message (t=100) leaves the window at t=160; one slot frees up.
    assert send(pm, message, now=160.0) is None
    assert send(pm, message, now=160.5).code == "rate_limited"
    # Sixty seconds after the last accepted message, the window is empty again.
    for n in range(30):
        assert send(pm, message, now=220.0 + n / 100) is None


def test_refused_messages_do_not_count(pm) -> None:
    message = make_item(alice, bob)
    for n in range(30):
        assert send(pm, message, now=float(n)) is None
    for n in range(10):
        assert send(pm, message, now=30.0 + n).code == "rate_limited"
    # Only the thirty accepted ones were counted, so t=60 frees the first slot.
    assert send(pm, message, now=60.0) is None


def test_rate_is_per_sender(pm) -> None:
    for n in range(30):
        assert send(pm, make_item(alice, bob), now=float(n)) is None
    assert send(pm, make_item(alice, carol), now=30.0).code == "rate_limited"
    assert send(pm, make_item(carol, bob), now=30.0) is None


def test_a_rate_of_zero_refuses_every_message(pm) -> None:
    refusals = [send(pm, make_item(alice, bob), now=float(n), messages_per_minute=0) for n in range(2)]
    assert [refusal.code for refusal in refusals] == ["rate_limited"] * 2


def test_a_checked_send_that_is_not_noted_does_not_count(pm) -> None:
    """The check counts nothing: a send refused after it (the receiver's queue was full,
    another plugin refused) is never noted, so there is nothing to take back."""
    for n in range(29):
        assert send(pm, make_item(alice, bob), now=float(n)) is None
    for _ in range(5):
        assert check(pm, make_item(alice, bob), now=29.0) is None  # checked, not taken
    assert send(pm, make_item(alice, bob), now=29.5) is None
    assert check(pm, make_item(alice, bob), now=29.6).code == "rate_limited"


def test_a_refused_check_counts_nothing(pm) -> None:
    cases = [make_item(alice, alice), make_item(alice, bob, text=" "), make_item(alice, bob, text="x" * 9), make_item(alice, bob, hops=99)]
    for item in cases:
        assert send(pm, item, 0.0, max_message_chars=8) is not None
    for n in range(30):
        assert send(pm, make_item(alice, bob), now=float(n)) is None
    assert send(pm, make_item(alice, bob), now=30.0).code == "rate_limited"


def test_rate_follows_the_config(pm) -> None:
    pm.hook.roost_note_sent(item=make_item(alice, bob), now=0.0)
    pm.hook.roost_note_sent(item=make_item(alice, bob), now=1.0)
    assert check(pm, make_item(alice, bob), now=2.0, messages_per_minute=2).code == "rate_limited"
    assert check(pm, make_item(alice, bob), now=2.0, messages_per_minute=3) is None


def test_reports_do_not_count_towards_the_rate(pm) -> None:
    for n in range(50):
        pm.hook.roost_note_sent(item=make_item(alice, bob, kind="report"), now=float(n) / 10)
    assert check(pm, make_item(alice, bob), now=5.0) is None


def test_fresh_instances_do_not_share_counters(roost_plugin_manager) -> None:
    first = roost_plugin_manager(LimitsPlugin())
    for n in range(30):
        first.hook.roost_note_sent(item=make_item(alice, bob), now=float(n))
    second = roost_plugin_manager(LimitsPlugin())
    assert check(first, make_item(alice, bob), now=30.0).code == "rate_limited"
    assert check(second, make_item(alice, bob), now=30.0) is None


def test_the_module_registers_its_shared_instance(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(limits)
    assert pm.get_plugins() == {limits.plugin}
    assert check(pm, make_item(alice, alice)).code == "self_send"


# ---------------------------------------------------------------------------- spawn hosts

from roost_core.testing import make_spawn_request  # noqa: E402


def spawn_refusal(pm, request, **config):
    refusals = [r for r in pm.hook.roost_check_spawn(request=request, now=0.0, config=make_config(**config)) if r]
    return refusals[0] if refusals else None


def test_a_spawn_that_chooses_no_host_needs_no_permission(pm) -> None:
    assert spawn_refusal(pm, make_spawn_request()) is None


def test_a_chosen_host_is_refused_unless_agent_spawn_hosts_lists_it(pm) -> None:
    refusal = spawn_refusal(pm, make_spawn_request(host="claude"))
    assert refusal is not None and refusal.code == "host_not_allowed" and "agentSpawnHosts" in refusal.message
    assert spawn_refusal(pm, make_spawn_request(host="claude"), agent_spawn_hosts=("pi", "claude")) is None
    assert spawn_refusal(pm, make_spawn_request(host="shell"), agent_spawn_hosts=("pi", "claude")).code == "host_not_allowed"
