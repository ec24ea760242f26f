"""A team's reach plugin wins over the default, whatever the registration order."""

from __future__ import annotations

import pytest

from roost_core import hookimpl, pure
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
    assert names == {
        "reach", "limits", "envelope", "render", "tools", "handback", "broadcast", "delivery", "watch", "budget", "settle", "workspace", "team-reach",
        "scripted", "shell", "pi", "claude", "codex", "qwen", "opencode", "gemini",  # the hosts
    }
    assert decide_reach(pm, sender, trusted, "name", make_config()).allowed
    assert not decide_reach(pm, sender, other, "name", make_config()).allowed


def test_the_team_plugin_decides_every_target_of_a_listing() -> None:
    """A listing asks each target through the compiled hooks, as a send does: the team
    plugin has the first word for each, the default answers the rest."""
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import CompiledHooks

    pm = make_plugin_manager(autoload=False, extra=[("team-reach", TrustedNames())])
    decide = CompiledHooks(pm).decide_reach
    decisions = [decide(sender, target, "list", make_config()) for target in (trusted, other)]
    assert decisions == [ReachDecision(allowed=True, relation="external"), reach.EXTERNAL_OFF]


class PureTrustedNames(TrustedNames):
    """The same decision, declared to follow from its arguments alone."""

    @hookimpl
    @pure
    def roost_decide_reach(self, sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config) -> ReachDecision | None:
        """Allow trusted peers; no opinion on the rest."""
        return super().roost_decide_reach(sender, target, addressed_by, config)


@pytest.mark.parametrize(("team", "kept"), [(TrustedNames(), False), (PureTrustedNames(), True)], ids=["unmarked", "marked pure"])
def test_the_daemon_keeps_reach_decisions_only_when_the_team_plugin_is_marked_pure(team, kept: bool) -> None:
    from roost_core.plugins import make_plugin_manager
    from roost_core.policy import CompiledHooks

    pm = make_plugin_manager(autoload=False, extra=[("team-reach", team)])
    assert CompiledHooks(pm).reach_pure is kept
