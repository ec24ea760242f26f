"""A team's reach plugin wins over the default, whatever the registration order."""

from __future__ import annotations

import pytest

from roost_core import hookimpl
from roost_core.config import Config
from roost_core.records import PeerInfo, ReachDecision
from roost_core.testing import make_config, make_peer
from roost_plugins import reach


class TrustedNames:
    """Lets peers named ``trusted ...`` be reached by name from outside the tree."""

    @hookimpl
    def roost_decide_reach(
        self, sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config
    ) -> ReachDecision | None:
        """Allow trusted peers; no opinion on the rest."""
        if target.name.startswith("trusted "):
            return ReachDecision(allowed=True, relation="external")
        return None


sender = make_peer(id="a0000001", name="me", session="/s/me.jsonl")
trusted = make_peer(id="t0000001", name="trusted reviewer", session="/s/t.jsonl")
other = make_peer(id="o0000001", name="other", session="/s/o.jsonl")


@pytest.mark.parametrize("default_first", [True, False])
def test_custom_plugin_allows_an_external_peer_by_name(roost_plugin_manager, default_first: bool) -> None:
    plugins = (reach, TrustedNames()) if default_first else (TrustedNames(), reach)
    pm = roost_plugin_manager(*plugins)
    decision = pm.hook.roost_decide_reach(sender=sender, target=trusted, addressed_by="name", config=make_config())
    assert decision == ReachDecision(allowed=True, relation="external")


def test_default_answers_when_the_custom_plugin_has_no_opinion(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(TrustedNames(), reach)
    decision = pm.hook.roost_decide_reach(sender=sender, target=other, addressed_by="name", config=make_config())
    assert decision.allowed is False
    assert "agentExternalMessages" in decision.reason


def test_real_manager_loads_the_defaults_and_the_team_plugin() -> None:
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import decide_reach

    pm = make_plugin_manager(autoload=False, extra=[("team-reach", TrustedNames())])
    names = {name for name, _ in pm.list_name_plugin()}
    assert names == {"reach", "limits", "envelope", "render", "tools", "handback", "broadcast", "delivery", "watch", "budget", "settle", "team-reach"}
    assert decide_reach(pm, sender, trusted, "name", make_config()).allowed
    assert not decide_reach(pm, sender, other, "name", make_config()).allowed


class EveryoneExternal:
    """Decides in batches too: every target is an allowed external peer."""

    @hookimpl
    def roost_decide_reach(self, sender: PeerInfo, target: PeerInfo) -> ReachDecision:
        """Allow everyone."""
        return ReachDecision(allowed=True, relation="external")

    @hookimpl
    def roost_decide_reach_many(self, targets: list[PeerInfo]) -> list[ReachDecision]:
        """Allow everyone, in one call."""
        self.batches = getattr(self, "batches", 0) + 1
        return [ReachDecision(allowed=True, relation="external") for _ in targets]


def test_a_plugin_deciding_one_target_at_a_time_is_never_bypassed_by_a_batch() -> None:
    # The default reach plugin decides in batches, the team plugin does not: a listing asks
    # every target one at a time, so the team plugin still has the first word.
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import decide_reach_many

    pm = make_plugin_manager(autoload=False, extra=[("team-reach", TrustedNames())])
    decisions = decide_reach_many(pm, sender, [trusted, other], "list", make_config())
    assert [d.allowed for d in decisions] == [True, False]
    assert decisions[0] == ReachDecision(allowed=True, relation="external")


def test_batch_plugins_answer_a_listing_in_one_call() -> None:
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import decide_reach_many

    team = EveryoneExternal()
    pm = make_plugin_manager(autoload=False, extra=[("team-reach", team)])
    decisions = decide_reach_many(pm, sender, [trusted, other, sender], "list", make_config())
    assert [d.allowed for d in decisions] == [True, True, True]
    assert team.batches == 1


class WrongLength:
    @hookimpl
    def roost_decide_reach(self, target: PeerInfo) -> ReachDecision | None:
        """No opinion."""
        return None

    @hookimpl
    def roost_decide_reach_many(self, targets: list[PeerInfo]) -> list[ReachDecision]:
        """A broken batch: one answer short."""
        return [ReachDecision(allowed=True, relation="external") for _ in targets[1:]]


def test_a_batch_of_the_wrong_length_falls_back_to_single_decisions() -> None:
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import decide_reach_many

    pm = make_plugin_manager(autoload=False, extra=[("broken", WrongLength())])
    decisions = decide_reach_many(pm, sender, [trusted, other], "list", make_config())
    # The default reach plugin answers each: both are outside the sender's tree.
    assert [d.allowed for d in decisions] == [False, False]
