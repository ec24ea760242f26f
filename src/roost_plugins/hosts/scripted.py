"""The ``scripted`` host: an agent loop with no model, playing a scenario (tests, demos)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostSpec


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_core.hosts.scripted import ScriptedHost

    return ScriptedHost()


def scenario(given: Any, cwd: str, parent: tuple[Any, str | None] | None) -> Any:
    """The scenario a new scripted job plays (:attr:`HostSpec.scenario`): ``given``, checked
    to load (a relative path is read from the job's cwd, as the worker will), else for a
    child its parent scenario's ``models[model]`` table, a bundled scenario named
    ``model``, or the default (None). Raises ``ValueError`` for one that cannot load."""
    from roost_core.hosts.scripted import SCENARIO_DIR, load_scenario

    if given is None and parent is not None:
        given = child_scenario(*parent, scenario_dir=SCENARIO_DIR)
    if given is None:
        return None
    path = given
    if isinstance(given, str) and not os.path.isabs(given) and (Path(cwd) / given).is_file():
        path = str(Path(cwd) / given)
    load_scenario(path)  # a ScenarioError is a ValueError
    return given


def child_scenario(parent_scenario: Any, model: str | None, *, scenario_dir: Path) -> Any:
    """A scripted child's scenario: the parent scenario's ``models[model]`` table, a
    bundled scenario named ``model``, or the default (None)."""
    if isinstance(parent_scenario, dict) and model:
        models = parent_scenario.get("models")
        if isinstance(models, dict) and isinstance(models.get(model), dict):
            return models[model]
    # A model that names no bundled scenario (a real model's name) gets the default one.
    return model if model and (scenario_dir / f"{model}.toml").is_file() else None


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``scripted``: it writes roost's own session format, and plays a scenario
    (checked before its job is made)."""
    # The stand-in: what a session with no host of its own spawns on, and how to run
    # without a model.
    return [HostSpec(name="scripted", factory=make_host, scenario=scenario, stand_in=True)]
