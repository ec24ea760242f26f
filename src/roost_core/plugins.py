"""Build the PluginManager: defaults by short name, third-party plugins by entry point.

Order (pytest's): block first, then load defaults, then entry points, then
``check_pending`` so a misspelled hook fails loudly. Nothing is registered at import time
and there is no global manager.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import pluggy

from roost_core import hookspecs

log = logging.getLogger("roost.plugins")

PROJECT = "roost"

#: The default plugins, by block name -> module. Same names as the entry points.
DEFAULT_PLUGINS: dict[str, str] = {
    "reach": "roost_plugins.reach",
    "limits": "roost_plugins.limits",
    "envelope": "roost_plugins.envelope",
    "render": "roost_plugins.render",
    "tools": "roost_plugins.tools",
    "handback": "roost_plugins.handback",
}

#: Plugins that cannot be blocked. None today: the core has a safe default for each hook.
ESSENTIAL: frozenset[str] = frozenset()


class PluginError(RuntimeError):
    """A plugin could not be blocked or loaded."""


def new_manager() -> pluggy.PluginManager:
    """A manager holding the specs and no plugin (what plugin unit tests start from)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def make_plugin_manager(
    config: Any = None,
    *,
    disabled: Iterable[str] = (),
    autoload: bool = True,
    extra: Iterable[tuple[str, object]] = (),
) -> pluggy.PluginManager:
    """Build a manager: block ``disabled`` and the config's ``plugins.disable``, load the
    defaults, then third-party entry points (when ``autoload``), then ``extra``."""
    pm = new_manager()
    blocked = set(disabled)
    if config is not None:
        blocked.update(getattr(config, "disabled_plugins", ()))
    for name in sorted(blocked):
        if name in ESSENTIAL:
            raise PluginError(f"plugin {name!r} is essential and cannot be disabled")
        pm.set_blocked(name)
    for name, module_name in DEFAULT_PLUGINS.items():
        if not pm.is_blocked(name):
            pm.register(_plugin_object(importlib.import_module(module_name)), name=name)
    if autoload:
        _load_entry_points(pm)
    for name, plugin in extra:
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    pm.check_pending()
    return pm


def _plugin_object(module: Any) -> object:
    """A plugin module may expose ``plugin`` (a stateful instance) or hook functions."""
    return getattr(module, "plugin", module)


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    strict = os.environ.get("ROOST_STRICT_PLUGINS") == "1"
    for ep in metadata.entry_points(group=PROJECT):
        if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
            continue
        try:
            pm.register(_plugin_object(ep.load()), name=ep.name)
        except Exception as exc:
            dist = ep.dist.name if ep.dist else "?"
            if strict:
                raise PluginError(f"plugin {ep.name!r} from {dist} failed to load: {exc}") from exc
            log.warning("skipping plugin %r from %s: %s", ep.name, dist, exc)


def describe_plugins(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Name, version, source and hooks of every registered plugin (``roost plugins``)."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distributions()}
    rows = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(id(plugin))
        callers = pm.get_hookcallers(plugin) or []
        rows.append(
            {
                "name": name,
                "version": dist.version if dist else None,
                "source": dist.project_name if dist else getattr(plugin, "__name__", type(plugin).__name__),
                "hooks": sorted(caller.name for caller in callers),
            }
        )
    return rows


def blocked_plugins(pm: pluggy.PluginManager) -> list[str]:
    return sorted(name for name, plugin in pm.list_name_plugin() if plugin is None)
