"""A worker's plugins: the fork server's prepared manager when it blocks the same names,
else one of its own (a config edited since the fork server started, another block list)."""

from __future__ import annotations

import pytest

from roost_core.worker.main import PreparedPlugins, Worker, blocked_plugins, prepare_plugins


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    monkeypatch.delenv("ROOST_CONFIG", raising=False)
    monkeypatch.setenv("ROOST_DISABLE_PLUGINS", "repo-reach,json-envelope")
    return tmp_path


def test_a_worker_takes_the_prepared_manager_when_it_blocks_the_same_names(home):
    prepared = prepare_plugins()
    assert prepared is not None and prepared.blocked == {"repo-reach", "json-envelope"}
    worker = Worker("j1", "token", "/nowhere", prepared)
    assert worker.plugin_manager() is prepared.manager
    assert worker.plugin_manager().get_plugin("settle") is not None


def test_a_daemon_config_that_blocks_other_names_makes_the_worker_build_its_own(home):
    """The worker blocks what the config its daemon holds says (its hello's), not what the
    file says now."""
    prepared = prepare_plugins()
    (home / "roost.json").write_text("{not json")
    worker = Worker("j1", "token", "/nowhere", prepared)
    worker.take_config({"config": {"plugins": {"disable": ["settle"]}}})
    assert blocked_plugins(worker.config) == {"repo-reach", "json-envelope", "settle"}
    pm = worker.plugin_manager()
    assert pm is not prepared.manager and pm.is_blocked("settle")


def test_no_prepared_manager_builds_one(home, monkeypatch):
    monkeypatch.setenv("ROOST_DISABLE_PLUGINS", "settle")
    worker = Worker("j1", "token", "/nowhere", PreparedPlugins(frozenset(), object()))
    assert worker.plugin_manager().is_blocked("settle")
    assert Worker("j2", "token", "/nowhere").plugin_manager().is_blocked("settle")


def test_a_broken_config_prepares_nothing(home):
    (home / "roost.json").write_text("{not json")
    assert prepare_plugins() is None
