"""The plugin manager: blocking, defaults, entry points one at a time (a broken plugin is
skipped, or fatal with ROOST_STRICT_PLUGINS=1), and what ``roost plugins`` describes."""

from __future__ import annotations

import importlib
import logging
import sys
import uuid
from importlib import metadata
from pathlib import Path

import pluggy
import pytest

from roost_core.plugins import (
    DEFAULT_PLUGINS,
    DEFAULT_SOURCE,
    PluginError,
    RoostPluginManager,
    blocked_plugins,
    describe_plugins,
    known_plugin_names,
    make_plugin_manager,
    new_manager,
)
from roost_core.testing import make_report

GOOD = """
from roost_core import hookimpl

@hookimpl
def roost_format_report(report):
    return "team: " + report.state

@hookimpl
def helper_without_the_prefix():
    raise AssertionError("never a hook")
"""
STATEFUL = """
from roost_core import hookimpl

class Counter:
    def __init__(self):
        self.seen = 0

    @hookimpl
    def roost_note_sent(self, item, now):
        self.seen += 1

plugin = Counter()
"""
BROKEN_IMPORT = "import roost_no_such_module_anywhere\n"
MISSPELLED = """
from roost_core import hookimpl

@hookimpl
def roost_decide_reech(sender, target, addressed_by, config):
    return None
"""
WRONG_ARGS = """
from roost_core import hookimpl

@hookimpl
def roost_decide_reach(sender, bogus):
    return None
"""
OPTIONAL = """
from roost_core import hookimpl

@hookimpl(optionalhook=True)
def roost_some_future_hook():
    return None
"""


class FakeSite:
    """Distributions on a temporary ``sys.path`` entry, each with ``roost`` entry points."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.suffix = uuid.uuid4().hex[:8]
        self.modules: list[str] = []
        root.mkdir()
        monkeypatch.syspath_prepend(str(root))

    def dist(self, dist_name: str, plugins: dict[str, str], version: str = "1.2.3") -> dict[str, str]:
        """Install ``dist_name`` providing entry point NAME -> a module with SOURCE; returns
        entry point name -> module name."""
        modules = {}
        lines = ["[roost]"]
        for name, source in plugins.items():
            module = f"roosttest_{name.replace('-', '_')}_{self.suffix}"
            (self.root / f"{module}.py").write_text(source)
            lines.append(f"{name} = {module}")
            modules[name] = module
            self.modules.append(module)
        info = self.root / f"{dist_name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        importlib.invalidate_caches()
        return modules

    def cleanup(self) -> None:
        for module in self.modules:
            sys.modules.pop(module, None)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ROOST_STRICT_PLUGINS", raising=False)
    fake = FakeSite(tmp_path / "site", monkeypatch)
    yield fake
    fake.cleanup()
    importlib.invalidate_caches()


def names(pm: pluggy.PluginManager) -> list[str]:
    return [name for name, plugin in pm.list_name_plugin() if plugin is not None]


def test_defaults_by_name_and_nothing_installed_without_autoload() -> None:
    pm = make_plugin_manager(autoload=False)
    assert isinstance(pm, RoostPluginManager)
    assert names(pm) == list(DEFAULT_PLUGINS)
    assert pm.distributions == {}


def test_blocking_a_default_and_blocked_names_are_listed() -> None:
    pm = make_plugin_manager(autoload=False, disabled=["envelope", "no-such-plugin"])
    assert "envelope" not in names(pm)
    assert blocked_plugins(pm) == ["envelope", "no-such-plugin"]
    assert "envelope" not in {row["name"] for row in describe_plugins(pm)}


def test_config_disable_blocks_too() -> None:
    from roost_core.testing import make_config

    pm = make_plugin_manager(make_config({"plugins": {"disable": ["render"]}}), autoload=False)
    assert "render" not in names(pm) and blocked_plugins(pm) == ["render"]


def test_describe_defaults_and_in_process_plugins() -> None:
    class TeamPlugin:
        from roost_core import hookimpl

        @hookimpl
        def roost_format_report(self, report):
            return "team"

    pm = make_plugin_manager(autoload=False, extra=[("team", TeamPlugin())])
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert list(rows) == [*DEFAULT_PLUGINS, "team"]
    assert rows["limits"] == {
        "name": "limits",
        "version": metadata.version("roost"),
        "source": DEFAULT_SOURCE,
        "hooks": ["roost_check_send", "roost_check_spawn", "roost_note_sent", "roost_note_spawned"],
    }
    assert rows["team"]["source"] == f"in-process ({__name__})" and rows["team"]["version"] is None
    assert rows["team"]["hooks"] == ["roost_format_report"]


def test_an_entry_point_plugin_is_loaded_with_its_distribution(site: FakeSite) -> None:
    modules = site.dist("team-policies", {"team-report": GOOD, "team-counter": STATEFUL}, version="2.0.1")
    pm = make_plugin_manager()
    assert {"team-report", "team-counter"} <= set(names(pm))
    assert pm.distributions["team-report"].metadata["Name"] == "team-policies"
    rows = {row["name"]: row for row in describe_plugins(pm)}
    assert rows["team-report"] == {"name": "team-report", "version": "2.0.1", "source": "team-policies", "hooks": ["roost_format_report"]}
    # A module's ``plugin`` instance is what gets registered.
    assert pm.get_plugin("team-counter") is sys.modules[modules["team-counter"]].plugin
    assert pm.hook.roost_format_report(report=make_report(state="done")) == "team: done"
    assert {"team-report", "team-counter"} <= known_plugin_names()


def test_only_roost_prefixed_functions_are_hooks(site: FakeSite) -> None:
    site.dist("team-policies", {"team-report": GOOD})
    pm = make_plugin_manager()
    assert not hasattr(pm.hook, "helper_without_the_prefix")


def test_a_blocked_entry_point_is_never_imported(site: FakeSite) -> None:
    modules = site.dist("team-policies", {"team-report": GOOD})
    pm = make_plugin_manager(disabled=["team-report"])
    assert "team-report" not in names(pm) and "team-report" in blocked_plugins(pm)
    assert modules["team-report"] not in sys.modules


@pytest.mark.parametrize(
    ("source", "why"),
    [(BROKEN_IMPORT, "roost_no_such_module_anywhere"), (MISSPELLED, "unknown hook(s) roost_decide_reech"), (WRONG_ARGS, "bogus")],
    ids=["import error", "misspelled hook", "wrong arguments"],
)
def test_a_broken_plugin_is_skipped_and_logged_with_its_distribution(site: FakeSite, caplog, source: str, why: str) -> None:
    site.dist("team-broken", {"broken": source})
    site.dist("team-good", {"team-report": GOOD})
    with caplog.at_level(logging.WARNING, logger="roost.plugins"):
        pm = make_plugin_manager()
    assert "broken" not in names(pm) and "team-report" in names(pm)
    (record,) = [r for r in caplog.records if "broken" in r.getMessage()]
    assert "'broken'" in record.getMessage() and "team-broken" in record.getMessage() and why in record.getMessage()
    # Nothing half-registered is left behind: every remaining hook impl has a spec.
    assert all(impl.plugin_name != "broken" for caller in vars(pm.hook).values() for impl in caller.get_hookimpls())
    pm.check_pending()


@pytest.mark.parametrize("source", [BROKEN_IMPORT, MISSPELLED, WRONG_ARGS], ids=["import error", "misspelled hook", "wrong arguments"])
def test_strict_plugins_makes_a_broken_plugin_fatal(site: FakeSite, monkeypatch, source: str) -> None:
    site.dist("team-broken", {"broken": source})
    monkeypatch.setenv("ROOST_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"plugin 'broken' from team-broken failed to load"):
        make_plugin_manager()


def test_an_optional_hook_of_a_later_roost_is_not_an_error(site: FakeSite) -> None:
    site.dist("team-future", {"future": OPTIONAL})
    assert "future" in names(make_plugin_manager())


def test_describe_knows_distributions_pluggy_loaded(site: FakeSite) -> None:
    site.dist("team-policies", {"team-report": GOOD}, version="3.1")
    pm = new_manager()
    assert pm.load_setuptools_entrypoints("roost", name="team-report") == 1
    (row,) = describe_plugins(pm)
    assert (row["name"], row["source"], row["version"]) == ("team-report", "team-policies", "3.1")


def test_essential_plugins_cannot_be_blocked(monkeypatch) -> None:
    from roost_core import plugins

    monkeypatch.setattr(plugins, "ESSENTIAL", frozenset({"reach"}))
    with pytest.raises(PluginError, match="essential"):
        make_plugin_manager(autoload=False, disabled=["reach"])
