"""Build the PluginManager: defaults by short name, third-party plugins by entry point.

Order (pytest's): block first, then load defaults, then entry points, then
``check_pending`` so a misspelled hook fails loudly. Nothing is registered at import time
and there is no global manager.

Third-party plugins are loaded one entry point at a time, so one broken plugin is logged
(with its name and distribution) and skipped instead of taking the daemon down;
``ROOST_STRICT_PLUGINS=1`` makes it fatal. Because they are not loaded through pluggy's
``load_setuptools_entrypoints`` (which registers the entry point's object as is, where
roost unwraps a module's ``plugin`` instance), pluggy does not know their distributions:
:class:`RoostPluginManager` records them in :attr:`RoostPluginManager.distributions`.
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
#: Every hook's name starts with this; marked functions without it are not hooks.
HOOK_PREFIX = "roost_"
#: What ``roost plugins`` shows as the source of a default plugin.
DEFAULT_SOURCE = "roost (default)"
#: ``1`` makes a third-party plugin that fails to load fatal instead of skipped.
STRICT_ENV = "ROOST_STRICT_PLUGINS"

#: The default plugins, by block name -> module. Same names as the entry points.
DEFAULT_PLUGINS: dict[str, str] = {
    "reach": "roost_plugins.reach",
    "limits": "roost_plugins.limits",
    "envelope": "roost_plugins.envelope",
    "render": "roost_plugins.render",
    "tools": "roost_plugins.tools",
    "handback": "roost_plugins.handback",
    "broadcast": "roost_plugins.broadcast",
    "delivery": "roost_plugins.delivery",
    "watch": "roost_plugins.watch",
    "budget": "roost_plugins.budget",
    "settle": "roost_plugins.settle",
    "workspace": "roost_plugins.workspace",
    # The hosts: each a plugin named after the host it registers.
    "scripted": "roost_plugins.hosts.scripted",
    "shell": "roost_plugins.hosts.shell",
    "pi": "roost_plugins.hosts.pi",
    "claude": "roost_plugins.hosts.claude",
    "codex": "roost_plugins.hosts.codex",
    "qwen": "roost_plugins.hosts.qwen",
    "opencode": "roost_plugins.hosts.opencode",
    "gemini": "roost_plugins.hosts.gemini",
}

#: Plugins that cannot be blocked. None today: the core has a safe default for each hook.
ESSENTIAL: frozenset[str] = frozenset()


class PluginError(RuntimeError):
    """A plugin could not be blocked or loaded."""


class RoostPluginManager(pluggy.PluginManager):
    """A :class:`pluggy.PluginManager` for project ``roost`` with three additions.

    * Only functions named ``roost_*`` (and marked with ``roost_core.hookimpl``) are hook
      implementations, as pytest does with ``pytest_``.
    * :attr:`distributions` maps the block name of every plugin loaded from an entry point
      to its :class:`importlib.metadata.Distribution` (``roost plugins`` shows its name and
      version). Plugins registered by hand are not in it.
    * :attr:`generation` counts the changes to the hooks' implementations.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        #: block name -> distribution, for plugins loaded from entry points of group ``roost``.
        self.distributions: dict[str, metadata.Distribution] = {}
        #: Moves whenever the hooks' implementations may have changed (a plugin registered,
        #: unregistered or blocked, specs added): what is worked out from them once
        #: (``policy.PluginHooks``: the compiled per-send hooks) is worked out again.
        self.generation = 0

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self.generation += 1
        return super().register(plugin, name)

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        self.generation += 1
        return super().unregister(plugin, name)

    def add_hookspecs(self, module_or_class: Any) -> None:
        self.generation += 1
        super().add_hookspecs(module_or_class)

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if not name.startswith(HOOK_PREFIX):
            return None
        return super().parse_hookimpl_opts(plugin, name)


def disabled_from_env() -> tuple[str, ...]:
    """Plugin names blocked by ``ROOST_DISABLE_PLUGINS`` (comma separated): a daemon and
    its workers read it at start (``roost --disable-plugin NAME daemon`` sets it for the
    daemon it runs; on any other command the flag blocks the plugin in that command only)."""
    return tuple(name for name in os.environ.get("ROOST_DISABLE_PLUGINS", "").split(",") if name)


def new_manager() -> RoostPluginManager:
    """A manager holding the specs and no plugin (what plugin unit tests start from)."""
    pm = RoostPluginManager()
    pm.add_hookspecs(hookspecs)
    return pm


def make_plugin_manager(
    config: Any = None,
    *,
    disabled: Iterable[str] = (),
    autoload: bool = True,
    extra: Iterable[tuple[str, object]] = (),
) -> RoostPluginManager:
    """Build a manager: block ``disabled`` and the config's ``plugins.disable``, load the
    defaults, then third-party entry points of group ``roost`` (when ``autoload``), then
    ``extra`` (``(name, plugin)`` pairs, registered by hand).

    Tests that must not depend on what is installed pass ``autoload=False``.
    """
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
            pm.register(plugin_object(importlib.import_module(module_name)), name=name)
    if autoload:
        load_entry_points(pm)
    for name, plugin in extra:
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    pm.check_pending()
    return pm


def plugin_object(loaded: Any) -> object:
    """What to register for a loaded module or object: a module may expose ``plugin`` (a
    stateful instance, as ``roost_plugins.limits`` does) or hook functions."""
    return getattr(loaded, "plugin", loaded)


def default_framer() -> Any:
    """The default ``envelope`` plugin's ``roost_frame_item``: the one framer whose texts
    the core does not check again at each send (:class:`roost_core.policy.CompiledHooks`'s
    framing), because tests/plugins/test_envelope_rules.py proves it keeps the envelope's
    rules for every item. Only the core names it; a plugin cannot make itself trusted."""
    return importlib.import_module(DEFAULT_PLUGINS["envelope"]).roost_frame_item


def load_entry_points(pm: RoostPluginManager) -> int:
    """Register every entry point of group ``roost`` that is neither blocked nor already
    registered (the defaults are also entry points of roost itself), one at a time.

    A plugin that fails to import, to register or that implements an unknown ``roost_*``
    hook is unregistered, logged with its name and distribution, and skipped; with
    ``ROOST_STRICT_PLUGINS=1`` it raises :class:`PluginError`. Returns how many loaded.
    """
    strict = os.environ.get(STRICT_ENV) == "1"
    count = 0
    for ep in metadata.entry_points(group=PROJECT):
        if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
            continue
        dist = ep.dist
        dist_name = dist.name if dist is not None else "an unknown distribution"
        try:
            plugin = plugin_object(ep.load())
            pm.register(plugin, name=ep.name)
            unknown = unknown_hooks(pm, plugin)
            if unknown:
                raise PluginError(f"unknown hook(s) {', '.join(unknown)}")
        except Exception as exc:
            if pm.has_plugin(ep.name):
                # pluggy registers the name before it checks each hook: undo the half.
                pm.unregister(name=ep.name)
            if strict:
                raise PluginError(f"plugin {ep.name!r} from {dist_name} failed to load: {exc}") from exc
            log.warning("skipping plugin %r from %s: %s", ep.name, dist_name, exc)
            continue
        if dist is not None:
            pm.distributions[ep.name] = dist
        count += 1
    return count


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks ``plugin`` implements that no spec declares (what ``check_pending`` would
    refuse), except those marked ``optionalhook``."""
    names = set()
    for caller in pm.get_hookcallers(plugin) or ():
        if caller.has_spec():
            continue
        if any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls()):
            names.add(caller.name)
    return sorted(names)


def _default_module(name: str) -> Any:
    module_name = DEFAULT_PLUGINS.get(name)
    if module_name is None:
        return None
    try:
        return importlib.import_module(module_name)
    except ImportError:  # pragma: no cover - the defaults ship with roost
        return None


def _roost_version() -> str | None:
    try:
        return metadata.version(PROJECT)
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        from roost_core import __version__

        return __version__


def _distribution_name(dist: Any) -> str:
    """A distribution's name (pluggy's ``DistFacade`` or an importlib ``Distribution``)."""
    return str(dist.metadata["Name"])


def describe_plugins(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Name, version, source and hooks of every registered plugin (``roost plugins``),
    in registration order, from pluggy's public API only.

    ``source`` is ``roost (default)`` for a default plugin, the distribution's name for a
    plugin loaded from an entry point (recorded by :class:`RoostPluginManager`, or known to
    pluggy when it was loaded with ``pm.load_setuptools_entrypoints``), and
    ``in-process (MODULE)`` for one registered by hand. ``version`` is the
    distribution's version, or None when there is none.
    """
    pluggy_dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distributions()}
    recorded: dict[str, Any] = getattr(pm, "distributions", {})
    rows = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue  # blocked
        version: str | None
        default = _default_module(name)
        if default is not None and plugin is plugin_object(default):
            source, version = DEFAULT_SOURCE, _roost_version()
        elif name in recorded:
            source, version = _distribution_name(recorded[name]), recorded[name].version
        elif id(plugin) in pluggy_dists:
            dist = pluggy_dists[id(plugin)]
            source, version = _distribution_name(dist), dist.version
        else:
            module = getattr(plugin, "__name__", None) or type(plugin).__module__
            source, version = f"in-process ({module})", None
        callers = pm.get_hookcallers(plugin) or []
        rows.append({"name": name, "version": version, "source": source, "hooks": sorted(caller.name for caller in callers)})
    return rows


def blocked_plugins(pm: pluggy.PluginManager) -> list[str]:
    """The names blocked on ``pm`` (``--disable-plugin``, ``ROOST_DISABLE_PLUGINS``,
    ``plugins.disable``), sorted; a blocked name need not match an installed plugin."""
    return sorted(name for name, plugin in pm.list_name_plugin() if plugin is None)


def known_plugin_names() -> set[str]:
    """Every name a plugin could be blocked by: the defaults and installed entry points."""
    return set(DEFAULT_PLUGINS) | {ep.name for ep in metadata.entry_points(group=PROJECT)}


def plugin_set(pm: pluggy.PluginManager) -> dict[str, Any]:
    """What ``pm`` runs, as ``roost plugins`` and the daemon's ``plugins`` op show it: the
    loaded plugins' rows, the blocked names, and which blocked names match no plugin."""
    blocked = blocked_plugins(pm)
    return {"plugins": describe_plugins(pm), "blocked": blocked, "unknown_blocked": sorted(set(blocked) - known_plugin_names())}


def plugin_notes(pm: pluggy.PluginManager, config: Any = None, config_file: Any = None) -> list[str]:
    """Plain sentences for every way the plugins in ``pm`` differ from roost's default
    set: a third-party plugin that is active (which, from which distribution and where it
    is installed, how to block it) and a default plugin that is blocked (by what).
    Empty when ``pm`` runs exactly the defaults."""
    where = f" in {config_file}" if config_file else ""
    config_blocked = getattr(config, "disabled_plugins", ())
    notes = []
    recorded = getattr(pm, "distributions", {})
    for row in describe_plugins(pm):
        if row["source"] == DEFAULT_SOURCE:
            continue
        name = row["name"]
        origin = f"the package {row['source']}" + (f" {row['version']}" if row["version"] else "")
        dist = recorded.get(name)
        if dist is not None:
            origin += f", installed in {dist.locate_file('')}"
        in_config = f', or "plugins": {{"disable": ["{name}"]}}{where}' if config_file else ""
        notes.append(
            f"plugin {name!r} (not a default) is active: from {origin}. "
            f"Block it with `roost --disable-plugin {name} ...` or ROOST_DISABLE_PLUGINS={name}{in_config}."
        )
    for name in DEFAULT_PLUGINS:
        if pm.is_blocked(name):
            by = f'"plugins": {{"disable": [...]}}{where}' if name in config_blocked else "--disable-plugin or ROOST_DISABLE_PLUGINS"
            notes.append(f"default plugin {name!r} is blocked (by {by}): the core does the neutral thing for its hooks.")
    return notes


def set_differences(daemon: dict[str, Any], local: dict[str, Any]) -> list[str]:
    """How this command's own plugin set (``local``, :func:`plugin_set`) differs from the
    daemon's (``daemon``, its ``plugins`` op): one sentence a plugin, empty when they
    agree. The command's set renders ``roost log`` and ``roost view`` here; the daemon's
    decides everything else."""
    ours = {row["name"] for row in local["plugins"]}
    theirs = {row["name"] for row in daemon["plugins"]}
    notes = [
        f"the daemon runs {name!r}; this command does not (blocked here by --disable-plugin or "
        f"ROOST_DISABLE_PLUGINS, which change this command only). To block it in the daemon: "
        f"`roost daemon stop`, then `roost --disable-plugin {name} daemon`, or \"plugins\": {{\"disable\": [\"{name}\"]}} in the config."
        for name in sorted(theirs - ours)
    ]
    notes += [
        f"this command runs {name!r}; the daemon does not (it was started without it, or with it blocked): restart the daemon to run it."
        for name in sorted(ours - theirs)
    ]
    return notes
