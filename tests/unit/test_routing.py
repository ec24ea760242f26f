"""The session file as routing key: collapse records to one holder; resolve targets."""

from __future__ import annotations

import itertools

import pytest

from roost_core.protocol import AMBIGUOUS, NOT_FOUND, ProtocolError
from roost_core.routing import collapse, rank, resolve_target, session_key
from roost_core.testing import make_peer

SESSION = "/home/u/.pi/sessions/s1.jsonl"

CONNECTED_FG = make_peer(id="f1111111", name="tui", kind="foreground", state="connected", session=SESSION, live=True)
LIVE_JOB = make_peer(id="a1111111", name="job-live", kind="job", state="running", session=SESSION, live=True)
ENDED_JOB = make_peer(id="b1111111", name="job-ended", kind="job", state="done", session=SESSION, live=False)
GONE_FG = make_peer(id="f2222222", name="tui-gone", kind="foreground", state="not running", session=SESSION, live=False)


def everyone(_peer):
    return True


def test_rank_order():
    assert rank(CONNECTED_FG) < rank(LIVE_JOB) < rank(ENDED_JOB) < rank(GONE_FG)


@pytest.mark.parametrize(
    "records, holder",
    [
        ((CONNECTED_FG, LIVE_JOB, ENDED_JOB, GONE_FG), CONNECTED_FG),
        ((LIVE_JOB, ENDED_JOB, GONE_FG), LIVE_JOB),
        ((ENDED_JOB, GONE_FG), ENDED_JOB),
        ((GONE_FG,), GONE_FG),
    ],
)
def test_collapse_prefers_connected_foreground_then_live_job_then_ended_job_then_gone_foreground(records, holder):
    for order in itertools.permutations(records):
        table = collapse(order)
        assert table.holders == {SESSION: holder}
        # Every record id names the session, so any of them reaches the holder.
        for record in records:
            assert table.aliases[record.id] == SESSION
            assert table.holder_of(record.id) == holder


def test_sessionless_peers_are_their_own_key():
    a = make_peer(id="f3333333", name="a", kind="foreground", live=True)
    b = make_peer(id="f4444444", name="a", kind="foreground", live=True)
    assert session_key(a) == "peer:f3333333"
    table = collapse([a, b, LIVE_JOB])
    assert set(table.holders) == {"peer:f3333333", "peer:f4444444", SESSION}
    assert table.holder_of("nobody") is None


def test_resolve_by_id_of_any_record_of_the_session():
    table = collapse([ENDED_JOB, CONNECTED_FG])
    assert resolve_target("b1111111", table, everyone) == (CONNECTED_FG, "id")
    assert resolve_target("f1111111", table, everyone) == (CONNECTED_FG, "id")


def test_resolve_by_exact_name():
    other = make_peer(id="c2222222", name="reviewer", session="/s/2.jsonl")
    table = collapse([LIVE_JOB, other])
    assert resolve_target("reviewer", table, everyone) == (other, "name")


@pytest.mark.parametrize("to", ["review", "Reviewer", "reviewer ", "c222", "c2222222x", "", "*"])
def test_resolve_is_never_partial_or_case_insensitive(to):
    table = collapse([make_peer(id="c2222222", name="reviewer", session="/s/2.jsonl")])
    with pytest.raises(ProtocolError) as info:
        resolve_target(to, table, everyone)
    assert info.value.code == NOT_FOUND


def test_an_ambiguous_name_is_refused_with_the_ids():
    one = make_peer(id="c1111111", name="twin", session="/s/1.jsonl")
    two = make_peer(id="c2222222", name="twin", session="/s/2.jsonl")
    with pytest.raises(ProtocolError) as info:
        resolve_target("twin", collapse([one, two]), everyone)
    assert info.value.code == AMBIGUOUS
    assert "c1111111" in info.value.message and "c2222222" in info.value.message


def test_unreachable_peers_do_not_make_a_name_ambiguous():
    mine = make_peer(id="c1111111", name="twin", session="/s/1.jsonl")
    elsewhere = make_peer(id="c2222222", name="twin", session="/s/2.jsonl")
    table = collapse([mine, elsewhere])
    assert resolve_target("twin", table, lambda peer: peer.id == "c1111111") == (mine, "name")
    with pytest.raises(ProtocolError) as info:
        resolve_target("twin", table, lambda peer: False)
    assert info.value.code == NOT_FOUND


def test_an_id_wins_over_a_name():
    by_id = make_peer(id="c1111111", name="first", session="/s/1.jsonl")
    named_like_it = make_peer(id="c2222222", name="c1111111", session="/s/2.jsonl")
    assert resolve_target("c1111111", collapse([by_id, named_like_it]), everyone) == (by_id, "id")


def test_two_records_of_one_session_are_one_peer_by_name():
    # An ended job and a new live job of the same session share a name: one peer, not two.
    old = make_peer(id="a0000001", name="worker", session="/s/1.jsonl", live=False)
    new = make_peer(id="a0000002", name="worker", session="/s/1.jsonl", live=True)
    assert resolve_target("worker", collapse([old, new]), everyone) == (new, "name")
