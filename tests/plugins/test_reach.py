"""The default reach plugin: relations, and who may reach whom."""

from __future__ import annotations

import pytest

from roost_core import is_pure
from roost_core.records import PeerInfo, ReachDecision
from roost_core.testing import make_config, make_peer
from roost_plugins import reach
from roost_plugins.reach import relation_between, tree_key

ROOT = "/s/root.jsonl"
CHILD_A = "/s/child-a.jsonl"
CHILD_B = "/s/child-b.jsonl"

root = make_peer(id="r0000001", name="root", session=ROOT)
child_a = make_peer(id="c000000a", name="child a", session=CHILD_A, parent_session=ROOT, root_session=ROOT)
child_b = make_peer(id="c000000b", name="child b", session=CHILD_B, parent_session=ROOT, root_session=ROOT)
grandchild = make_peer(
    id="g0000001", name="grandchild", session="/s/gc.jsonl", parent_session=CHILD_A, root_session=ROOT
)
stranger = make_peer(id="x0000001", name="stranger", session="/s/other.jsonl")

# A --no-session foreground root links its children by peer id only.
bare_root = make_peer(id="f1234567", name="bare", kind="foreground")
bare_child_a = make_peer(id="b000000a", name="bare a", session="/s/ba.jsonl", parent_peer="f1234567")
bare_child_b = make_peer(id="b000000b", name="bare b", session="/s/bb.jsonl", parent_peer="f1234567")


@pytest.mark.parametrize(
    ("sender", "target", "relation"),
    [
        (root, child_a, "child"),
        (child_a, root, "parent"),
        (child_a, child_b, "sibling"),
        (child_b, grandchild, "tree"),
        (grandchild, root, "tree"),
        (root, grandchild, "tree"),
        (child_a, grandchild, "child"),
        (root, stranger, "external"),
        (stranger, child_a, "external"),
        (bare_root, bare_child_a, "child"),
        (bare_child_a, bare_root, "parent"),
        (bare_child_a, bare_child_b, "sibling"),
        (bare_root, root, "external"),
        (bare_child_a, child_a, "external"),
    ],
)
def test_relation_between(sender: PeerInfo, target: PeerInfo, relation: str) -> None:
    assert relation_between(sender, target) == relation


def test_child_of_a_bare_root_is_in_its_tree() -> None:
    # Its grandchild points at the child's session; the tree key still ends at the bare root.
    nested = make_peer(
        id="n0000001", session="/s/n.jsonl", parent_session="/s/ba.jsonl", parent_peer="b000000a"
    )
    assert relation_between(bare_child_a, nested) == "child"
    assert relation_between(bare_child_b, bare_child_a) == "sibling"
    assert relation_between(bare_root, make_peer(id="q", parent_peer="f1234567")) == "child"


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        (root, ROOT),
        (child_a, ROOT),
        (grandchild, ROOT),
        (bare_root, "peer:f1234567"),
        (bare_child_a, "peer:f1234567"),
        (stranger, "/s/other.jsonl"),
    ],
)
def test_tree_key(peer: PeerInfo, key: str) -> None:
    assert tree_key(peer) == key


def test_two_parentless_peers_without_session_are_not_siblings() -> None:
    one, two = make_peer(id="f0000001"), make_peer(id="f0000002")
    assert relation_between(one, two) == "external"


def test_peers_of_one_session_are_in_one_tree() -> None:
    # Two records of the same session file (an ended job and its live foreground holder).
    assert relation_between(make_peer(id="a", session=ROOT), make_peer(id="b", session=ROOT)) == "tree"


@pytest.mark.parametrize("addressed_by", ["id", "name", "list"])
@pytest.mark.parametrize("external_on", [False, True])
@pytest.mark.parametrize(
    ("sender", "target"), [(root, child_a), (child_a, root), (child_a, child_b), (child_b, grandchild)]
)
def test_inside_the_tree_is_always_allowed(
    roost_plugin_manager, sender: PeerInfo, target: PeerInfo, addressed_by: str, external_on: bool
) -> None:
    pm = roost_plugin_manager(reach)
    config = make_config(agent_external_messages=external_on)
    decision = pm.hook.roost_decide_reach(sender=sender, target=target, addressed_by=addressed_by, config=config)
    assert decision == ReachDecision(allowed=True, relation=relation_between(sender, target))


@pytest.mark.parametrize("addressed_by", ["id", "name", "list"])
def test_external_with_the_option_off_is_refused(roost_plugin_manager, addressed_by: str) -> None:
    pm = roost_plugin_manager(reach)
    decision = pm.hook.roost_decide_reach(
        sender=root, target=stranger, addressed_by=addressed_by, config=make_config()
    )
    assert decision == ReachDecision(
        allowed=False,
        relation="external",
        reason="outside your session tree; external messages are off (agentExternalMessages)",
    )


@pytest.mark.parametrize("addressed_by", ["id", "list"])
def test_external_with_the_option_on_by_id_or_listing_is_allowed(roost_plugin_manager, addressed_by: str) -> None:
    pm = roost_plugin_manager(reach)
    decision = pm.hook.roost_decide_reach(
        sender=root, target=stranger, addressed_by=addressed_by, config=make_config(agent_external_messages=True)
    )
    assert decision == ReachDecision(allowed=True, relation="external")


def test_external_by_name_is_refused_even_with_the_option_on(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(reach)
    decision = pm.hook.roost_decide_reach(
        sender=root, target=stranger, addressed_by="name", config=make_config(agent_external_messages=True)
    )
    assert not decision.allowed
    assert decision.relation == "external"
    assert "exact id only" in decision.reason


def test_default_is_trylast(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(reach)
    (impl,) = pm.hook.roost_decide_reach.get_hookimpls()
    assert impl.trylast


def test_default_is_marked_pure(roost_plugin_manager) -> None:
    """Its decision follows from the two records and the config: the daemon may keep it."""
    pm = roost_plugin_manager(reach)
    (impl,) = pm.hook.roost_decide_reach.get_hookimpls()
    assert is_pure(impl.function)
