"""The fork server loads the host classes of the hosts with warm workers before it forks
(a warm worker starts with its host loaded): which ones is the hosts' own word
(``HostSpec.warm_pool``), the fork server names none."""

from __future__ import annotations

from roost_core.plugins import make_plugin_manager
from roost_core.worker.forkserver import warm_host_modules
from roost_core.worker.main import PreparedPlugins


def test_the_warm_hosts_modules_are_their_plugins_word() -> None:
    prepared = PreparedPlugins(frozenset(), make_plugin_manager(autoload=False))
    assert warm_host_modules(prepared) == ["roost_plugins.pi.host"]


def test_no_warm_host_no_module() -> None:
    assert warm_host_modules(PreparedPlugins(frozenset({"pi"}), make_plugin_manager(disabled=["pi"], autoload=False))) == []
    assert warm_host_modules(None) == []
