"""The default broadcast, delivery, watch and budget plugins, each on a manager of its own
(the kit's ``roost_plugin_manager``), and the core's neutral answer with each blocked."""

from __future__ import annotations

from roost_core import policy
from roost_core.records import DeliveryDecision, Refusal, ScopePlan, WatchDecision
from roost_core.testing import (
    make_child,
    make_config,
    make_item,
    make_manager,
    make_peer,
    make_scope_request,
    make_tree_usage,
    make_watch_request,
)
from roost_plugins import broadcast, budget, delivery, watch

LEAD = make_peer(id="f1234567", name="lead", kind="foreground", session="/s/lead.jsonl", live=True)
KID_A = make_child(LEAD, id="c0000001", name="kid-a", live=True)
KID_B = make_child(LEAD, id="c0000002", name="kid-b", live=False)
KID_C = make_child(LEAD, id="c0000003", name="kid-c", live=True, state="stopped")
UNCLE = make_peer(id="c0000009", name="uncle", live=True, root_session="/s/lead.jsonl")


# ---------------------------------------------------------------------------- broadcast


def plan(pm, scope="children", *peers, chain=False):
    return pm.hook.roost_plan_broadcast(request=make_scope_request(LEAD, scope, *peers, broadcast_chain=chain), config=make_config())


def test_children_are_the_children_a_message_reaches_asleep_or_not(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(broadcast)
    answer = plan(pm, "children", (KID_A, "child"), (KID_B, "child"), (KID_C, "child"), (UNCLE, "tree"))
    # KID_B has no worker (hibernated): the item wakes it. KID_C is stopped: never.
    assert [r.peer.id for r in answer.receivers] == ["c0000001", "c0000002"] and answer.refusal is None
    crashed = make_child(LEAD, id="c0000004", name="kid-d", live=False, state="failed")
    shell = make_child(LEAD, id="c0000005", name="kid-e", live=True, accepts_messages=False)
    answer = plan(pm, "children", (crashed, "child"), (shell, "child"))
    assert [r.peer.id for r in answer.receivers] == ["c0000004"]
    assert plan(pm, "children", (KID_C, "child"), (shell, "child")).refusal.code == "empty_scope"


def test_a_foreground_peer_receives_only_while_connected(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(broadcast)
    gone = make_peer(id="f0000002", name="gone", kind="foreground", state="not running", live=False)
    answer = plan(pm, "tree", (LEAD, "parent"), (gone, "sibling"))
    assert [r.peer.id for r in answer.receivers] == ["f1234567"]


def test_tree_takes_every_relation_but_external(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(broadcast)
    answer = plan(pm, "tree", (KID_A, "child"), (UNCLE, "tree"), (make_peer(id="x", live=True), "external"))
    assert [r.peer.id for r in answer.receivers] == ["c0000001", "c0000009"]


def test_a_broadcast_cannot_start_another(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(broadcast)
    assert plan(pm, "children", (KID_A, "child"), chain=True).refusal.code == "broadcast_chain"
    assert plan(pm, "cousins", (KID_A, "child")).refusal.code == "unknown_scope"
    assert plan(pm, "siblings", (KID_A, "child")).refusal.code == "empty_scope"


def test_the_core_refuses_broadcasts_without_a_plugin_and_plans_outside_the_offer() -> None:
    request = make_scope_request(LEAD, "children", (KID_A, "child"))
    assert policy.plan_broadcast(make_manager(), request, make_config()).refusal.code == "unreachable"

    class Wide:
        from roost_core import hookimpl

        @hookimpl
        def roost_plan_broadcast(self, request, config):
            from roost_core.records import ReachablePeer

            return ScopePlan(receivers=(ReachablePeer(make_peer(id="outside"), "child"),))

    assert policy.plan_broadcast(make_manager(Wide()), request, make_config()).refusal.code == "unreachable"


# ---------------------------------------------------------------------------- delivery


def test_urgent_steers_and_not_urgent_follows_up(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(delivery)
    decide = lambda item, **config: pm.hook.roost_decide_delivery(item=item, config=make_config(**config))  # noqa: E731
    assert decide(make_item(urgent=True)) == DeliveryDecision("steer")
    assert decide(make_item(urgent=False)) == DeliveryDecision("followUp")
    assert decide(make_item()) == DeliveryDecision("steer")
    assert decide(make_item(), agent_delivery="followUp") == DeliveryDecision("followUp")
    assert decide(make_item(urgent=True), agent_delivery="followUp") == DeliveryDecision("steer")
    # Reports and notices keep their own rule.
    assert decide(make_item(kind="report", urgent=False), agent_delivery="followUp") == DeliveryDecision("steer")
    assert decide(make_item(kind="notice"), agent_delivery="followUp") == DeliveryDecision("steer")


def test_the_core_steers_without_a_plugin() -> None:
    assert policy.decide_delivery(make_manager(), make_item(urgent=False), make_config()) == "steer"


def test_agent_delivery_config_is_checked() -> None:
    import pytest

    assert make_config({"agentDelivery": "followUp"}).agent_delivery == "followUp"
    with pytest.raises(ValueError):
        make_config({"agentDelivery": "later"})


# ---------------------------------------------------------------------------- watch


def test_watches_inside_the_tree_bounded_and_within_hops(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(watch)
    decide = lambda request, **config: pm.hook.roost_decide_watch(request=request, config=make_config(**config))  # noqa: E731
    assert decide(make_watch_request(LEAD, KID_A)) == WatchDecision(True)
    assert decide(make_watch_request(LEAD, UNCLE, "external")).refusal.code == "unreachable"
    assert decide(make_watch_request(LEAD, KID_A, active=8)).refusal.code == "watch_limit"
    assert decide(make_watch_request(LEAD, KID_A, active=1), agent_max_watches=1).refusal.code == "watch_limit"
    assert decide(make_watch_request(LEAD, KID_A, hops=9)).refusal.code == "hop_limit"


def test_the_core_keeps_no_watch_without_a_plugin() -> None:
    decision = policy.decide_watch(make_manager(), make_watch_request(LEAD, KID_A), make_config())
    assert not decision.allowed and decision.refusal.code == "unreachable"


# ---------------------------------------------------------------------------- budget


def test_budget_caps_tokens_and_cost(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(budget)
    check = lambda usage, **config: [r for r in pm.hook.roost_check_budget(usage=usage, config=make_config(config)) if r]  # noqa: E731
    assert check(make_tree_usage(10**9)) == []  # no cap by default
    assert check(make_tree_usage(99), agentTreeTokens=100) == []
    (refusal,) = check(make_tree_usage(100), agentTreeTokens=100)
    assert isinstance(refusal, Refusal) and refusal.code == "budget_spent" and "agentTreeTokens" in refusal.message
    (refusal,) = check(make_tree_usage(1, cost=0.5), agentTreeCost=0.25)
    assert "agentTreeCost" in refusal.message
    assert check(make_tree_usage(1, cost=0.1), agentTreeCost=0.25) == []


def test_no_budget_without_a_plugin() -> None:
    assert policy.check_budget(make_manager(), make_tree_usage(10**9), make_config(agent_tree_tokens=1)) is None
