"""A pytest plugin for roost plugin authors (entry point ``pytest11: roost``).

A team's plugin test is three lines (the fixture needs no import)::

    from roost_core.testing import make_config, make_peer

    def test_our_reach_wins(roost_plugin_manager):
        pm = roost_plugin_manager(roost_plugins.reach, OurReach())
        decision = pm.hook.roost_decide_reach(
            sender=make_peer(), target=make_peer(id="b2"), addressed_by="name", config=make_config())
        assert decision.allowed
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

import pytest

from roost_core.config import Config
from roost_core.records import OutgoingItem, PeerInfo

if TYPE_CHECKING:
    import pluggy


def make_manager(*plugins: object) -> pluggy.PluginManager:
    """A fresh manager holding the specs and only ``plugins`` (modules or instances).

    A module exposing ``plugin`` registers that instance, as the real manager does.
    """
    from roost_core.plugins import new_manager

    pm = new_manager()
    for plugin in plugins:
        pm.register(getattr(plugin, "plugin", plugin) if isinstance(plugin, ModuleType) else plugin)
    pm.check_pending()
    return pm


@pytest.fixture
def roost_plugin_manager() -> Callable[..., pluggy.PluginManager]:
    """A factory ``make(*plugins)`` returning a fresh manager with only those plugins."""
    return make_manager


def make_peer(
    id: str = "a1b2c3d4", name: str = "peer", kind: str = "job", state: str = "idle", **fields: Any
) -> PeerInfo:
    """A :class:`PeerInfo` with test defaults; ``fields`` set anything else."""
    return PeerInfo(id=id, name=name, kind=kind, state=state, **fields)


def make_item(
    sender: PeerInfo, target: PeerInfo, text: str = "hi", kind: str = "message", relation: str = "child"
) -> OutgoingItem:
    """An :class:`OutgoingItem` from ``sender`` to ``target``."""
    return OutgoingItem(sender=sender, target=target, text=text, kind=kind, relation=relation)


def make_config(**fields: Any) -> Config:
    """A :class:`Config` with the spec's defaults, overridden by ``fields``."""
    return Config(**fields)
